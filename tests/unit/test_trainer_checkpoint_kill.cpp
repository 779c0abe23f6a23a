// Unit tests of a tula-train checkpoint writer killed by SIGKILL (kill -9): a child process
// writes numbered checkpoints to one path and dies while it writes; the path then still reads
// as a complete checkpoint equal to one that was written in full, never the killed write's
// partial or finished temporary file, and the next write (or remove_checkpoint_temporaries,
// which a resume calls) leaves the checkpoint alone in its directory.
//  - at fixed moments: the child's file size limit (RLIMIT_FSIZE) stops its write at a given
//    byte of the temporary file, where SIGXFSZ's handler sends it SIGKILL: in the fixed
//    header, in the JSON header, in the tensors, one byte short of the end;
//  - at varied moments: the child writes in a loop and is killed after a growing delay, or
//    as soon as a temporary file appears.
#include <cppunit/extensions/HelperMacros.h>

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "train/checkpoint.hpp"

using namespace tula::train;

namespace {

constexpr size_t kFloats = size_t(1) << 20;  // 4 MiB of parameters: a write takes a while

// Checkpoint number k: every field that varies is a function of k.
Checkpoint numbered(int64_t k) {
    Checkpoint c;
    c.config = {{"model", "kill-test"}};
    c.epoch = 1 + static_cast<int32_t>(k % 7);
    c.step_in_epoch = k % 13;
    c.global_step = k;
    c.epoch_seconds = 0.5 * static_cast<double>(k);
    c.lr = 0.01;
    c.rank_sums = {static_cast<double>(k), 2.0 * static_cast<double>(k)};
    c.noise_estimator = nlohmann::json::object();
    c.warmup = nlohmann::json::object();
    c.params.resize(kFloats);
    for (size_t i = 0; i < kFloats; ++i) c.params[i] = static_cast<float>(k) + static_cast<float>(i % 1000) * 0.001f;
    c.state = {static_cast<float>(k)};
    c.opt_t = k;
    c.parts = {static_cast<double>(k)};
    return c;
}

// Asserts that `got` is numbered(got.global_step), field for field, with the number in [lo, hi].
void assert_numbered(const Checkpoint& got, int64_t lo, int64_t hi) {
    CPPUNIT_ASSERT_MESSAGE("checkpoint number " + std::to_string(got.global_step) + " not in [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + "]",
                           got.global_step >= lo && got.global_step <= hi);
    const Checkpoint want = numbered(got.global_step);
    tula_test::assert_fields_equal(want, got, &Checkpoint::config, &Checkpoint::epoch, &Checkpoint::step_in_epoch,
                                   &Checkpoint::epoch_seconds, &Checkpoint::opt_t);
    CPPUNIT_ASSERT(want.rank_sums == got.rank_sums && want.parts == got.parts);
    CPPUNIT_ASSERT(want.params == got.params && want.state == got.state);
}

// The names in directory `dir` but "." and "..", sorted.
std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> v;
    DIR* d = opendir(dir.c_str());
    CPPUNIT_ASSERT(d != nullptr);
    while (dirent* e = readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") v.push_back(e->d_name);
    closedir(d);
    std::sort(v.begin(), v.end());
    return v;
}

// The temporary files of "a.ckpt" in `dir` (write_checkpoint's "a.ckpt.tmp.XXXXXX").
std::vector<std::string> temporaries(const std::string& dir) {
    std::vector<std::string> v;
    for (const std::string& n : entries(dir))
        if (n.rfind("a.ckpt.tmp.", 0) == 0) v.push_back(n);
    return v;
}

extern "C" void kill_self(int) { ::kill(::getpid(), SIGKILL); }

// Waits for child `pid` and asserts that SIGKILL ended it.
void reap_killed(pid_t pid) {
    int status = 0;
    CPPUNIT_ASSERT_EQUAL(pid, waitpid(pid, &status, 0));
    CPPUNIT_ASSERT_MESSAGE("the writer was not ended by SIGKILL", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

// A child that writes numbered(k) to `path` with its files limited to `limit` bytes: the write
// that would pass the limit raises SIGXFSZ, whose handler sends the child SIGKILL.
pid_t writer_killed_at(const std::string& path, int64_t k, rlim_t limit) {
    const pid_t pid = fork();
    CPPUNIT_ASSERT(pid >= 0);
    if (pid == 0) {
        alarm(30);  // never outlives a test that went wrong
        const Checkpoint c = numbered(k);
        struct sigaction sa {};
        sa.sa_handler = kill_self;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGXFSZ, &sa, nullptr);
        const rlimit rl{limit, limit};
        setrlimit(RLIMIT_FSIZE, &rl);
        try {
            write_checkpoint(path, c);
        } catch (...) {
        }
        _exit(0);  // the write finished: reap_killed fails the test
    }
    return pid;
}

// A child that writes numbered(k), numbered(k + 1), ... to `path` until it is killed.
pid_t writer_in_loop(const std::string& path, int64_t k) {
    const pid_t pid = fork();
    CPPUNIT_ASSERT(pid >= 0);
    if (pid == 0) {
        alarm(30);
        try {
            for (;; ++k) write_checkpoint(path, numbered(k));
        } catch (...) {
        }
        _exit(1);
    }
    return pid;
}

void sleep_us(long us) {
    const timespec ts{us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, nullptr);
}

// After a kill: the checkpoint reads as numbered(k), k in [lo, hi], and a finished temporary
// file, if one was left, holds a later number (it is not what the path reads). Returns k.
int64_t check_loaded(const std::string& dir, int64_t lo, int64_t hi) {
    const Checkpoint got = read_checkpoint(dir + "/a.ckpt");
    assert_numbered(got, lo, hi);
    for (const std::string& t : temporaries(dir)) {
        try {
            const Checkpoint tmp = read_checkpoint(dir + "/" + t);
            CPPUNIT_ASSERT(tmp.global_step > got.global_step);
        } catch (const CheckpointError&) {  // a partial write: unreadable, as it should be
        }
    }
    return got.global_step;
}

// numbered(next) written after a kill leaves a.ckpt alone in `dir`, and reads back.
void check_next_write_alone(const std::string& dir, int64_t next) {
    write_checkpoint(dir + "/a.ckpt", numbered(next));
    CPPUNIT_ASSERT(entries(dir) == std::vector<std::string>{"a.ckpt"});
    assert_numbered(read_checkpoint(dir + "/a.ckpt"), next, next);
}

}  // namespace

class TrainerCheckpointKillTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerCheckpointKillTest);
    CPPUNIT_TEST(test_killed_at_fixed_bytes);
    CPPUNIT_TEST(test_killed_at_varied_moments);
    CPPUNIT_TEST(test_remove_temporaries);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_killed_at_fixed_bytes() {
        const tula_test::TempDir d("ckpt-kill");
        const std::string p = d / "a.ckpt";
        write_checkpoint(p, numbered(1));
        struct stat sb;
        CPPUNIT_ASSERT_EQUAL(0, stat(p.c_str(), &sb));
        const rlim_t size = static_cast<rlim_t>(sb.st_size);
        int64_t k = 1;
        // before the first byte, in the fixed header, after it, in the tensors, one byte short
        for (const rlim_t limit : {rlim_t(0), rlim_t(1), rlim_t(20), rlim_t(36), rlim_t(200), size / 2, size - 1}) {
            reap_killed(writer_killed_at(p, k + 1, limit));
            CPPUNIT_ASSERT_EQUAL(k, check_loaded(d.path, k, k));
            // the killed write left its partial temporary file of `limit` bytes
            const std::vector<std::string> left = temporaries(d.path);
            CPPUNIT_ASSERT_EQUAL(size_t(1), left.size());
            CPPUNIT_ASSERT_EQUAL(0, stat((d / left[0]).c_str(), &sb));
            CPPUNIT_ASSERT_EQUAL(static_cast<off_t>(limit), sb.st_size);
            check_next_write_alone(d.path, k + 2);
            k += 2;
        }
    }

    void test_killed_at_varied_moments() {
        const tula_test::TempDir d("ckpt-kill");
        const std::string p = d / "a.ckpt";
        int64_t k = 0;
        write_checkpoint(p, numbered(k));
        for (int trial = 0; trial < 12; ++trial) {
            const pid_t pid = writer_in_loop(p, k + 1);
            if (trial % 2 == 0) {
                sleep_us(1000 + 2500L * trial);  // 1 to 26 ms: some writes done, one under way
            } else {  // as soon as a temporary file appears (within 50 ms), and a little later
                for (int i = 0; i < 1000 && temporaries(d.path).empty(); ++i) sleep_us(50);
                sleep_us(300L * trial);
            }
            kill(pid, SIGKILL);
            reap_killed(pid);
            // the child wrote far fewer than 100000 before it was killed
            check_loaded(d.path, k, k + 100000);
            check_next_write_alone(d.path, k + 100001);
            k += 100001;
        }
    }

    void test_remove_temporaries() {
        const tula_test::TempDir d("ckpt-kill");
        const std::string p = d / "a.ckpt";
        write_checkpoint(p, numbered(1));
        const std::vector<char> older = tula_test::read_bytes(p);
        write_checkpoint(p, numbered(2));
        // a finished temporary file that was never renamed, and names that are not temporaries
        tula_test::write_bytes(d / "a.ckpt.tmp.AbC123", older);
        tula_test::write_bytes(d / "a.ckpt.tmp.zz9zz9", {'x'});
        const std::vector<std::string> others = {"a.ckpt.e1", "a.ckpt.tmp.abc", "a.ckpt.tmp.abcdef.x", "a.ckpt.tmp.ab-def",
                                                 "b.ckpt.tmp.abcdef"};
        for (const std::string& n : others) tula_test::write_bytes(d / n, {'y'});
        assert_numbered(read_checkpoint(p), 2, 2);  // the path, never a temporary file
        CPPUNIT_ASSERT_EQUAL(2, remove_checkpoint_temporaries(p));
        std::vector<std::string> want = others;
        want.push_back("a.ckpt");
        std::sort(want.begin(), want.end());
        CPPUNIT_ASSERT(entries(d.path) == want);
        CPPUNIT_ASSERT_EQUAL(0, remove_checkpoint_temporaries(p));
        // a relative path: the temporaries of the current directory
        tula_test::write_bytes(d / "a.ckpt.tmp.QWErty", older);
        char cwd[4096];
        CPPUNIT_ASSERT(getcwd(cwd, sizeof cwd) != nullptr);
        CPPUNIT_ASSERT_EQUAL(0, chdir(d.path.c_str()));
        const int removed = remove_checkpoint_temporaries("a.ckpt");
        CPPUNIT_ASSERT_EQUAL(0, chdir(cwd));
        CPPUNIT_ASSERT_EQUAL(1, removed);
        CPPUNIT_ASSERT(entries(d.path) == want);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerCheckpointKillTest);
