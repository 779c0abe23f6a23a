// libtula: atomic publication of a profile database file (db.hpp, StagedDb): what `tula
// profile` does to the system database, which every user reads at every submission, so that a
// reader sees the old file or the new one and never a half-written one (write a new file in the
// same directory, fsync it, rename(2) it over the old one, fsync the directory: rename is atomic
// within one file system, POSIX.1-2017 rename()).
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tula/db.hpp"
#include "tula/error.hpp"

namespace tula {
namespace {

std::string dir_of(const std::string& p) {
    const size_t slash = p.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

bool exists(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
}

bool nonempty(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && st.st_size > 0;
}

// Creates every missing directory of `dir` with mode 0755 whatever the umask (chmod after
// mkdir), so that users can reach a system database below it. Throws tula::Error.
void make_public_dirs(const std::string& dir, const std::string& target) {
    if (dir.empty() || dir == "." || dir == "/") return;
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) throw Error("cannot write " + target + ": " + dir + " is not a directory");
        return;
    }
    make_public_dirs(dir_of(dir), target);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        throw Error("cannot write " + target + ": mkdir " + dir + ": " + std::strerror(errno));
    if (::chmod(dir.c_str(), 0755) != 0)
        throw Error("cannot write " + target + ": chmod 0755 " + dir + ": " + std::strerror(errno));
}

// fsync(2) of a file or directory. Throws tula::Error.
void sync_path(const std::string& p, bool directory, const std::string& target) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
    if (fd < 0) throw Error("cannot publish " + target + ": open " + p + ": " + std::strerror(errno));
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (rc != 0) throw Error("cannot publish " + target + ": fsync " + p + ": " + std::strerror(e));
}

// Opens `path` with SQLite (flags), a 60 s busy timeout and the defensive flag; runs `sql`
// and returns the first column of its first row ("" when none). Throws tula::Error.
std::string sqlite_value(const std::string& path, int flags, const char* sql, const std::string& target) {
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    std::string out, err;
    if (rc == SQLITE_OK) {
        sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
        sqlite3_busy_timeout(db, kWriteBusyTimeoutMs);
        sqlite3_stmt* st = nullptr;
        rc = sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) {
                const unsigned char* t = sqlite3_column_text(st, 0);
                out = t ? reinterpret_cast<const char*>(t) : "";
                rc = SQLITE_OK;
            } else if (rc == SQLITE_DONE) {
                rc = SQLITE_OK;
            }
        }
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK) err = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    if (rc != SQLITE_OK) throw Error("cannot publish " + target + ": " + path + ": `" + sql + "`: " + err);
    return out;
}

}  // namespace

StagedDb StagedDb::begin(const std::string& target) {
    if (target.empty() || target.back() == '/') throw Error("cannot stage a profile database: the path is empty");
    const std::string dir = dir_of(target);
    make_public_dirs(dir, target);
    const size_t slash = target.find_last_of('/');
    std::string tmpl = dir + "/." + (slash == std::string::npos ? target : target.substr(slash + 1)) + ".tula-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    if (fd < 0) throw Error("cannot write " + target + ": cannot create a temporary file in " + dir + ": " + std::strerror(errno));
    ::close(fd);
    StagedDb s(target, buf.data());  // removes the temporary file if a step below throws
    struct stat st;
    if (::stat(target.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode)) throw Error("cannot write " + target + ": it is not a regular file");
        // SQLite's online backup: a consistent copy of every committed page, WAL included.
        sqlite3* src = nullptr;
        sqlite3* dst = nullptr;
        int rc = sqlite3_open_v2(target.c_str(), &src, SQLITE_OPEN_READONLY, nullptr);
        if (rc == SQLITE_OK) rc = sqlite3_open_v2(s.tmp_.c_str(), &dst, SQLITE_OPEN_READWRITE, nullptr);
        std::string err;
        if (rc == SQLITE_OK) {
            sqlite3_db_config(src, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
            sqlite3_busy_timeout(src, kWriteBusyTimeoutMs);
            sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
            if (!b) {
                rc = sqlite3_errcode(dst);
                err = sqlite3_errmsg(dst);
            } else {
                do {
                    rc = sqlite3_backup_step(b, -1);
                    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(20);
                } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
                const int frc = sqlite3_backup_finish(b);
                if (rc == SQLITE_DONE) rc = frc;
                if (rc != SQLITE_OK) err = sqlite3_errstr(rc);
            }
        } else {
            err = sqlite3_errstr(rc);
        }
        sqlite3_close_v2(dst);
        sqlite3_close_v2(src);
        if (rc != SQLITE_OK) throw Error("cannot copy " + target + " for an atomic update: " + err);
    }
    return s;
}

StagedDb::StagedDb(StagedDb&& o) noexcept : target_(std::move(o.target_)), tmp_(std::move(o.tmp_)) { o.tmp_.clear(); }

StagedDb& StagedDb::operator=(StagedDb&& o) noexcept {
    if (this != &o) {
        discard();
        target_ = std::move(o.target_);
        tmp_ = std::move(o.tmp_);
        o.tmp_.clear();
    }
    return *this;
}

StagedDb::~StagedDb() { discard(); }

void StagedDb::discard() noexcept {
    if (tmp_.empty()) return;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((tmp_ + suffix).c_str());
    tmp_.clear();
}

void StagedDb::publish() {
    if (tmp_.empty()) throw Error("cannot publish " + target_ + ": nothing staged (already published)");
    // 1. One self-contained file: WAL frames checkpointed into it, rollback journal from now on.
    const std::string mode = sqlite_value(tmp_, SQLITE_OPEN_READWRITE, "PRAGMA journal_mode=DELETE", target_);
    if (mode != "delete" || nonempty(tmp_ + "-wal"))
        throw Error("cannot publish " + target_ + ": " + tmp_ + " is still in WAL mode (another process has it open)");
    ::unlink((tmp_ + "-shm").c_str());
    ::unlink((tmp_ + "-wal").c_str());
    // 2. It must be a tula profile database that readers accept (schema allow-list included).
    { ProfileDb check = ProfileDb::open(tmp_, ProfileDb::Mode::ReadOnly); }
    // 3. Readable by users, writable by the administrator alone.
    struct stat st;
    const mode_t m = ::stat(target_.c_str(), &st) == 0 ? (st.st_mode & 0755) | 0600 : 0644;
    if (::chmod(tmp_.c_str(), m) != 0)
        throw Error("cannot publish " + target_ + ": chmod " + tmp_ + ": " + std::strerror(errno));
    sync_path(tmp_, false, target_);
    // 4. A -wal or hot -journal of the old file would be applied to the new one by its next
    // reader: fold it into the old file first (a database in WAL mode held by another process
    // cannot be switched; then nothing is published).
    if (exists(target_) && (nonempty(target_ + "-wal") || exists(target_ + "-journal"))) {
        const std::string old = sqlite_value(target_, SQLITE_OPEN_READWRITE, "PRAGMA journal_mode=DELETE", target_);
        if (old != "delete" || nonempty(target_ + "-wal"))
            throw Error("cannot publish " + target_ + ": it is in WAL mode and held by another process; retry when "
                        "no tula-train or tula profile writes it");
    }
    // 5. The switch itself, then the directory entry on disk.
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
        throw Error("cannot publish " + target_ + ": rename " + tmp_ + ": " + std::strerror(errno));
    tmp_.clear();
    sync_path(dir_of(target_), true, target_);
}

}  // namespace tula
