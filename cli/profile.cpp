// tula CLI: `tula profile compute` and `tula profile allreduce` -- measure what the models
// need by running tula-train (directly, or in Slurm jobs with sbatch --wait), then read the
// samples back from the profile database (tula(1), "tula profile").
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "common.hpp"
#include "format.hpp"
#include "metrics_commands.hpp"
#include "process.hpp"
#include "profile_jobs.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/metrics.hpp"
#include "tula/models.hpp"

namespace tula::cli {
namespace {

struct ComputeOptions {
    CommonOptions common;
    JobOptions job;
    std::vector<int> nodes;      // also measure with K ranks at once, one job per K (--nodes)
    int ranks_per_node = 1;      // ranks on each node of those jobs (--ranks-per-node)
    std::string workload;
    std::vector<int> batch_sizes{16, 24, 32, 48, 64, 96, 128, 192, 256};
    int iters = 10;   // timed iterations per tula-train run
    int rounds = 3;   // runs per batch size, interleaved across the batch sizes
    std::string trainer;
    std::string data_dir;
    bool force = false;  // measure again local batches already in the database
    std::string command;       // --command: a trainer of the job contract instead of tula-train
    double min_seconds = 1.0;  // --min-seconds: TULA_PROFILE_MIN_SECONDS of the command
};

struct AllreduceOptions {
    CommonOptions common;
    JobOptions job;
    std::vector<int> nodes;      // empty: 2 (or, with ranks_per_node > 1, the one node)
    int ranks_per_node = 1;      // > 1: R ranks on one node, the within-node profile (--ranks-per-node)
    std::vector<int64_t> sizes;  // empty: tula-train's defaults
    std::string workload;        // optional: also measure this workload's gradient size
    std::string trainer;
    bool force = false;          // measure again node counts already in the database
};

// The tula-train to run: --trainer, else tula-train beside this tula, else $PATH. Absolute.
std::string find_trainer(const std::string& given) {
    if (!given.empty()) {
        if (::access(given.c_str(), X_OK) != 0)
            throw Error("--trainer " + given + " is not an executable file");
        return absolute_path(given);
    }
    const std::string dir = self_exe_dir();
    if (!dir.empty()) {
        const std::string p = dir + "/tula-train";
        if (::access(p.c_str(), X_OK) == 0) return p;
    }
    if (auto p = find_in_path("tula-train")) return absolute_path(*p);
    throw Error("cannot find tula-train beside " + (dir.empty() ? std::string("tula") : dir + "/tula") +
                " or in $PATH; build it (make) or pass --trainer PATH");
}

// Compute samples of `workload` in `db`; with ranks > 0 only those of that many ranks at once,
// `per_node` of them on each node.
size_t count_compute(const std::string& db, const std::string& workload, int ranks = 0, int per_node = 1) {
    auto d = open_existing(db);
    if (!d) return 0;
    size_t n = 0;
    for (const auto& c : d->compute_samples(workload))
        n += (ranks == 0 || (c.ranks == ranks && c.ranks_per_node == per_node));
    return n;
}

// Allreduce samples in `db` of `nodes` nodes with `per_node` ranks on each.
size_t count_allreduce(const std::string& db, int nodes, int per_node) {
    auto d = open_existing(db);
    if (!d) return 0;
    size_t n = 0;
    for (const auto& a : d->allreduce_samples()) n += (a.nodes == nodes && a.ranks_per_node == per_node);
    return n;
}

void run_compute_together(const ComputeOptions& o, const std::string& model, const std::string& dataset,
                          const std::string& trainer, const std::string& db, DbWriter& writer);

// --command: the command times the batch sizes (tula-jobs(7)); on this node, or with --nodes
// (or --ranks-per-node) under srun in one Slurm job per node count.
int run_compute_command(const ComputeOptions& o) {
    CommandProfile p;
    p.workload = o.workload;
    p.command = o.command;
    p.batch_sizes = o.batch_sizes;
    p.min_seconds = o.min_seconds;
    p.rounds = o.rounds;
    if (!o.nodes.empty() || o.ranks_per_node > 1)
        return run_command_jobs(o.common, o.job, p, o.nodes.empty() ? std::vector<int>{1} : o.nodes, o.ranks_per_node);
    p.hardware_class = profile_class(o.job, o.common, false).value_or("");
    const std::string db = write_db_path(o.common);
    const bool staged = is_system_db(db, o.common);
    check_db_writable(db, staged);
    DbWriter writer(db, staged);
    const std::vector<ComputeSample> got = profile_with_command(p, writer.path());
    writer.done();
    std::printf("profile compute: recorded %zu compute point%s of %s in %s\n", got.size(), got.size() == 1 ? "" : "s",
                o.workload.c_str(), db.c_str());
    return kExitOk;
}

// The options run_compute refuses; throws UsageError with the reason. Sets the workload's
// model and data set.
void check_compute_options(const ComputeOptions& o, std::string* model, std::string* dataset) {
    if (!split_workload(o.workload, model, dataset))
        throw UsageError("--workload '" + one_line(o.workload, 80) +
                         "' is not of the form MODEL@DATASET (letters, digits, _ . -), e.g. lenet5@fashion-mnist");
    if (o.batch_sizes.empty()) throw UsageError("--batch-sizes: give at least one local batch size");
    for (int b : o.batch_sizes)
        if (b < 1 || b > 65536) throw UsageError("--batch-sizes: " + std::to_string(b) + " is not in 1..65536");
    const int lowest = o.ranks_per_node > 1 ? 1 : 2;  // R ranks sharing one node are a profile of their own
    for (int k : o.nodes)
        if (k < lowest || k > 100000)
            throw UsageError("--nodes: " + std::to_string(k) + " is not in " + std::to_string(lowest) + "..100000" +
                             (lowest == 2 ? " (ranks at once on 1 node is the plain profile; with --ranks-per-node R "
                                            "1 node is allowed)"
                                          : ""));
}

// The rounds a compute profile still has to run. Resumable: every batch size is measured in
// `rounds` tula-train runs of its own, and the rounds are interleaved (all batch sizes once,
// then again), so that a slow phase of a shared machine spreads over the batch sizes instead of
// bending the curve; the model takes each batch size's median. Rounds this host already
// measured (1 thread) count unless --force, so an interrupted profile keeps what it finished.
struct ComputeRounds {
    std::vector<int> todo;  // the local batch of each run, in order
    std::vector<int> done;  // local batches with all their rounds on this host
    std::vector<int> uniq;  // the distinct local batches, in the order given
    std::vector<int> need;  // rounds still to run, per uniq entry
};

ComputeRounds compute_rounds(const ComputeOptions& o, const std::string& db) {
    ComputeRounds c;
    const std::string host = this_host();
    auto d = open_existing(db);
    const std::vector<ComputeSample> have = d ? d->compute_samples(o.workload) : std::vector<ComputeSample>{};
    for (int b : o.batch_sizes) {
        if (std::find(c.uniq.begin(), c.uniq.end(), b) != c.uniq.end()) continue;
        int measured = 0;
        for (const auto& s : have) measured += (s.local_batch == b && s.host == host && s.threads == 1 && s.ranks == 1);
        c.uniq.push_back(b);
        c.need.push_back(o.force ? o.rounds : std::max(0, o.rounds - measured));
        if (c.need.back() == 0) c.done.push_back(b);
    }
    for (int r = 0; r < o.rounds; ++r)
        for (size_t k = 0; k < c.uniq.size(); ++k)
            if (r < c.need[k]) c.todo.push_back(c.uniq[k]);
    return c;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One round at local batch b: tula-train --profile-compute, which records into writer.path();
// run i of n, with a progress bar on a terminal. Returns the line "local batch B: X ms per step
// (N steps)" from the profile it wrote. Errors: tula::Error when tula-train fails (its output
// is shown first).
std::string run_compute_round(const ComputeOptions& o, const std::string& trainer, const std::string& model,
                              const std::string& dataset, DbWriter& writer, const std::optional<std::string>& local_class,
                              int b, size_t i, size_t n, bool bar) {
    // tula-train writes the profile to a file of ours and records it in the database
    TempDir tmp("", "tula-profile");
    const std::string profile = tmp.path + "/profile.jsonl";
    tmp.files.push_back(profile);
    std::vector<std::string> argv = {trainer,        "--model",          model,   "--data", dataset, "--profile-compute",
                                     "--batch-sizes", std::to_string(b), "--iters", std::to_string(o.iters),
                                     "--db",         writer.path(),      "--metrics", profile};
    if (!o.data_dir.empty()) {
        argv.push_back("--data-dir");
        argv.push_back(o.data_dir);
    }
    // tula-train's standard output goes to a file and is shown once it ends (its errors go
    // straight to our standard error).
    std::unique_ptr<FILE, int (*)(FILE*)> cap(std::tmpfile(), std::fclose);
    if (!cap) throw Error(std::string("cannot create a temporary file for tula-train's output: ") + std::strerror(errno));
    ProcessResult r;
    const pid_t pid = start_process(argv, class_env(local_class), ::fileno(cap.get()), -1, &r.error);
    const auto tb = std::chrono::steady_clock::now();
    if (pid >= 0) {
        while (!wait_process(pid, false, &r)) {
            if (bar) {
                std::printf("\r%s %zu/%zu  local batch %d  %s ", progress_bar(double(i) / n, 30).c_str(), i + 1, n, b,
                            format_duration(seconds_since(tb)).c_str());
                std::fflush(stdout);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
    }
    if (bar) std::printf("\r%*s\r", 72, "");
    std::string text;
    std::rewind(cap.get());
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, cap.get())) > 0 && text.size() < (1u << 20);) text.append(buf, got);
    if (!r.ok()) {
        std::fputs(text.c_str(), stdout);
        throw Error("profile compute failed at local batch " + std::to_string(b) + ": " + describe_result(r, trainer) +
                    " (its messages are above)" +
                    (i > 0 ? "; the batch sizes measured before it are kept, run again to resume" : ""));
    }
    std::string line = "local batch " + std::to_string(b) + " done";
    if (file_exists(profile))
        for (const ProfileLine& l : read_metrics_profile_file(profile).lines)
            line = "local batch " + std::to_string(l.local_batch) + ": " + format_number("%.2f", l.seconds * 1e3) +
                   " ms per step (" + std::to_string(l.steps) + " steps)";
    return line;
}

// The fit of a workload's compute samples `all` and this host's round spread, printed; a
// warning instead when they cannot be fitted.
void print_compute_fit(const std::vector<ComputeSample>& all) {
    try {
        const ComputeModel m = ComputeModel::fit(all);
        for (const auto& l : compute_fit_lines(m, all)) std::printf("profile compute: %s\n", l.c_str());
        // this host's rounds (the samples of other hosts in the same database are theirs)
        std::vector<ComputeSample> here;
        const std::string host = this_host();
        for (const auto& c : all)
            if (c.host == host) here.push_back(c);
        const double spread = round_spread_percent(here);
        if (std::isfinite(spread)) {
            std::printf("profile compute: round spread %s %% (the rounds' (max - min) / median per local batch, median "
                        "over the batch sizes): the noise every prediction from this profile inherits\n",
                        format_number("%.1f", spread).c_str());
            if (spread > kNoisyProfilePercent)
                print_warning("the profile's rounds differ by " + format_number("%.0f", spread) +
                              " % at a typical batch size: the host was busy while it was profiled, and the predictions "
                              "inherit that; profile again on a quiet node (tula profile compute --force)");
        }
    } catch (const std::exception& e) {
        print_warning(std::string(e.what()) + "; tula plan needs at least 2 distinct local batch sizes");
    }
}

int run_compute(const ComputeOptions& o) {
    std::string model, dataset;
    check_compute_options(o, &model, &dataset);
    if (!o.command.empty()) return run_compute_command(o);
    const std::string db = write_db_path(o.common);
    const bool staged = is_system_db(db, o.common);  // an explicit --conf must be valid
    const std::string trainer = find_trainer(o.trainer);
    check_db_writable(db, staged);
    DbWriter writer(db, staged);
    const size_t before = count_compute(db, o.workload);
    const std::optional<std::string> local_class = profile_class(o.job, o.common, false);
    const ComputeRounds c = compute_rounds(o, db);
    std::printf("profile compute: %s, local batches %s, %d round%s of %d iterations each, into %s\n", o.workload.c_str(),
                join_ints(o.batch_sizes).c_str(), o.rounds, o.rounds == 1 ? "" : "s", o.iters, db.c_str());
    if (!c.done.empty())
        std::printf("profile compute: skipping local batch%s %s, already measured on this host (--force measures again)\n",
                    c.done.size() == 1 ? "" : "es", join_ints(c.done).c_str());
    for (size_t k = 0; k < c.uniq.size(); ++k)
        if (c.need[k] > 0 && c.need[k] < o.rounds)
            std::printf("profile compute: local batch %d has %d of %d rounds on this host; measuring %d more\n", c.uniq[k],
                        o.rounds - c.need[k], o.rounds, c.need[k]);
    const bool bar = stdout_terminal();
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n = c.todo.size();
    for (size_t i = 0; i < n; ++i) {
        const std::string line = run_compute_round(o, trainer, model, dataset, writer, local_class, c.todo[i], i, n, bar);
        writer.done();  // the system database: published now, so that an interruption keeps it
        std::printf("profile compute: %zu/%zu %s%s\n", i + 1, n, line.c_str(),
                    bar ? (" " + progress_bar(double(i + 1) / n, 30)).c_str() : "");
    }
    const double secs = seconds_since(t0);
    if (!o.nodes.empty() || o.ranks_per_node > 1) run_compute_together(o, model, dataset, trainer, db, writer);

    ProfileDb d = ProfileDb::open(db, ProfileDb::Mode::ReadOnly);
    const std::vector<ComputeSample> all = d.compute_samples(o.workload);
    if (n > 0 && all.size() <= before)
        throw Error("tula-train exited 0 but recorded no compute samples of " + o.workload + " in " + db);
    std::printf("profile compute: recorded %zu compute points of %s in %s (%zu in all) in %s\n", all.size() - before,
                o.workload.c_str(), db.c_str(), all.size(), format_duration(secs).c_str());
    print_compute_fit(all);
    return kExitOk;
}

// Runs the measuring job number i of n on k nodes (sbatch --wait -N k --ntasks-per-node=1
// --wrap "mpirun ... -np k --map-by node TRAINER ARGS", one rank per node), prints "profile KIND: i/n K nodes ... TIME, N samples" and the job's output,
// and checks that `count` (the database's samples of this kind and node count) grew. `job_class`:
// the hardware class the job's tula-train records (TULA_HARDWARE_CLASS; nullopt: its own lookup).
// Errors: tula::Error when the job fails, is cancelled (--timeout, a pending reason that never
// clears, SIGINT/SIGTERM) or records nothing.
void run_profile_job(const std::string& kind, const JobOptions& jo, TempDir& out_dir, int k, size_t i, size_t n,
                     const std::string& trainer, const std::string& args, const std::string& db,
                     const std::function<size_t()>& count, const std::optional<std::string>& job_class, int per_node) {
    const size_t before = count();
    const std::string map = per_node > 1 ? "ppr:" + std::to_string(per_node) + ":node" : std::string("node");
    const std::string wrap = "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(k * per_node) +
                             " --map-by " + map + " --bind-to none " + shell_quote(trainer) + " " + args;
    const std::string shape = std::to_string(k) + (per_node > 1 ? "x" + std::to_string(per_node) : std::string());
    const std::string out = out_dir.path + "/" + kind + "-" + shape + "-nodes.out";
    out_dir.files.push_back(out);
    // A unique job name: squeue and scancel find the job by it while sbatch --wait runs.
    const std::string name = "tula-profile-" + kind + "-" + std::to_string(::getpid()) + "-" + shape;
    std::vector<std::string> argv = {"sbatch", "--wait", "--quiet", "-N", std::to_string(k),
                                     "--ntasks-per-node=" + std::to_string(per_node), "-J", name, "-o", out, "-t", jo.time};
    if (!jo.partition.empty()) {
        argv.push_back("-p");
        argv.push_back(jo.partition);
    }
    argv.push_back("--wrap");
    argv.push_back(wrap);
    const bool bar = stdout_terminal();
    std::printf("profile %s: %s%zu/%zu %s ... ", kind.c_str(), bar ? (progress_bar(double(i) / n, 20) + " ").c_str() : "",
                i + 1, n, nodes_phrase(k).c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    // sbatch passes its environment to the job (--export=ALL): tula-train there sees the class
    const JobOutcome job = run_job(argv, name, k, jo.timeout, class_env(job_class));
    const ProcessResult& r = job.result;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok() || !job.why.empty()) {
        std::printf("failed after %s\n", format_duration(secs).c_str());
        std::fflush(stdout);
        if (r.started) std::fprintf(stderr, "%s", job_output(out, "  | ", 40).c_str());
        if (!job.why.empty()) throw Error("profile " + kind + " on " + nodes_phrase(k) + ": " + job.why + "; the job was cancelled");
        throw Error("profile " + kind + " on " + nodes_phrase(k) + " failed: " + describe_result(r, "sbatch --wait") +
                    (r.started ? " (its messages and the job's output are above)" : "; is Slurm's sbatch installed and in $PATH?"));
    }
    const size_t after = count();
    std::printf("%s, %zu sample%s\n", format_duration(secs).c_str(), after - std::min(after, before),
                after - std::min(after, before) == 1 ? "" : "s");
    std::fputs(job_output(out, "  | ", 40).c_str(), stdout);
    if (after <= before)
        throw Error("the job on " + nodes_phrase(k) + " finished but recorded no " + kind + " samples for " +
                    std::to_string(k) + " nodes" + (per_node > 1 ? " of " + std::to_string(per_node) + " ranks" : "") +
                    " in " + db + " (is " + db + " on a file system the job's first node can write?)");
}

// tula profile compute --nodes: for each K, one job on K nodes in which all K R ranks (R =
// --ranks-per-node, R on each node) time the --batch-sizes at once (tula-train
// --profile-compute under mpirun -np K*R; --rounds rounds in the one job, interleaved across
// the batch sizes as on this node, so that a slow phase of the shared host spoils one sample
// per batch size rather than all; the slowest rank's time), recorded with ranks = K R and
// ranks_per_node = R. A K whose samples the database already has at every batch size is
// skipped unless --force.
void run_compute_together(const ComputeOptions& o, const std::string& model, const std::string& dataset,
                          const std::string& trainer, const std::string& db, DbWriter& writer) {
    const int R = o.ranks_per_node;
    // --ranks-per-node without --nodes: R ranks on 1 node
    const std::vector<int> nodes = o.nodes.empty() ? std::vector<int>{1} : o.nodes;
    std::vector<int> todo, done;
    {
        auto d = open_existing(db);
        const std::vector<ComputeSample> have = d ? d->compute_samples(o.workload) : std::vector<ComputeSample>{};
        for (int k : nodes) {
            if (std::find(todo.begin(), todo.end(), k) != todo.end() || std::find(done.begin(), done.end(), k) != done.end())
                continue;
            bool all = true;
            for (int b : o.batch_sizes) {
                bool f = false;
                for (const auto& c : have) f = f || (c.ranks == k * R && c.ranks_per_node == R && c.local_batch == b);
                all = all && f;
            }
            (all && !o.force ? done : todo).push_back(k);
        }
    }
    if (R > 1)
        std::printf("profile compute: %s node(s) of %d ranks each at once (the slowest rank's time), one job per node count\n",
                    join_ints(nodes).c_str(), R);
    else
        std::printf("profile compute: %s ranks at once (one per node, the slowest rank's time), one job per node count\n",
                    join_ints(nodes).c_str());
    if (!done.empty())
        std::printf("profile compute: skipping node count%s %s, already measured at every batch size (--force measures again)\n",
                    done.size() == 1 ? "" : "s", join_ints(done).c_str());
    TempDir out_dir(o.job.output_dir, "tula-profile");
    const std::optional<std::string> job_class = profile_class(o.job, o.common, true);
    for (size_t i = 0; i < todo.size(); ++i) {
        const int k = todo[i];
        const std::string wdb = writer.path();  // the file this job writes
        std::vector<int> rounds;  // the batch sizes, then again: interleaved rounds
        for (int r = 0; r < o.rounds; ++r) rounds.insert(rounds.end(), o.batch_sizes.begin(), o.batch_sizes.end());
        std::string args = "--model " + shell_quote(model) + " --data " + shell_quote(dataset) +
                           " --profile-compute --batch-sizes " + join_ints(rounds) + " --iters " +
                           std::to_string(o.iters) + " --db " + shell_quote(wdb);
        if (!o.data_dir.empty()) args += " --data-dir " + shell_quote(o.data_dir);
        run_profile_job("compute", o.job, out_dir, k, i, todo.size(), trainer, args, db,
                        [&] { return count_compute(wdb, o.workload, k * R, R); }, job_class, R);
        writer.done();
    }
}

// Prints the within-node bandwidth fitted from the samples of one node in `all`, if any.
void print_intra_fit(const std::vector<AllreduceSample>& all) {
    if (!IntraNodeModel::has_samples(all)) return;
    try {
        const IntraNodeModel m = IntraNodeModel::fit(all);
        std::printf("profile allreduce: within-node fit (%s ranks on 1 node, %d sizes) bandwidth = %s GB/s, latency = %s us "
                    "(rmse %s ms)\n",
                    join_ints(m.ranks).c_str(), m.sizes, format_number("%.4g", m.bandwidth / 1e9).c_str(),
                    format_number("%.2f", m.latency * 1e6).c_str(), format_number("%.3f", m.rmse * 1e3).c_str());
    } catch (const std::exception& e) {
        print_warning(e.what());
    }
}

int run_allreduce(const AllreduceOptions& o) {
    const int R = o.ranks_per_node;
    if (R > 1 && !o.nodes.empty())
        throw UsageError("--ranks-per-node measures R ranks on 1 node and --nodes K nodes of 1 rank each; run them "
                         "separately");
    // the node counts: --nodes (default 2), or the one node of --ranks-per-node
    const std::vector<int> node_counts = R > 1 ? std::vector<int>{1} : o.nodes.empty() ? std::vector<int>{2} : o.nodes;
    for (int k : o.nodes)
        if (k < 2 || k > 100000)
            throw UsageError("--nodes: " + std::to_string(k) + " is not in 2..100000 (an allreduce needs 2 nodes or more)");
    for (int64_t s : o.sizes)
        if (s < 4 || s > (int64_t{1} << 30)) throw UsageError("--sizes: " + std::to_string(s) + " is not in 4..1073741824 bytes");
    std::string model;
    if (!o.workload.empty() && !split_workload(o.workload, &model, nullptr))
        throw UsageError("--workload '" + one_line(o.workload, 80) + "' is not of the form MODEL@DATASET");
    const std::string db = write_db_path(o.common);
    const bool staged = is_system_db(db, o.common);  // an explicit --conf must be valid
    const std::string trainer = find_trainer(o.trainer);
    check_db_writable(db, staged);
    DbWriter writer(db, staged);
    const std::optional<std::string> job_class = profile_class(o.job, o.common, true);
    TempDir out_dir(o.job.output_dir, "tula-profile");

    std::vector<std::string> sizes;
    for (int64_t s : o.sizes) sizes.push_back(std::to_string(s));
    std::string size_list;
    for (const auto& s : sizes) size_list += (size_list.empty() ? "" : ",") + s;

    if (R > 1)
        std::printf("profile allreduce: %d ranks on 1 node, into %s\n", R, db.c_str());
    else
        std::printf("profile allreduce: %s node(s), into %s\n", join_ints(node_counts).c_str(), db.c_str());
    // Resumable: a node count whose samples the database already has (every --sizes size, and
    // the workload's gradient size with --workload) is skipped unless --force.
    std::vector<int> todo, done;
    {
        auto d = open_existing(db);
        std::vector<int64_t> need(o.sizes);
        bool known = true;  // false: the workload's gradient size is not known yet, measure
        if (!model.empty()) {
            const auto w = d ? d->workload(o.workload) : std::nullopt;
            if (w && w->params > 0) need.push_back(4 * w->params);
            else known = false;
        }
        const std::vector<AllreduceSample> have = d ? d->allreduce_samples() : std::vector<AllreduceSample>{};
        for (int k : node_counts) {
            bool any = false, all = true;
            for (const auto& a : have) any = any || (a.nodes == k && a.ranks_per_node == R);
            for (int64_t n : need) {
                bool f = false;
                for (const auto& a : have) f = f || (a.nodes == k && a.ranks_per_node == R && a.bytes == n);
                all = all && f;
            }
            bool dup = false;
            for (int t : todo) dup = dup || t == k;
            for (int t : done) dup = dup || t == k;
            if (!dup) (any && all && known && !o.force ? done : todo).push_back(k);
        }
    }
    if (!done.empty() && R > 1)
        std::printf("profile allreduce: skipping %d ranks on 1 node, already measured (--force measures again)\n", R);
    else if (!done.empty())
        std::printf("profile allreduce: skipping node count%s %s, already measured (--force measures again)\n",
                    done.size() == 1 ? "" : "s", join_ints(done).c_str());
    for (size_t i = 0; i < todo.size(); ++i) {
        const int k = todo[i];
        const std::string wdb = writer.path();  // the file this job writes
        std::string args = "--profile-allreduce --db " + shell_quote(wdb);
        if (!size_list.empty()) args += " --sizes " + size_list;
        if (!model.empty()) args += " --model " + shell_quote(model);
        run_profile_job("allreduce", o.job, out_dir, k, i, todo.size(), trainer, args, db,
                        [&] { return count_allreduce(wdb, k, R); }, job_class, R);
        writer.done();
    }
    ProfileDb d = ProfileDb::open(db, ProfileDb::Mode::ReadOnly);
    const std::vector<AllreduceSample> all = d.allreduce_samples();
    std::printf("profile allreduce: %zu allreduce samples in %s\n", all.size(), db.c_str());
    print_intra_fit(all);
    if (!AllreduceModel::has_inter_node(all)) return kExitOk;  // only the within-node profile so far
    try {
        const AllreduceModel m = AllreduceModel::fit(all);
        std::printf("profile allreduce: fit (%s, the smaller residual) alpha = %s us per step, beta = %s ns per byte (rmse %s ms)\n",
                    m.algorithm_name(), format_number("%.2f", m.alpha * 1e6).c_str(), format_number("%.4f", m.beta * 1e9).c_str(),
                    format_number("%.3f", m.rmse * 1e3).c_str());
        const std::string ks = m.measured_nodes();
        if (!ks.empty())
            std::printf("profile allreduce: %s node(s) are predicted from their own measurements (interpolated between "
                        "message sizes); other node counts from the fit\n",
                        ks.c_str());
    } catch (const std::exception& e) {
        print_warning(e.what());
    }
    return kExitOk;
}

}  // namespace

void add_profile_command(CLI::App& app, Action* action) {
    CLI::App* prof = app.add_subcommand("profile", "measure compute and allreduce times into a profile database");
    prof->require_subcommand(1);
    prof->footer("See tula(1), \"tula profile\".");

    auto c = std::make_shared<ComputeOptions>();
    CLI::App* comp = prof->add_subcommand("compute", "time training iterations of a workload at several local batch sizes (runs tula-train on this node)");
    comp->footer("Runs tula-train --profile-compute on this node; with --nodes also a job per K: mpirun -np K --map-by node "
                 "tula-train --profile-compute. Exit status 0 when the points were recorded, 1 on failure, 2 usage error.");
    add_common_options(comp, &c->common, true);
    comp->add_option("--workload", c->workload, "MODEL@DATASET, e.g. lenet5@fashion-mnist")->type_name("W")->required();
    comp->add_option("--batch-sizes", c->batch_sizes, "local batch sizes to time (comma list)")
        ->delimiter(',')
        ->type_name("B,...")
        ->capture_default_str();
    comp->add_option("--iters", c->iters, "timed iterations per batch size and round")
        ->type_name("N")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    comp->add_option("--rounds", c->rounds,
                     "tula-train runs per batch size, interleaved across the batch sizes (the model takes the median)")
        ->type_name("R")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // the last one counts, as in most tools
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    CLI::Option* tr = comp->add_option("--trainer", c->trainer, "tula-train to run (default: beside tula, else $PATH)")
                          ->type_name("PATH");
    CLI::Option* dd = comp->add_option("--data-dir", c->data_dir, "passed to tula-train --data-dir (directory of the data set files)")
                          ->type_name("DIR");
    comp->add_option("--command", c->command,
                     "run CMD (/bin/sh -c, in this directory; with --nodes: srun CMD in each job) instead of tula-train: "
                     "it times TULA_PROFILE_BATCHES and writes \"profile\" lines to TULA_METRICS (tula-jobs(7))")
        ->type_name("CMD")
        ->excludes(tr)
        ->excludes(dd);
    comp->add_option("--min-seconds", c->min_seconds, "with --command: TULA_PROFILE_MIN_SECONDS, timed seconds per batch size")
        ->type_name("SECONDS")
        ->check(CLI::Range(1e-6, 86400.0))
        ->capture_default_str();
    comp->add_option("--nodes", c->nodes,
                     "then also time the batch sizes with K ranks at once, one per node, in a Slurm job per K (comma "
                     "list, each >= 2): what nodes that share hardware cost each other")
        ->delimiter(',')
        ->type_name("K,...");
    add_job_options(comp, &c->job);
    comp->add_option("--ranks-per-node", c->ranks_per_node,
                     "with --nodes: R ranks on each node of those jobs (mpirun -np K*R, R per node), what R ranks "
                     "sharing a node cost each other; without --nodes: one job on 1 node")
        ->type_name("R")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    comp->add_flag("--force", c->force, "measure again the local batches (and --nodes counts) the database already has");
    comp->callback([c, action] { *action = [c] { return run_compute(*c); }; });

    auto a = std::make_shared<AllreduceOptions>();
    CLI::App* ar = prof->add_subcommand("allreduce", "time MPI allreduce on K nodes, one Slurm job per node count (sbatch --wait)");
    ar->footer("Each job runs: mpirun -np K --map-by node tula-train --profile-allreduce --db DB (with --ranks-per-node "
               "R: one job on 1 node, mpirun -np R). Exit status 0 when every node count was recorded, 1 on failure, 2 "
               "usage error.");
    add_common_options(ar, &a->common, true);
    ar->add_option("--nodes", a->nodes, "node counts to measure (comma list, each >= 2; default 2)")
        ->delimiter(',')
        ->type_name("K,...");
    ar->add_option("--ranks-per-node", a->ranks_per_node,
                   "instead of --nodes: time R ranks on one node (one job, -N 1 --ntasks-per-node=R), the within-node "
                   "profile the planner fits the bandwidth between a node's ranks to")
        ->type_name("R")
        ->check(CLI::Range(2, 1024));
    ar->add_option("--sizes", a->sizes, "message sizes in bytes (comma list; default: tula-train's)")
        ->delimiter(',')
        ->type_name("BYTES,...");
    ar->add_option("--workload", a->workload, "also measure this workload's gradient size (4 x parameters)")->type_name("W");
    ar->add_option("--trainer", a->trainer, "tula-train to run (default: beside tula, else $PATH); must be visible on the nodes")
        ->type_name("PATH");
    add_job_options(ar, &a->job);
    ar->add_flag("--force", a->force, "measure again the node counts the database already has samples for");
    ar->callback([a, action] { *action = [a] { return run_allreduce(*a); }; });
}

}  // namespace tula::cli
