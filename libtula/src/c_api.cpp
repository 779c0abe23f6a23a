// libtula: the C API used by the SPANK plugin (see tula.h). Nothing here throws across the
// C boundary, prints, or exits. Every entry turns GSL's abort-on-error handler off first (a
// numerical failure then comes back as a status the models check, not an abort of slurmstepd),
// and its catch handlers copy the message into the caller's fixed buffer without allocating
// (an exception may be std::bad_alloc).
#include "tula/tula.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/models.hpp"
#include "tula/planner.hpp"
#include "tula/workload.hpp"
#include "util.hpp"

namespace {

// Largest batch script read, bytes.
constexpr size_t kMaxScript = 1 << 20;

// Copies at most cap - 1 bytes of `s` into `dst` and NUL-terminates (cap > 0).
void copy_out(char* dst, size_t cap, const std::string& s) {
    if (!dst || cap == 0) return;
    const size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

bool set(const char* s) { return s && s[0] != '\0'; }

// Copies "tula: " + `what` (the prefix only when `what` lacks it) into `dst` (cap bytes,
// NUL-terminated, truncated) without allocating: for catch handlers.
void copy_error(char* dst, size_t cap, const char* what) noexcept {
    if (!dst || cap == 0) return;
    static const char kPrefix[] = "tula: ";
    constexpr size_t kLen = sizeof kPrefix - 1;
    if (!what) what = "internal error";
    size_t n = 0;
    if (std::strncmp(what, kPrefix, kLen) != 0) {
        const size_t p = kLen < cap - 1 ? kLen : cap - 1;
        std::memcpy(dst, kPrefix, p);
        n = p;
    }
    const size_t len = strnlen(what, cap);
    const size_t m = len < cap - 1 - n ? len : cap - 1 - n;
    std::memcpy(dst + n, what, m);
    dst[n + m] = '\0';
}

// Reads at most kMaxScript bytes of a regular file without following a final symlink.
std::string read_script(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP) throw tula::Error("cannot read batch script " + path + ": it is a symbolic link");
        throw tula::Error("cannot read batch script " + path + ": " + std::strerror(e));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw tula::Error("cannot read batch script " + path + ": not a regular file");
    }
    std::string text;
    char buf[16384];
    while (text.size() < kMaxScript) {
        const size_t want = std::min(sizeof buf, kMaxScript - text.size());
        const ssize_t n = ::read(fd, buf, want);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int e = errno;
            ::close(fd);
            throw tula::Error("cannot read batch script " + path + ": " + std::strerror(e));
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

// tula.conf at `path`, or the built-in defaults when it does not exist.
tula::Config config_at(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return tula::Config();
    return tula::load_config(path);
}

int plan_job(const tula_job_query* q, tula_job_plan* out) {
    if (!q) throw tula::Error("tula_plan_job: no query");
    if (q->nodes < 1) throw tula::Error("tula_plan_job: the node count must be >= 1 (got " + std::to_string(q->nodes) + ")");
    const std::string conf = set(q->conf_path) ? q->conf_path : TULA_DEFAULT_CONF;
    const tula::Config cfg = config_at(conf);

    std::string workload;
    int epochs = 0;
    int64_t limit_train = 0;  // the script's --limit-train (0: the whole dataset)
    // the batch at which the epochs define the target (TrainCommand::reference_batch)
    int reference_batch = tula::kTrainerDefaultBatch;
    std::string optimizer;  // the script's --optimizer (TrainCommand::optimizer)
    if (set(q->workload)) {
        workload = q->workload;
        char err[TULA_MSG_MAX];
        if (tula_check_workload(q->workload, err, sizeof err) != 0) throw tula::Error(err);
        if (set(q->script_path)) {  // epochs still come from the script when it can be read
            try {
                const tula::TrainCommand cmd = tula::parse_train_command(read_script(q->script_path));
                if (cmd.found) epochs = cmd.epochs;
                if (cmd.found) limit_train = cmd.limit_train;
                if (cmd.found) reference_batch = cmd.reference_batch();
                if (cmd.found) optimizer = cmd.optimizer;
            } catch (const tula::Error&) {
            }
        }
    } else {
        if (!set(q->script_path))
            throw tula::Error("no workload: give --tula-workload=MODEL@DATASET or a batch script with a tula-train line");
        const tula::TrainCommand cmd = tula::parse_train_command(read_script(q->script_path));
        if (!cmd.problem.empty()) throw tula::Error(cmd.problem + " in " + q->script_path);
        if (!cmd.found)
            throw tula::Error(std::string("no `tula-train --model MODEL` line and no `# tula: workload=MODEL@DATASET` "
                                          "directive in ") +
                              q->script_path + "; add the directive or pass --tula-workload=MODEL@DATASET");
        workload = cmd.workload();
        epochs = cmd.epochs;
        limit_train = cmd.limit_train;
        reference_batch = cmd.reference_batch();
        optimizer = cmd.optimizer;
    }
    if (epochs <= 0) epochs = cfg.default_epochs;

    std::vector<std::string> dbs;
    std::vector<std::string> warnings;
    // The system database only when nobody but its administrator can write it; else one
    // warning says why (tula::system_db_distrust).
    const std::string system_db = set(q->system_db) ? std::string(q->system_db) : cfg.system_db;
    const std::string distrust = tula::system_db_distrust(system_db, static_cast<uid_t>(cfg.admin_uid));
    if (distrust.empty()) dbs.push_back(system_db);
    else warnings.push_back(distrust);
    try {
        dbs.push_back(tula::user_db_path(q->xdg_data_home, q->home));
    } catch (const tula::Error&) {
        // no HOME: the system database alone
    }
    tula::PolicySpec policy = q->policy ? tula::parse_policy_spec(q->policy) : tula::PolicySpec{};
    policy.reference_batch = reference_batch;
    policy.optimizer = optimizer;
    tula::Plan plan;
    try {
        plan = tula::plan_workload(cfg, dbs, workload, epochs, 0, q->nodes, policy, &warnings, limit_train);
    } catch (const tula::Error& e) {
        // a plan that failed for want of the skipped system database says why it was skipped
        if (distrust.empty()) throw;
        throw tula::Error(std::string(e.what()) + " (warning: " + distrust.substr(6) + ")");
    }
    const tula::Candidate& c = plan.choice();
    out->nodes = c.nodes;
    out->global_batch = c.global_batch;
    out->epochs = c.epochs;
    out->predicted_seconds = c.total_seconds;
    copy_out(out->workload, sizeof out->workload, workload);
    copy_out(out->partition, sizeof out->partition, c.partition);
    out->ranks_per_node = c.ranks_per_node;
    out->gpus_per_node = c.gpus_per_node;
    char head[160];
    std::snprintf(head, sizeof head, "tula: %s on %d node%s: global batch %d, predicted %.0f s for %d epochs: ",
                  workload.c_str(), c.nodes, c.nodes == 1 ? "" : "s", c.global_batch, c.total_seconds, c.epochs);
    std::string msg = head + plan.reason;
    if (!warnings.empty()) {
        std::string w = warnings.front();
        if (w.rfind("tula: ", 0) == 0) w = w.substr(6);
        msg += " (warning: " + w + ")";
    }
    copy_out(out->message, sizeof out->message, msg);
    return 0;
}

}  // namespace

extern "C" int tula_plan_job(const tula_job_query* q, tula_job_plan* out) {
    tula::numerics_never_abort();
    if (!out) return -1;
    try {
        std::memset(out, 0, sizeof *out);
        return plan_job(q, out);
    } catch (const std::exception& e) {
        std::memset(out, 0, sizeof *out);
        copy_error(out->message, sizeof out->message, e.what());
    } catch (...) {
        std::memset(out, 0, sizeof *out);
        copy_error(out->message, sizeof out->message, "tula: internal error while planning the job");
    }
    return -1;
}
