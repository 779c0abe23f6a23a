// tula-train: stopping before the job's time limit and requeueing the job (tula-jobs(7), "TIME
// LIMIT, CHECKPOINT AND REQUEUE"): the time left from Slurm, the stop rule of tula/stop.hpp,
// and `scontrol requeue`.
#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>

#include "app/app.hpp"
#include "tula/conf.hpp"
#include "tula/stop.hpp"
#include "tula/tula.h"

namespace tula {
namespace train {
namespace app {
namespace {

// $SLURM_JOB_ID when it is a job id (1 to 10 digits), else "".
std::string job_id() {
    const char* j = std::getenv("SLURM_JOB_ID");
    const std::string id = j ? j : "";
    if (id.empty() || id.size() > 10) return "";
    for (char c : id)
        if (!std::isdigit(static_cast<unsigned char>(c))) return "";
    return id;
}

// Runs `cmd` through the shell; its first output line (at most 255 bytes) in *line and its
// exit status (-1: could not run or killed).
int run_line(const std::string& cmd, std::string* line) {
    std::FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) return -1;
    char buf[256] = {0};
    if (std::fgets(buf, sizeof buf, f)) *line = buf;
    while (std::fgets(buf, sizeof buf, f)) {
    }
    const int st = ::pclose(f);
    while (!line->empty() && std::isspace(static_cast<unsigned char>(line->back()))) line->pop_back();
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double wall_now() { return static_cast<double>(std::time(nullptr)); }

// A plain decimal environment variable (at most 32 bytes), or 0.
double env_number(const char* name) {
    const char* p = std::getenv(name);
    double v = 0;
    if (!p || !*p || std::strlen(p) > 32 || tula_parse_plain_decimal(p, 33, &v) != 0 || !(v > 0)) return 0;
    return v;
}

// The plan's seconds per step: $TULA_PREDICTED_SECONDS (the plan's training of this job's row,
// set by the SPANK plugin) over the run's steps, when the run trains that row (its global batch
// is $TULA_BATCH_SIZE and its epochs $TULA_EPOCHS); 0 when the job was not planned or trains
// another batch or epochs than the plan's (the user fixed them).
double predicted_step_seconds(const TrainHooks& hooks) {
    if (hooks.total_steps <= 0 || env_number("TULA_BATCH_SIZE") != hooks.global_batch ||
        env_number("TULA_EPOCHS") != hooks.epochs)
        return 0;
    return env_number("TULA_PREDICTED_SECONDS") / static_cast<double>(hooks.total_steps);
}

// The job's time limit in minutes from Slurm's SLURM_JOB_START_TIME and SLURM_JOB_END_TIME (Unix
// seconds), or 0 when they are not both set.
int current_limit_minutes() {
    const double start = env_number("SLURM_JOB_START_TIME"), end = env_number("SLURM_JOB_END_TIME");
    return start > 0 && end > start ? static_cast<int>(std::lround((end - start) / 60.0)) : 0;
}

// A part that met its limit more than kSlowerThanPlanned slower than its plan: one line that
// says so (measured against predicted step), and the job's time limit raised to what the rest
// needs at the measured speed (next_part_time_limit with tula.conf's margin and overhead), so
// that the next part does not meet the same wrong limit; never lowered. Slurm lets only
// operators raise a limit: a refusal is said in one line and the job goes on with its limit.
void report_slower_than_planned(const TrainHooks& hooks, const std::string& id) {
    if (hooks.part_steps <= 0) return;
    const double measured = hooks.part_train_seconds / static_cast<double>(hooks.part_steps);
    const double predicted = predicted_step_seconds(hooks);
    const double ratio = slower_than_planned(measured, predicted);
    if (ratio <= 0) return;
    char line[256];
    std::snprintf(line, sizeof line, "%.4g s per step, %.2fx the plan's %.4g s", measured, ratio, predicted);
    say(true, "tula-train: this part ran slower than planned: " + std::string(line) + " over " +
                  std::to_string(hooks.part_steps) + " steps");
    const Config cfg = site_config_from_env().value_or(Config());
    const int minutes = next_part_time_limit(static_cast<double>(hooks.steps_left), measured, 0, cfg.time_margin,
                                             cfg.time_overhead, signal_seconds(hooks.longest_step, 0));
    if (const int now = current_limit_minutes(); now >= minutes) {
        say(true, "tula-train: the time limit of job " + id + " (" + std::to_string(now) + " min) holds the " +
                      std::to_string(hooks.steps_left) + " steps left at the measured speed");
        return;
    }
    std::string out;
    const int rc = run_line("timeout -k 1 30 scontrol update JobId=" + id + " TimeLimit=" + std::to_string(minutes) +
                                " 2>&1",
                            &out);
    if (rc == 0)
        say(true, "tula-train: the time limit of job " + id + " is now " + std::to_string(minutes) + " min, for the " +
                      std::to_string(hooks.steps_left) + " steps left at the measured speed");
    else
        warn("could not set the time limit of job " + id + " to " + std::to_string(minutes) +
             " min from the measured speed (scontrol update: " + (out.empty() ? "exit status " + std::to_string(rc) : out) +
             "; only an operator may raise a limit); the next part keeps its limit");
}

}  // namespace

std::optional<double> job_time_left() {
    const std::string id = job_id();
    if (id.empty()) return std::nullopt;
    if (const char* end = std::getenv("SLURM_JOB_END_TIME"); end && *end) {
        char* stop = nullptr;
        const double e = std::strtod(end, &stop);
        if (stop && *stop == '\0' && std::isfinite(e) && e > 0) return e - wall_now();
    }
    // squeue retries for a minute when it finds no slurm.conf: bounded by timeout(1)
    std::string line;
    if (run_line("timeout -k 1 10 squeue -h -j " + id + " -o %L 2>/dev/null", &line) != 0 || line.size() > 31)
        return std::nullopt;
    const long s = tula_parse_duration(line.c_str(), nullptr, 0);  // also refuses UNLIMITED, INVALID
    if (s <= 0) return std::nullopt;
    return static_cast<double>(s);
}

void watch_time_limit(const Options& o, bool root, size_t params, TrainHooks* hooks) {
    if (o.requeue != "auto" || !root || hooks->checkpoint_path.empty()) return;
    const std::optional<double> left = job_time_left();
    if (!left) return;
    const double end = wall_now() + *left;
    const double ck_seconds = checkpoint_write_seconds(checkpoint_bytes(static_cast<int64_t>(params)));
    hooks->time_is_up = [end, ck_seconds](double longest_step) {
        return wall_now() + stop_reserve_seconds(longest_step, ck_seconds) >= end;
    };
    if (!o.quiet)
        say(true, "tula-train: the job's time limit is in " + std::to_string(static_cast<long>(*left)) +
                      " s; training stops about " + std::to_string(static_cast<long>(stop_reserve_seconds(0, ck_seconds))) +
                      " s plus two steps before it, writes " + hooks->checkpoint_path + " and requeues the job");
}

int finish_stopped(const Options& o, bool root, const TrainHooks& hooks, size_t epochs_done) {
    if (!root) return 3;
    const std::string ck = hooks.checkpoint_path;
    const std::string id = job_id();
    if (!hooks.requeue || o.requeue != "auto" || id.empty()) {
        say(true, "tula-train: stopped by a signal after " + std::to_string(epochs_done) +
                      " finished epochs; checkpoint written to " + ck + "; continue with --resume --checkpoint " + ck);
        return 3;
    }
    report_slower_than_planned(hooks, id);
    std::string line;
    const int rc = run_line("timeout -k 1 30 scontrol requeue " + id + " 2>&1", &line);
    if (rc == 0) {
        say(true, "tula-train: stopped before the time limit after " + std::to_string(epochs_done) +
                      " finished epochs; checkpoint written to " + ck + "; job " + id +
                      " requeued: it resumes from the checkpoint when it starts again");
    } else {
        warn("stopped after " + std::to_string(epochs_done) + " finished epochs with the checkpoint written to " + ck +
             ", but job " + id + " could not be requeued (scontrol requeue: " +
             (line.empty() ? "exit status " + std::to_string(rc) : line) +
             "; a job submitted with --no-requeue is not); continue with --resume --checkpoint " + ck);
    }
    return 3;
}

}  // namespace app
}  // namespace train
}  // namespace tula
