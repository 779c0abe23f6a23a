// tula CLI: `tula profile compute --command CMD` -- a compute profile taken by any trainer
// that follows the job contract (tula-jobs(7)): CMD times the local batch sizes of
// TULA_PROFILE_BATCHES and writes "profile" lines to TULA_METRICS; the samples are stored as
// tula-train --profile-compute stores its own (tula(1), "tula profile").
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "metrics_commands.hpp"
#include "profile_jobs.hpp"
#include "text.hpp"
#include "tula/error.hpp"
#include "tula/metrics.hpp"

namespace tula::cli {
namespace {

// The contract's environment of one run of the command.
EnvSet command_env(const std::string& workload, const std::vector<int>& batches, double min_seconds,
                   const std::string& metrics) {
    return {{"TULA_PROFILE_BATCHES", join_ints(batches)},
            {"TULA_PROFILE_MIN_SECONDS", format_number("%.17g", min_seconds)},
            {"TULA_WORKLOAD", workload},
            {"TULA_METRICS", metrics}};
}

// The samples of one profile file of the command: one per line of a wanted batch size, every
// wanted size present, as one process on this host (ranks 1). Errors: tula::Error naming the
// file and what is missing or different.
std::vector<ComputeSample> samples_of(const std::string& file, const std::string& workload,
                                      const std::vector<int>& batches, const std::string& host, const std::string& cls) {
    const MetricsProfile m = read_metrics_profile_file(file);
    if (m.header.workload != workload)
        throw Error(file + ":1: the header's workload is " + m.header.workload + ", not " + workload +
                    " (the command must profile TULA_WORKLOAD)");
    std::vector<ComputeSample> out;
    std::vector<int> missing;
    for (int b : batches) {
        bool found = false;
        for (ComputeSample c : profile_samples(m, host, cls)) {
            if (c.local_batch != b) continue;
            found = true;
            c.host = host;
            c.ranks = 1;
            c.ranks_per_node = 1;
            out.push_back(c);
        }
        if (!found && std::find(missing.begin(), missing.end(), b) == missing.end()) missing.push_back(b);
    }
    if (!missing.empty())
        throw Error(file + ": no \"profile\" line for local batch " + join_ints(missing, ", ") +
                    " (the command must time every batch size of TULA_PROFILE_BATCHES=" + join_ints(batches) + ")");
    return out;
}

// The header's workload row of `file` (MetricsHeader::workload_row).
std::optional<Workload> workload_row(const std::string& file) {
    return read_metrics_profile_file(file).header.workload_row();
}

}  // namespace

std::vector<ComputeSample> profile_with_command(const CommandProfile& p, const std::string& db) {
    std::vector<ComputeSample> all;
    std::optional<Workload> row;
    for (int round = 1; round <= p.rounds; ++round) {
        TempDir tmp("", "tula-profile");
        const std::string metrics = tmp.path + "/profile.jsonl";
        tmp.files.push_back(metrics);
        std::printf("profile compute: round %d/%d: %s\n", round, p.rounds, one_line(p.command, 120).c_str());
        std::fflush(stdout);
        const ProcessResult r =
            run_process({"/bin/sh", "-c", p.command}, command_env(p.workload, p.batch_sizes, p.min_seconds, metrics));
        if (!r.ok())
            throw Error("profile compute --command: the command " + describe_result(r, "/bin/sh") +
                        " (its messages are above); nothing was stored");
        if (!file_exists(metrics))
            throw Error("profile compute --command: the command exited 0 but wrote no metrics file (it must write the "
                        "header and the \"profile\" lines to $TULA_METRICS); nothing was stored");
        const std::vector<ComputeSample> got = samples_of(metrics, p.workload, p.batch_sizes, this_host(), p.hardware_class);
        all.insert(all.end(), got.begin(), got.end());
        if (!row) row = workload_row(metrics);
    }
    store_compute_profile(db, all, row);
    return all;
}

std::vector<ComputeSample> profile_samples(const MetricsProfile& m, const std::string& host,
                                           const std::optional<std::string>& cls) {
    std::vector<ComputeSample> out;
    for (const ProfileLine& l : m.lines) {
        ComputeSample c;
        c.workload = m.header.workload;
        c.host = m.header.host.empty() ? host : m.header.host;
        c.local_batch = l.local_batch;
        c.threads = l.threads;
        c.seconds_per_iter = l.seconds;
        c.iters = static_cast<int>(std::min<int64_t>(l.steps, std::numeric_limits<int>::max()));
        c.ranks = m.header.ranks;
        c.ranks_per_node = m.header.ranks_per_node();
        c.startup_seconds = l.startup_seconds;
        c.synced_seconds_per_iter = l.synced_seconds;
        c.hardware_class = cls ? *cls : m.header.hardware_class;
        out.push_back(c);
    }
    return out;
}

void store_compute_profile(const std::string& db, const std::vector<ComputeSample>& samples,
                           const std::optional<Workload>& w) {
    ProfileDb d = ProfileDb::open(db, ProfileDb::Mode::ReadWrite);
    if (w) {
        Workload row = *w;
        if (row.activation_floats <= 0)  // kept when the file does not give it
            if (auto known = d.workload(row.name)) row.activation_floats = known->activation_floats;
        d.upsert_workload(row);
    }
    for (const auto& c : samples) d.add_compute(c);
}

std::vector<ComputeSample> combine_rank_profiles(const std::vector<std::vector<ComputeSample>>& profiles,
                                                 int ranks_per_node) {
    std::vector<ComputeSample> out;
    if (profiles.empty()) return out;
    std::map<int, size_t> index;  // local batch -> position in out
    for (const auto& c : profiles[0]) {
        if (index.count(c.local_batch)) continue;
        index[c.local_batch] = out.size();
        out.push_back(c);
    }
    for (size_t rank = 0; rank < profiles.size(); ++rank) {
        std::map<int, bool> seen;
        for (const auto& c : profiles[rank]) {
            auto it = index.find(c.local_batch);
            if (it == index.end()) continue;
            seen[c.local_batch] = true;
            ComputeSample& s = out[it->second];
            s.seconds_per_iter = std::max(s.seconds_per_iter, c.seconds_per_iter);
            s.iters = std::min(s.iters, c.iters);
        }
        for (const auto& [b, pos] : index)
            if (!seen.count(b))
                throw Error("rank " + std::to_string(rank) + " has no \"profile\" line for local batch " + std::to_string(b) +
                            " that rank 0 timed; nothing was stored");
    }
    for (auto& s : out) {
        s.ranks = static_cast<int>(profiles.size());
        s.ranks_per_node = ranks_per_node;
    }
    return out;
}

// tula profile compute --command CMD --nodes K,...: one job per K that runs `srun CMD` on K
// nodes of R ranks; each rank writes its own profile (TULA_METRICS with "%r"), combined as
// the slowest rank's time per batch size.
int run_command_jobs(const CommonOptions& common, const JobOptions& jo, const CommandProfile& p,
                     const std::vector<int>& nodes, int per_node) {
    const std::string db = write_db_path(common);
    const bool staged = is_system_db(db, common);
    check_db_writable(db, staged);
    DbWriter writer(db, staged);
    TempDir out_dir(jo.output_dir, "tula-profile");
    const std::optional<std::string> job_class = profile_class(jo, common, true);
    for (size_t i = 0; i < nodes.size(); ++i) {
        const int k = nodes[i];
        const std::string shape = std::to_string(k) + "x" + std::to_string(per_node);
        const std::string out = out_dir.path + "/compute-command-" + shape + ".out";
        const std::string host_file = out_dir.path + "/compute-command-" + shape + ".host";
        const std::string pattern = out_dir.path + "/compute-command-" + shape + "-%r.jsonl";
        out_dir.files.insert(out_dir.files.end(), {out, host_file});
        const int ranks = k * per_node;
        for (int r = 0; r < ranks; ++r) out_dir.files.push_back(out_dir.path + "/compute-command-" + shape + "-" + std::to_string(r) + ".jsonl");
        const std::string name = "tula-profile-command-" + std::to_string(::getpid()) + "-" + shape;
        std::vector<std::string> argv = {"sbatch", "--wait", "--quiet", "-N", std::to_string(k),
                                         "--ntasks-per-node=" + std::to_string(per_node), "-J", name, "-o", out, "-t", jo.time};
        if (!jo.partition.empty()) argv.insert(argv.end(), {"-p", jo.partition});
        argv.insert(argv.end(), {"--wrap", "hostname > " + shell_quote(host_file) + " && srun /bin/sh -c " + shell_quote(p.command)});
        std::printf("profile compute: %zu/%zu %s of %d rank%s: srun %s\n", i + 1, nodes.size(), nodes_phrase(k).c_str(),
                    per_node, per_node == 1 ? "" : "s", p.command.c_str());
        std::fflush(stdout);
        EnvSet env = command_env(p.workload, p.batch_sizes, p.min_seconds, pattern);
        for (const auto& e : class_env(job_class)) env.push_back(e);
        const JobOutcome job = run_job(argv, name, k, jo.timeout, env);
        std::fputs(job_output(out, "  | ", 40).c_str(), stdout);
        if (!job.result.ok() || !job.why.empty())
            throw Error("profile compute --command on " + nodes_phrase(k) + ": " +
                        (job.why.empty() ? describe_result(job.result, "sbatch --wait") : job.why + "; the job was cancelled") +
                        "; nothing was stored for it");
        std::string host = "unknown";
        try {
            host = one_line(read_text_file(host_file, 4096), 255);
        } catch (const std::exception&) {
        }
        const std::string cls = job_class ? *job_class : std::string();
        std::vector<std::vector<ComputeSample>> per_rank;
        std::optional<Workload> row;
        for (int r = 0; r < ranks; ++r) {
            const std::string f = out_dir.path + "/compute-command-" + shape + "-" + std::to_string(r) + ".jsonl";
            if (!file_exists(f))
                throw Error("profile compute --command on " + nodes_phrase(k) + ": rank " + std::to_string(r) +
                            " wrote no metrics file " + f + " (TULA_METRICS with %r replaced by SLURM_PROCID; the "
                            "output directory must be on a file system every node can write); nothing was stored");
            per_rank.push_back(samples_of(f, p.workload, p.batch_sizes, host, cls));
            if (!row) row = workload_row(f);
        }
        const std::vector<ComputeSample> together = combine_rank_profiles(per_rank, per_node);
        store_compute_profile(writer.path(), together, row);
        writer.done();
        std::printf("profile compute: %zu sample%s of %d ranks at once (the slowest rank's time) into %s\n",
                    together.size(), together.size() == 1 ? "" : "s", ranks, db.c_str());
    }
    return kExitOk;
}

}  // namespace tula::cli
