// Helpers shared by the unit tests (tests/unit/test_*.cpp).
#pragma once
#include <cppunit/extensions/HelperMacros.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tula/error.hpp"

namespace tula_test {

/// A fresh private directory /tmp/tula-test-TAG-XXXXXX (mkdtemp, mode 0700), removed with
/// everything below it on destruction; modes are reset to 0700 on the way, so that a test may
/// leave read-only files and directories behind. Errors: std::runtime_error when mkdtemp fails.
struct TempDir {
    std::string path;
    explicit TempDir(const std::string& tag = "tmp") {
        std::string t = "/tmp/tula-test-" + tag + "-XXXXXX";
        if (!mkdtemp(&t[0])) throw std::runtime_error("mkdtemp " + t + " failed");
        path = t;
    }
    ~TempDir() {
        chmod(path.c_str(), 0700);
        nftw(
            path.c_str(),
            [](const char* p, const struct stat*, int, struct FTW*) {
                chmod(p, 0700);
                return ::remove(p);
            },
            16, FTW_DEPTH | FTW_PHYS);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    /// The path of `name` inside the directory.
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

/// The message of the exception of type E (default tula::Error) that f() throws; "" when it
/// throws nothing. Other exceptions propagate (and fail the test).
template <class E = tula::Error, class F>
std::string error_of(F f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "";
}

/// True if `part` occurs in `s`.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The whole epochs a candidate at global batch B trains when the epochs follow the batch, by
// hand: E(B) = E_ref (1 + B/B_noise) / (1 + B_ref/B_noise) (McCandlish et al. 2018, eq. 2.11),
// rounded up to a whole epoch.
inline int hand_epochs(double noise_scale, int B, int epochs_ref, int B_ref) {
    const double e = epochs_ref * (1.0 + B / noise_scale) / (1.0 + B_ref / noise_scale);
    int whole = static_cast<int>(e);
    if (whole < e - 1e-9) ++whole;
    return whole < 1 ? 1 : whole;
}

/// Asserts that f() throws E (or a subclass) with a message containing `needle`.
template <class E = tula::Error, class F>
void assert_throws_with(F f, const std::string& needle) {
    const std::string m = error_of<E>(f);
    CPPUNIT_ASSERT_MESSAGE("expected an exception mentioning '" + needle + "', got '" + m + "'",
                           !m.empty() && contains(m, needle));
}

/// The CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): what it computed, not
/// how long it waited for a core on a loaded machine. The tests' time bounds compare these.
inline double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// What f() returns (seconds it measured), computed in a child process (fork) whose answer is
/// awaited at most `limit` seconds: +infinity when it has not answered by then (it is killed)
/// or failed, so that a quadratic algorithm fails a time bound instead of stalling the suite.
template <class F>
double seconds_in_child(F f, double limit) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    int fds[2];
    if (pipe(fds) != 0) return kInf;
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kInf;
    }
    if (pid == 0) {
        close(fds[0]);
        double v = kInf;
        try {
            v = f();
        } catch (...) {
        }
        const ssize_t w = write(fds[1], &v, sizeof v);
        _exit(w == static_cast<ssize_t>(sizeof v) ? 0 : 1);
    }
    close(fds[1]);
    double v = kInf;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(limit * 1000)) != 1 || read(fds[0], &v, sizeof v) != static_cast<ssize_t>(sizeof v))
        v = kInf;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(fds[0]);
    return v;
}

/// Runs SQL on `path` with sqlite3 directly (not through libtula, without its defences);
/// a CppUnit failure when it fails.
inline void raw_exec(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_open(path.c_str(), &db));
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    const std::string m = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    CPPUNIT_ASSERT_EQUAL_MESSAGE(m, SQLITE_OK, rc);
}

/// First column of the first row of `sql` as text ("" for none or NULL), read with sqlite3
/// directly (waiting up to 10 s for a lock).
inline std::string raw_query(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr));
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt* st = nullptr;
    CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr));
    std::string v;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char* t = sqlite3_column_text(st, 0);
        v = t ? reinterpret_cast<const char*>(t) : "";
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/// Asserts want.*f == got.*f for each member pointer f (CPPUNIT_ASSERT_EQUAL's message shows
/// the two values of the first that differs).
template <class T, class... M>
void assert_fields_equal(const T& want, const T& got, M T::*... fields) {
    (CPPUNIT_ASSERT_EQUAL(want.*fields, got.*fields), ...);
}

/// The bytes of the file at `path` (empty when it cannot be read).
inline std::vector<char> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Replaces the file at `path` with `bytes`.
inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A raw sqlite3 connection to `path` (not libtula's) that has run `sql`, which opens a
/// transaction and so holds the database's lock; release() (or the destructor) commits and
/// closes it. Errors: a CppUnit failure when the connection or `sql` fails.
class RawLockHolder {
public:
    RawLockHolder(const std::string& path, const std::string& sql) {
        CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_open(path.c_str(), &db_));
        CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr));
    }
    ~RawLockHolder() { release(); }
    RawLockHolder(const RawLockHolder&) = delete;
    RawLockHolder& operator=(const RawLockHolder&) = delete;
    /// Commits the transaction, waiting up to 30 s for the readers' shared locks (a rollback
    /// journal's commit needs an exclusive lock); returns sqlite3_exec's result code (SQLITE_OK).
    int release() {
        if (!db_) return SQLITE_OK;
        sqlite3_busy_timeout(db_, 30000);
        const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
        sqlite3_close(db_);
        db_ = nullptr;
        return rc;
    }

private:
    sqlite3* db_ = nullptr;
};

}  // namespace tula_test
