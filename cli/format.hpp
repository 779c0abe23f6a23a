// tula CLI: pure formatting and validation helpers (no I/O, no global state), shared by the
// command files and unit-testable on their own (they depend only on libtula's headers and
// nlohmann-json).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tula/db.hpp"
#include "tula/models.hpp"
#include "tula/planner.hpp"

namespace tula::cli {

using Json = nlohmann::ordered_json;

/// Ordered key=value pairs, the `--format kv` output (one `key=value` line each).
using KeyValues = std::vector<std::pair<std::string, std::string>>;

/// `msg` without a leading "tula: " (libtula's messages carry it; the CLI adds its own).
std::string bare_message(const std::string& msg);

/// One printable line: control characters (newlines, tabs, ESC ...) become spaces, leading
/// and trailing blanks are dropped, and the result is cut to at most `max_bytes` bytes
/// (then "..." is appended). Used for every kv value and every one-line message.
std::string one_line(const std::string& s, size_t max_bytes = 400);

/// printf-style formatting of one double, e.g. format_number("%.1f", 94.04) == "94.0".
/// Non-finite values give "nan" / "inf" as printf does.
std::string format_number(const char* fmt, double v);

/// A duration for people: "850 ms", "9.4 s", "94.2 s", "110 s", "12.5 min", "3.2 h", "2.1 d".
/// Seconds in; "n/a" for negative or non-finite input.
std::string format_duration(double seconds);

/// A Unix time (seconds) as local "YYYY-MM-DD HH:MM"; "" for 0 or negative.
std::string format_time(double unix_seconds);

/// "1 node" / "3 nodes".
std::string nodes_phrase(int nodes);

/// Comma list of integers, "16,32,64".
std::string join_ints(const std::vector<int>& v, const char* sep = ",");

/// True if `name` has the form MODEL@DATASET, both parts non-empty and made of letters,
/// digits, '_', '.', '-', at most 127 bytes in all (the form cli_filter.lua accepts).
bool valid_workload_name(const std::string& name);

/// Splits "MODEL@DATASET" (valid_workload_name must hold). Returns false otherwise.
bool split_workload(const std::string& name, std::string* model, std::string* dataset);

/// True for a Slurm job id as tula-train records it: 1..64 bytes of digits, letters, '_',
/// '.', '+', '-' (covers array jobs "123_4" and het jobs "123+0").
bool valid_job_id(const std::string& id);

/// `s` as one single-quoted POSIX shell word (safe for any byte except NUL).
std::string shell_quote(const std::string& s);

/// Relative prediction error in percent, (measured - predicted) / measured * 100: positive
/// when the job took longer than predicted. nullopt when either is not positive and finite
/// (no prediction was recorded).
std::optional<double> error_percent(double measured_seconds, double predicted_seconds);

/// Seconds as Slurm's time format: "01:30:00" (HH:MM:SS, hours below 24), "1-02:00:00"
/// (D-HH:MM:SS) from one day on; rounded to whole seconds; "n/a" for negative or non-finite.
std::string format_hms(double seconds);

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
    /// Price of one node-hour with its GPUs: price_per_node_hour + gpus_per_node *
    /// price_per_gpu_hour (currency units per node-hour); what budgets are converted with.
    double node_hour_price() const { return price_per_node_hour + gpus_per_node * price_per_gpu_hour; }
    double time_margin = 0.25;          ///< fraction, from tula.conf
    double time_overhead = 120;         ///< seconds, from tula.conf
    int fixed_nodes = 0;                ///< --nodes, 0 when not given
    double deadline_seconds = 0;        ///< Policy::Deadline: seconds of training allowed
    double budget = 0;                  ///< Policy::Budget: price unit of tula.conf
    bool simulated = false;             ///< planned from a hardware file (tula plan --hardware), not profiles
    std::string hardware;               ///< the hardware file's path and cluster name when simulated
    Plan plan;
    std::vector<std::string> warnings;  ///< one line each, without "tula: "
};

/// The one-line summary of the choice, e.g. "lenet5@fashion-mnist: 2 nodes x global batch
/// 256, predicted 94 s training, 0.05 node-hours (knee of the time/cost Pareto front)".
std::string plan_summary(const PlanReport& r);

/// The `tula plan --format kv` lines on success (the contract of tula(1) and
/// etc/cli_filter.lua): status, workload, nodes, global_batch, local_batch, epochs,
/// predicted_seconds (%.1f), epoch_seconds, cost, node_hours, time_limit (minutes),
/// candidates, policy, reason, summary, then the choice's other fields: policy_phrase,
/// deadline_seconds / budget (with those policies), predicted_seconds_upper, cost_upper
/// (95 % prediction bounds), iter_seconds, memory_bytes (per rank, 0 when not modelled),
/// expected_accuracy (fraction, empty without run history), epochs_to_target, pareto (1/0),
/// max_local_batch (0: no memory bound), gamma, simulated (1/0; hardware= when 1),
/// flagged_runs (comma list of the job ids of Plan::flagged_runs, empty when none), then
/// one warning= per warning.
KeyValues plan_kv(const PlanReport& r);

/// `--format kv` lines of a failure: status=error, message=..., then warning= lines.
KeyValues error_kv(const std::string& message, const std::vector<std::string>& warnings = {});

/// "key=value\n" per pair; every value passes through one_line().
std::string render_kv(const KeyValues& kv);

/// The whole plan as JSON: workload, epochs, policy (and policy_phrase, deadline_seconds,
/// budget), simulated (and hardware), price and margins, max_local_batch, gamma, candidates
/// (all fields of tula::Candidate plus "chosen"), chosen (index), choice, reason, time limit,
/// summary, flagged_runs (run_check_json each), warnings.
Json plan_json(const PlanReport& r);

/// One candidate as a JSON object (all fields of tula::Candidate; seconds, node-hours, cost,
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
/// noise_scale in examples, null when not measured).
Json run_json(const RunRecord& r);

/// `tula explain --format kv` lines for a run found in database `db_path`: status=ok,
/// job_id, workload, nodes, global_batch, local_batch, epochs, measured_seconds (%.1f),
/// predicted_seconds (%.1f), error_percent (%.1f, empty without a prediction),
/// test_accuracy (fraction, %.4f), database; with `check`: flagged (1/0), interval_lower and
/// interval_upper (%.1f seconds, empty without an interval), refit_predicted_seconds (%.1f);
/// without: flagged= (empty: the run could not be checked).
KeyValues explain_kv(const RunRecord& r, const std::string& db_path, const std::optional<RunCheck>& check = std::nullopt);

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

/// A text table: a header row and data rows; columns right-aligned when `right[i]` is true
/// (numbers), left-aligned otherwise. Every row has the header's column count (missing
/// cells print empty, extra cells are dropped). Columns are separated by two spaces and
/// each line starts with `indent`. Widths count bytes (the CLI prints ASCII only).
struct Table {
    std::vector<std::string> header;
    std::vector<bool> right;
    std::vector<std::vector<std::string>> rows;
};
/// Renders `t` as text, one line per row, the header first; ends with a newline.
std::string render_table(const Table& t, const std::string& indent = "  ");
/// The same lines without newlines: element 0 is the header, element i+1 data row i (so that
/// a caller can highlight a row on a terminal).
std::vector<std::string> render_table_lines(const Table& t, const std::string& indent = "  ");

}  // namespace tula::cli
