// tula CLI: the reports of the commands (plan summary, kv and JSON, run checks, explain, the
// compute fit), built from libtula's records. Pure: no I/O, no global state; unit-tested with
// text.hpp.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

// the JSON type by name (json_fwd.hpp): json.hpp costs seconds of compile per file, so only
// the files that build or read JSON include it.
#include <nlohmann/json_fwd.hpp>

#include "tula/db.hpp"
#include "tula/models.hpp"
#include "tula/planner.hpp"
#include "text.hpp"

namespace tula::cli {

using Json = nlohmann::ordered_json;

/// Relative prediction error in percent, (measured - predicted) / measured * 100: positive
/// when the job took longer than predicted. nullopt when either is not positive and finite
/// (no prediction was recorded).
std::optional<double> error_percent(double measured_seconds, double predicted_seconds);

/// Short phrase saying what a policy picks: "knee of the time/cost Pareto front",
/// "fastest", "cheapest", "cheapest meeting deadline 01:30:00" (`deadline_seconds`, seconds),
/// "fastest within budget 3.5 node-hours" (`budget` in the price unit of tula.conf; with a
/// price per node-hour other than 1 the phrase says "3.5 (= 1.4 node-hours at 2.5 per
/// node-hour)").
std::string policy_phrase(Policy p, double deadline_seconds = 0, double budget = 0,
                          double price_per_node_hour = 1.0);

/// Everything `tula plan` prints, whatever the format.
struct PlanReport {
    std::string workload;               ///< "<model>@<dataset>"
    int epochs = 0;                     ///< epochs the plan is for
    Policy policy = Policy::Auto;
    double price_per_node_hour = 1.0;   ///< from tula.conf, per node-hour
    int gpus_per_node = 0;              ///< from tula.conf (or the hardware file)
    double price_per_gpu_hour = 0;      ///< from tula.conf, per GPU-hour on top of the node price
    double watts_per_node = 0;          ///< from tula.conf, watts; 0: no energy figure
    /// tula::node_hour_price of these prices (currency units per node-hour); what budgets are
    /// converted with.
    double node_hour_price() const { return tula::node_hour_price(price_per_node_hour, gpus_per_node, price_per_gpu_hour); }
    double time_margin = 0.25;          ///< fraction, from tula.conf
    double time_overhead = 120;         ///< seconds, from tula.conf
    int fixed_nodes = 0;                ///< --nodes, 0 when not given
    /// CPUs one rank computes on: the batch script's `tula-train --threads T` (the submission
    /// asks Slurm for them with --cpus-per-task); 0 when the script does not say.
    int cpus_per_rank = 0;
    /// The job gets a --time-min (tula plan --time-min, sbatch --tula-time-min, else tula.conf's
    /// time_min), so it may start in a backfill hole.
    bool time_min = false;
    double deadline_seconds = 0;        ///< Policy::Deadline: seconds of training allowed
    double budget = 0;                  ///< Policy::Budget: price unit of tula.conf
    bool simulated = false;             ///< planned from a hardware file (tula plan --hardware), not profiles
    std::string hardware;               ///< the hardware file's path and cluster name when simulated
    Plan plan;
    std::vector<std::string> warnings;  ///< one line each, without "tula: "
    /// What the queue means for the choice (site.hpp, apply_queue): "starts in about 25 min on
    /// gpu", or that the queue is not known; empty when there is nothing to say.
    std::string queue_note;
    /// The Slurm jobs that measured the compute samples the plan rests on
    /// (ComputeSample::job_id, e.g. a first job that measured itself), in the order of the
    /// samples, each once; empty when no sample names one.
    std::vector<std::string> profile_jobs;
};

/// The distinct non-empty job ids of `samples` (ComputeSample::job_id), first seen first.
/// Pure.
std::vector<std::string> measuring_jobs(const std::vector<ComputeSample>& samples);

/// "job 12", "jobs 12 and 13", "jobs 12, 13 and 14", at most `max_shown` named ("jobs 1, 2, 3
/// and 4 more"); "" for none. Pure.
std::string jobs_phrase(const std::vector<std::string>& jobs, size_t max_shown = 3);

/// The one-line summary of the choice, e.g. "lenet5@fashion-mnist: 2 nodes x global batch
/// 256, predicted 94 s training, 0.05 node-hours (knee of the time/cost Pareto front)".
std::string plan_summary(const PlanReport& r);

/// The `tula plan --format kv` lines on success (the contract of tula(1) and
/// etc/cli_filter.lua): status, workload, nodes, global_batch, local_batch, epochs,
/// predicted_seconds (%.1f), epoch_seconds, cost, node_hours, time_limit (minutes),
/// signal_seconds, time_min (minutes: time_min_minutes of the choice), candidates, policy, reason, summary, then the choice's other fields: policy_phrase,
/// deadline_seconds / budget (with those policies), predicted_seconds_upper, cost_upper
/// (95 % prediction bounds), iter_seconds, memory_bytes (per rank, 0 when not modelled),
/// expected_accuracy (fraction, empty without run history), epochs_to_target, pareto (1/0),
/// max_local_batch (0: no memory bound), gamma, simulated (1/0; hardware= when 1),
/// flagged_runs (comma list of the job ids of Plan::flagged_runs, empty when none),
/// partition (empty for a tula.conf without partition sections), ranks_per_node,
/// gpus_per_node, exclusive (yes: whole nodes, no), cpus_per_rank (0: the script gives no
/// --threads), scaled_from (the class a partition without profiles was predicted from;
/// empty when its own), queue_wait_seconds, queue; when the choice starts in a backfill hole
/// (Candidate::hole used): hole_wait_seconds, hole_seconds, hole_part_seconds, hole_parts,
/// hole_train_seconds, rest_parts, rest_wait_seconds, rest_train_seconds (seconds; parts a
/// count) and hole (hole_phrase); one left_out= per
/// partition left out ("NAME: why"), then one warning= per warning.
KeyValues plan_kv(const PlanReport& r);

/// `--format kv` lines of a failure: status=error, message=..., then warning= lines.
KeyValues error_kv(const std::string& message, const std::vector<std::string>& warnings = {});

/// The whole plan as JSON: workload, epochs, policy (and policy_phrase, deadline_seconds,
/// budget), simulated (and hardware), price and margins, max_local_batch, gamma, candidates
/// (all fields of tula::Candidate plus "chosen"; "hole" only when it is used), left_out (partitions not planned, "NAME:
/// why"), chosen (index), choice, reason, time limit,
/// summary, flagged_runs (run_check_json each), warnings.
Json plan_json(const PlanReport& r);

/// One candidate as a JSON object (all fields of tula::Candidate, its partition, ranks and GPUs
/// per node and scaled_from among them; seconds, node-hours, cost,
/// bytes; expected_accuracy is null when there is no run history).
Json candidate_json(const Candidate& c);

/// One line about a run checked against its prediction interval, e.g. "job 42 (2 nodes x
/// 256, 5 epochs): measured 61.0 s, outside the 95 % prediction interval 40.1..48.3 s of
/// the refitted models (predicted 44.2 s)"; "inside" when not flagged; "no interval" when the
/// fit had none.
std::string run_check_line(const RunCheck& c);

/// A RunCheck as JSON (every field; seconds).
Json run_check_json(const RunCheck& c);

/// A finished run as JSON (all fields of tula::RunRecord, error_percent, per-epoch arrays;
/// noise_scale in examples, null when not measured; part_seconds in seconds, null with one
/// part or when not known).
Json run_json(const RunRecord& r);

/// `tula explain --format kv` lines for a run found in database `db_path`: status=ok,
/// job_id, workload, nodes, global_batch, local_batch, epochs, measured_seconds (%.1f),
/// predicted_seconds (%.1f), error_percent (%.1f, empty without a prediction),
/// slower_than_planned (measured / predicted, %.2f, when above kSlowerThanPlanned, tula/stop.hpp;
/// else empty), parts (the processes the run trained in), test_accuracy (fraction, %.4f), database,
/// profile_jobs (`profile_jobs`, comma-separated: the jobs that measured the workload's compute
/// samples); with `check`: flagged (1/0), interval_lower and
/// interval_upper (%.1f seconds, empty without an interval), refit_predicted_seconds (%.1f);
/// without: flagged= (empty: the run could not be checked).
KeyValues explain_kv(const RunRecord& r, const std::string& db_path, const std::optional<RunCheck>& check = std::nullopt,
                     const std::vector<std::string>& profile_jobs = {});

/// What `tula profile compute` prints about the compute fit: line 0 names the form the AIC
/// chose ("linear" or "flat-then-linear"), both AIC values and the formula with its
/// coefficients (ms, ms per example); then a table (render_table_lines, header first) with
/// one row per distinct local batch of `samples`: local batch, samples, measured mean (ms),
/// predicted (ms), residual measured - predicted (ms and % of measured), over the samples of
/// one rank alone; then compute_extra_lines(m). Samples with a non-positive or non-finite
/// time are left out.
std::vector<std::string> compute_fit_lines(const ComputeModel& m, const std::vector<ComputeSample>& samples);
/// How much a profile's rounds disagree, percent: for each local batch with at least 2
/// samples of one rank alone (finite, > 0), (max - min) / median of their seconds per
/// iteration; then the median of that over those batch sizes (tula::median). A robust summary
/// of the host's noise while it profiled, which every prediction from the profile inherits;
/// this project's own measure (no paper). NaN when no batch size has 2 samples. Pure.
double round_spread_percent(const std::vector<ComputeSample>& samples);
/// Above this round_spread_percent, `tula profile compute` warns that the host was busy.
constexpr double kNoisyProfilePercent = 15.0;
/// The compute model's start-up seconds per profiled local batch (one line, none without a
/// measured start-up), then one line per node count K profiled with K ranks at once: its
/// concurrency factors c_K(b) (ComputeModel::concurrent, dimensionless) at each local batch.
/// Errors: none.
std::vector<std::string> compute_extra_lines(const ComputeModel& m);

}  // namespace tula::cli
