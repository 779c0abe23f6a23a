// libFuzzer target: reading a hostile profile database file (tula::load_profiles and
// tula::plan_workload of lenet5@fashion-mnist, what `tula plan` does at every submission with a
// file a user can hand it). An input is either a database image alone, or "TULAFUZZ" followed
// by up to three chunks, each a 4-byte little-endian length and that many bytes: the database
// image, its -wal file and its -shm file (a chunk that is missing or cut short is an absent
// file). The files are written into one private temporary directory. Every input must be read
// or refused: warnings and errors are tula::Error messages starting with "tula: " (the
// database's own checks: schema allow-list, limits, deadline); anything else (a crash, a
// sanitizer report, another exception type, a run past libFuzzer's -timeout) is a bug.
// Built and run by `make fuzz`; seed corpus in tests/fuzz/corpus/db/.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/planner.hpp"

namespace {

// The private directory of this process's files (created once, removed at exit).
const std::string& work_dir() {
    static const std::string dir = [] {
        char t[] = "/tmp/tula-fuzz-db-XXXXXX";
        if (!mkdtemp(t)) std::abort();
        return std::string(t);
    }();
    return dir;
}

// Writes `n` bytes to `path`, or removes it when `present` is false.
void put(const std::string& path, const uint8_t* p, size_t n, bool present) {
    ::unlink(path.c_str());
    if (!present) return;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) std::abort();
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w <= 0) std::abort();
        p += w;
        n -= static_cast<size_t>(w);
    }
    ::close(fd);
}

void check_message(const std::string& m) {
    if (m.rfind("tula: ", 0) != 0) {
        std::fprintf(stderr, "message without the tula: prefix: %s\n", m.c_str());
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string db = work_dir() + "/profiles.db";
    // Split the input into the files.
    const uint8_t* part[3] = {data, nullptr, nullptr};
    size_t len[3] = {size, 0, 0};
    bool present[3] = {true, false, false};
    if (size >= 8 && std::memcmp(data, "TULAFUZZ", 8) == 0) {
        size_t off = 8;
        for (int i = 0; i < 3; ++i) {
            present[i] = false;
            if (size - off < 4) break;
            const uint32_t n = uint32_t(data[off]) | uint32_t(data[off + 1]) << 8 | uint32_t(data[off + 2]) << 16 |
                               uint32_t(data[off + 3]) << 24;
            off += 4;
            if (n > size - off) break;
            part[i] = data + off;
            len[i] = n;
            present[i] = true;
            off += n;
        }
        if (!present[0]) {
            part[0] = data;
            len[0] = 0;
            present[0] = true;  // an empty database file
        }
    }
    put(db, part[0], len[0], present[0]);
    put(db + "-wal", part[1], len[1], present[1]);
    put(db + "-shm", part[2], len[2], present[2]);
    ::unlink((db + "-journal").c_str());

    const std::string w = "lenet5@fashion-mnist";
    std::vector<std::string> warnings;
    std::vector<tula::RunRecord> runs;
    try {
        tula::load_profiles({db}, &warnings, w, &runs);
        for (const auto& m : warnings) check_message(m);
        warnings.clear();
        tula::Config cfg;
        cfg.max_nodes = 4;
        const tula::Plan plan = tula::plan_workload(cfg, {db}, w, 12, 4, 0, tula::Policy::Auto, &warnings);
        for (const auto& m : warnings) check_message(m);
        if (plan.candidates.empty() || plan.chosen >= plan.candidates.size()) std::abort();
    } catch (const tula::Error& e) {
        check_message(e.what());
    }
    return 0;
}
