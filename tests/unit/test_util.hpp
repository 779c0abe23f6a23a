// Helpers shared by the unit tests (tests/unit/test_*.cpp).
#pragma once
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <stdexcept>
#include <string>

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

}  // namespace tula_test
