// tula CLI: the measuring runs of `tula profile`. See profile_jobs.hpp.
#include "profile_jobs.hpp"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>

#include "text.hpp"
#include "tula/error.hpp"

namespace tula::cli {
namespace {

// Pending reasons (squeue %r) of a job that will never start as submitted.
bool hopeless_reason(const std::string& r) {
    static const char* const kReasons[] = {"PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig",
                                           "BadConstraints",     "InvalidAccount",     "InvalidQOS",
                                           "QOSMaxNodePerJobLimit", "AssocMaxNodesPerJobLimit", "DependencyNeverSatisfied"};
    for (const char* k : kReasons)
        if (r == k) return true;
    return false;
}

// Set by SIGINT / SIGTERM while a profiling job runs: the job is cancelled before exiting.
volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }

// Installs on_interrupt for SIGINT and SIGTERM while it lives; restores the old handlers.
struct InterruptGuard {
    struct sigaction old_int {}, old_term {};
    InterruptGuard() {
        struct sigaction sa {};
        sa.sa_handler = on_interrupt;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
    }
    ~InterruptGuard() {
        sigaction(SIGINT, &old_int, nullptr);
        sigaction(SIGTERM, &old_term, nullptr);
    }
};

}  // namespace

// The hardware class tula-train records its samples under (its TULA_HARDWARE_CLASS): --hardware-class;
// else the class of the partition the measuring runs are in, looked up in tula.conf's sections
// (partition_class): for the jobs their --partition when it names one partition, for the runs
// on this node this job's $SLURM_JOB_PARTITION ("" outside Slurm). nullopt: the jobs run in
// the cluster's default partition, which tula-train looks up from its own $SLURM_JOB_PARTITION.
// Errors: UsageError for a --hardware-class that is not a class name; tula::Error when tula.conf
// cannot be read.
std::optional<std::string> profile_class(const JobOptions& jo, const CommonOptions& common, bool jobs) {
    if (jo.class_given) {
        if (!jo.hardware_class.empty() && !valid_class_name(jo.hardware_class))
            throw UsageError("--hardware-class '" + one_line(jo.hardware_class, 64) +
                             "' is not a class name (1 to 63 letters, digits, '_', '.', '-'; \"\" for the unknown class)");
        return jo.hardware_class;
    }
    const char* env = std::getenv("SLURM_JOB_PARTITION");
    const std::string part = jobs ? jo.partition : std::string(env ? env : "");
    if (jobs && (part.empty() || part.find(',') != std::string::npos)) return std::nullopt;
    if (part.empty()) return std::string();
    return partition_class(load_cli_config(common).config, part);
}

// The environment of a tula-train run that records hardware class `cls` (none: inherited).
EnvSet class_env(const std::optional<std::string>& cls) {
    EnvSet e;
    if (cls) e.push_back({"TULA_HARDWARE_CLASS", *cls});
    return e;
}

// Opens `db` read-only when it exists and is not empty (nullopt otherwise: a missing file, or
// the empty staged copy of a system database that did not exist yet, which no job has written
// so far). Errors: tula::Error when it has content that cannot be read.
std::optional<ProfileDb> open_existing(const std::string& db) {
    struct stat st;
    if (::stat(db.c_str(), &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0)) return std::nullopt;
    return ProfileDb::open(db, ProfileDb::Mode::ReadOnly);
}

// This host's name as tula-train records it with its samples (gethostname).
std::string this_host() {
    char h[256] = {0};
    if (::gethostname(h, sizeof h - 1) != 0) return "unknown";
    return h;
}

// True when `db` (absolute) is the system database of the configuration (--conf, $TULA_CONF,
// /etc/slurm/tula.conf): the same path, or the same file. An explicit --conf must be valid
// (tula::Error otherwise); a default one that cannot be read counts as the built-in defaults.
bool is_system_db(const std::string& db, const CommonOptions& common) {
    Config cfg;
    if (!common.conf.empty()) {
        cfg = load_cli_config(common).config;
    } else {
        try {
            cfg = load_cli_config(common).config;
        } catch (const std::exception&) {
        }
    }
    if (cfg.system_db.empty()) return false;
    const std::string sys = absolute_path(cfg.system_db);
    if (sys == db) return true;
    struct stat a, b;
    return ::stat(db.c_str(), &a) == 0 && ::stat(sys.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The directory of `db` must exist or be creatable by tula-train; say so early when its
// parent cannot be written. A staged database (the system one) also needs its directory
// writable, for the new file that replaces it.
void check_db_writable(const std::string& db, bool staged) {
    if (file_exists(db) && !staged) {
        if (::access(db.c_str(), W_OK) != 0)
            throw Error("cannot write the profile database " + db + ": permission denied; pass --db PATH");
        return;
    }
    if (file_exists(db) && ::access(db.c_str(), R_OK) != 0)
        throw Error("cannot read the profile database " + db + ": permission denied; pass --db PATH");
    std::string dir = db.substr(0, db.rfind('/'));
    while (!dir.empty() && !file_exists(dir)) dir = dir.substr(0, dir.rfind('/'));
    if (dir.empty()) dir = "/";
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        throw Error(std::string(file_exists(db) ? "cannot replace" : "cannot create") + " the profile database " + db +
                    ": " + dir + " is not writable; pass --db PATH");
}

// Runs `sbatch --wait ...` (argv) for a job named `name`; watches it with squeue every few
// seconds and cancels it (scancel -n) when it pends for a reason that never clears or runs
// longer than `timeout` seconds. `env` is set for sbatch (and so for the job) besides TULA_MODE=off.
JobOutcome run_job(const std::vector<std::string>& argv, const std::string& name, int nodes, int timeout,
                   const EnvSet& env) {
    JobOutcome o;
    // TULA_MODE=off: the cli_filter must not plan this job (it trains nothing).
    InterruptGuard guard;
    EnvSet set = env;
    set.push_back({"TULA_MODE", "off"});
    const pid_t pid = start_process(argv, set, -1, -1, &o.result.error);
    if (pid < 0) return o;
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    double next_check = 2.0;
    bool cancelled = false;
    double cancel_time = 0;
    while (!wait_process(pid, false, &o.result)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const double t = elapsed();
        if (cancelled) {
            if (t - cancel_time > 15) ::kill(pid, SIGTERM);  // sbatch --wait did not notice
            continue;
        }
        if (g_interrupted) {
            o.why = std::string("interrupted by ") + (g_interrupted == SIGINT ? "SIGINT" : "SIGTERM");
        } else if (t > timeout) {
            o.why = "the job did not finish within " + std::to_string(timeout) + " s (--timeout)";
        } else if (t >= next_check) {
            next_check = t + 3.0;
            std::string q;
            run_capture({"squeue", "-h", "-n", name, "-o", "%i|%T|%r"}, &q, 4096);
            const std::string line = one_line(q.substr(0, q.find('\n')));
            const size_t a = line.find('|'), b = line.rfind('|');
            if (a != std::string::npos && b > a) {
                const std::string id = line.substr(0, a), state = line.substr(a + 1, b - a - 1), reason = line.substr(b + 1);
                if (state == "PENDING" && hopeless_reason(reason))
                    o.why = "job " + id + " cannot start (" + reason + ": the partition cannot give it " +
                            nodes_phrase(nodes) + " with these limits)";
            }
        }
        if (!o.why.empty()) {
            std::string ignored;
            run_capture({"scancel", "-n", name}, &ignored, 4096);
            cancelled = true;
            cancel_time = t;
        }
    }
    if (g_interrupted && !cancelled) {  // sbatch died of the terminal's SIGINT: the job lives on
        std::string ignored;
        run_capture({"scancel", "-n", name}, &ignored, 4096);
        o.why = std::string("interrupted by ") + (g_interrupted == SIGINT ? "SIGINT" : "SIGTERM");
    }
    return o;
}

// Lines of a job output file, each prefixed; at most the last `max_lines`.
std::string job_output(const std::string& file, const std::string& prefix, size_t max_lines) {
    std::string text;
    try {
        text = read_text_file(file, 1 << 20);
    } catch (const std::exception&) {
        return prefix + "(no output file " + file + ")\n";
    }
    std::vector<std::string> lines;
    size_t p = 0;
    while (p < text.size()) {
        size_t e = text.find('\n', p);
        if (e == std::string::npos) e = text.size();
        lines.push_back(one_line(text.substr(p, e - p), 1000));
        p = e + 1;
    }
    std::string out;
    const size_t start = lines.size() > max_lines ? lines.size() - max_lines : 0;
    for (size_t i = start; i < lines.size(); ++i)
        if (!lines[i].empty()) out += prefix + lines[i] + "\n";
    return out;
}

// The options of the measuring jobs (JobOptions).
void add_job_options(CLI::App* app, JobOptions* j) {
    app->add_option("--partition", j->partition, "Slurm partition for the jobs (default: the cluster's)")->type_name("P");
    app->add_option("--time", j->time, "Slurm time limit of each job")->type_name("TIME")->capture_default_str();
    app->add_option("--timeout", j->timeout, "seconds each job may take from submission to its end, then it is cancelled")
        ->type_name("SECONDS")
        ->check(CLI::Range(1, 86400 * 7))
        ->capture_default_str();
    app->add_option("--output-dir", j->output_dir, "directory for the jobs' output files (default: a temporary one, removed)")
        ->type_name("DIR");
    app->add_option("--hardware-class", j->hardware_class,
                    "hardware class to record the samples under (default: the class tula.conf gives the partition "
                    "they are measured in, else \"\", the unknown class)")
        ->type_name("NAME")
        ->each([j](const std::string&) { j->class_given = true; });
}

}  // namespace tula::cli
