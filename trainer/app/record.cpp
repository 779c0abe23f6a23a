// tula-train: what a finished run leaves behind. Its summary is a run file of the job contract
// (tula-jobs(7)); the run reaches the profile database only through `tula db record`, which
// reads that file, so tula-train itself opens no database.
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "app/app.hpp"
#include "train/metrics.hpp"
#include "tula/workload.hpp"

extern char** environ;

namespace tula {
namespace train {
namespace app {

nlohmann::json run_header(const Options& o, const RunShape& s, const Model& m, const Dataset& tr, const Dataset& te) {
    const tula::Workload w = workload_of(o, m, tr.count, te.count);
    return {{"type", "run"},
            {"workload", w.name},
            {"nodes", s.nodes},
            {"model", o.model},
            {"data", o.data},
            {"params", m.num_params()},
            {"activation_floats", w.activation_floats},
            {"train_examples", tr.count},
            {"test_examples", te.count},
            {"dataset_train_examples", w.train_examples},
            {"dataset_test_examples", w.test_examples},
            {"global_batch", o.batch},
            {"ranks", s.ranks},
            {"epochs", o.epochs},
            {"steps_per_epoch", train::epoch_steps(tr.count, o.batch)},
            {"seed", o.seed},
            {"optimizer", o.local_steps > 0 ? "local-sgd" : o.optimizer},
            {"hardware_class", s.hardware_class},
            {"host", host_name()}};
}

namespace {

// `path` + ".tmp" filled by `fill`, then renamed over `path`. Errors: std::runtime_error.
void write_file_atomically(const std::string& path, const std::function<void(MetricsLog&)>& fill) {
    const std::string tmp = path + ".tmp";
    try {
        MetricsLog f(tmp, false);
        fill(f);
    } catch (...) {
        std::remove(tmp.c_str());
        throw;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + why);
    }
}

// An executable regular file at `p`.
bool executable(const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::vector<double> run_part_seconds(const std::vector<EpochResult>& res, const TrainHooks& hooks) {
    if (!hooks.part_seconds.empty()) return hooks.part_seconds;
    double train_seconds = 0;
    for (const auto& r : res) train_seconds += r.seconds;
    return {train_seconds};
}

nlohmann::json run_summary_line(const Options& o, const std::vector<EpochResult>& res, const TrainHooks& hooks,
                                bool at_target) {
    double train_seconds = 0;
    for (const auto& r : res) train_seconds += r.seconds;
    const std::vector<double> parts = run_part_seconds(res, hooks);
    // Local SGD's batch test measures another quantity than the run's gradient noise scale
    const bool noise = o.local_steps == 0 && hooks.noise_scale > 0;
    nlohmann::json j = {{"type", "summary"},
                        {"train_seconds", train_seconds},
                        {"test_accuracy", res.empty() ? 0.0 : res.back().test_accuracy},
                        {"epochs_trained", res.size()},
                        {"stopped_at_target", at_target && res.size() < static_cast<size_t>(o.epochs)},
                        {"noise_scale", noise ? nlohmann::json(hooks.noise_scale) : nlohmann::json(nullptr)},
                        {"noise_observations", o.local_steps == 0 ? hooks.noise_observations : 0},
                        {"parts", parts.size()},
                        {"part_seconds", parts}};
    if (o.val_split > 0 && !res.empty()) j["val_accuracy"] = res.back().val_accuracy;
    return j;
}

std::string find_tula() {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        std::string dir(self);
        dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
        if (!dir.empty() && executable(dir + "/tula")) return dir + "/tula";
    }
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "";
    for (size_t a = 0; a <= p.size();) {
        size_t b = p.find(':', a);
        if (b == std::string::npos) b = p.size();
        const std::string d = p.substr(a, b - a);
        if (!d.empty() && executable(d + "/tula")) return d + "/tula";
        a = b + 1;
    }
    return "";
}

bool finish_file(const Options& o, const std::string& given, const std::function<void(MetricsLog&)>& fill,
                 const std::string& what) {
    if (given.empty() && o.no_db) return true;
    std::string file = given;
    bool temporary = false;
    if (file.empty()) {  // a private file for tula db record, removed afterwards
        const char* t = std::getenv("TMPDIR");
        const std::string dir = t && *t ? t : "/tmp";
        std::string tmpl = dir + "/tula-train-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        const int fd = ::mkstemp(buf.data());
        if (fd < 0) {
            warn("the " + what + " was not recorded in the profile database: cannot create a temporary file in " + dir +
                 ": " + std::strerror(errno) + " (set TMPDIR)");
            return false;
        }
        ::close(fd);
        file = buf.data();
        temporary = true;
    }
    try {
        write_file_atomically(file, fill);
    } catch (const std::exception& e) {
        warn(std::string(e.what()) + "; the " + what + " was not written" + (o.no_db ? "" : " nor recorded"));
        if (temporary) std::remove(file.c_str());
        return false;
    }
    const bool ok = o.no_db || record_file(o, file, what);
    if (temporary) std::remove(file.c_str());
    return ok;
}

bool record_file(const Options& o, const std::string& file, const std::string& what) {
    const std::string tula = find_tula();
    if (tula.empty()) {
        warn("the " + what + " was not recorded in the profile database: the tula command is neither beside tula-train "
             "nor on $PATH (write the file with " + (what == "run" ? "--summary" : "--metrics") +
             " FILE and record it with tula db record --metrics FILE)");
        return false;
    }
    std::vector<std::string> args = {tula, "db", "record", "--metrics", file};
    if (!o.db.empty()) {
        args.push_back("--db");
        args.push_back(o.db);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (o.quiet) posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, tula.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        warn("the " + what + " was not recorded in the profile database: cannot start " + tula + ": " + std::strerror(rc));
        return false;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        warn("the " + what + " was not recorded in the profile database: tula db record " +
             (WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                : "was killed by signal " + std::to_string(WTERMSIG(status))) +
             " (its message is above)");
    return ok;
}

}  // namespace app
}  // namespace train
}  // namespace tula
