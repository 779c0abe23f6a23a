// libtula: whether the system profile database may be trusted (db.hpp, system_db_distrust).
//
// Every user's `tula plan` reads the system database at each submission. Whoever can write the
// file, replace it in its directory or put a -wal / -journal file next to it decides what every
// user's planner reads; so it is read only when nobody but root or the administrator
// (tula.conf admin_uid) can do any of that.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "tula/db.hpp"

namespace tula {
namespace {

std::string mode_text(mode_t m) {
    char b[16];
    std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
    return b;
}

// What is wrong with the owner and mode of `st` ("" when nothing): `what` names the file in the
// message, `fix` is the path the chmod / chown advice names.
std::string check_owner_mode(const struct stat& st, uid_t admin_uid, const std::string& what, const std::string& fix) {
    const std::string tail = "; skipped: only its administrator may write it (";
    if (st.st_uid != 0 && st.st_uid != admin_uid)
        return what + " is owned by uid " + std::to_string(st.st_uid) + ", not by root or admin_uid " +
               std::to_string(admin_uid) + tail + "chown root " + fix + ", or set admin_uid in tula.conf)";
    if (st.st_mode & S_IWOTH)
        return what + " is world-writable (mode " + mode_text(st.st_mode) + ")" + tail + "chmod g-w,o-w " + fix + ")";
    if (st.st_mode & S_IWGRP)
        return what + " is group-writable (mode " + mode_text(st.st_mode) + ")" + tail + "chmod g-w,o-w " + fix + ")";
    return "";
}

}  // namespace

std::string system_db_distrust(const std::string& path, uid_t admin_uid) {
    if (path.empty()) return "";
    const std::string name = "tula: system database " + path;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return "";  // not there: readers skip it silently
        return name + " cannot be examined (" + std::strerror(errno) +
               "); skipped: the administrator must make it and its directory readable";
    }
    if (S_ISLNK(st.st_mode))
        return name + " is a symbolic link; skipped: a link may point anywhere, so the administrator must put the "
                      "database file itself at that path";
    if (!S_ISREG(st.st_mode)) return "";  // ProfileDb::open refuses it with its own message
    std::string why = check_owner_mode(st, admin_uid, name, path);
    if (!why.empty()) return why;

    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    struct stat ds;
    if (::stat(dir.c_str(), &ds) != 0)
        return name + ": its directory " + dir + " cannot be examined (" + std::strerror(errno) + "); skipped";
    why = check_owner_mode(ds, admin_uid, "tula: the directory " + dir + " of system database " + path, dir);
    if (!why.empty())
        return why + "; whoever can write the directory can replace the database or put a -wal file beside it";

    for (const char* suffix : {"-wal", "-shm", "-journal"}) {
        const std::string side = path + suffix;
        struct stat ss;
        if (::lstat(side.c_str(), &ss) != 0) continue;  // absent (or unreadable: SQLite fails on it)
        if (S_ISLNK(ss.st_mode))
            return name + ": its " + suffix + " file " + side + " is a symbolic link; skipped: the administrator must "
                          "remove it";
        why = check_owner_mode(ss, admin_uid, "tula: the " + std::string(suffix) + " file " + side + " of system database " + path,
                               side);
        if (!why.empty()) return why;
    }
    return "";
}

}  // namespace tula
