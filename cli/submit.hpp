// tula CLI: the submission filter's decisions (`tula submit-filter`, which etc/cli_filter.lua
// runs at `sbatch --tula`): the mode, the policy with its deadline or budget, the job's source,
// what the user fixed of its shape, and what to set from the plan. Pure: the plan comes from a
// function the caller passes (the command plans in the same process); unit-tested.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan.hpp"

namespace tula::cli {

/// What sbatch was given, as cli_filter/lua shows it: `options` holds the Slurm options read
/// (nodes, time, partition, ntasks, ntasks-per-node, nodelist, gpus, gpus-per-node, gres,
/// gpus-per-task, gpus-per-socket, wrap, signal, requeue, time-min, exclusive, oversubscribe,
/// cpus-per-task, and argv1: the batch script's path),
/// absent when nil; `spank` the plugin's options (tula, tula-workload, tula-deadline, tula-budget,
/// tula-epochs, tula-time-min) that were given; `env` the variables the filter reads (TULA_MODE,
/// TULA_WORKLOAD, TULA_DEADLINE, TULA_BUDGET and the plugstack's TULA_PLUGSTACK_*); `type`
/// sbatch, salloc or srun; `offset` the heterogeneous job component; `stdin_script` the batch
/// script read from standard input when that is a regular file (nullopt: a pipe, a terminal).
struct SubmitInput {
    std::string type = "sbatch";
    int offset = 0;
    std::map<std::string, std::string> options;
    std::map<std::string, std::string> spank;
    std::map<std::string, std::string> env;
    std::optional<std::string> stdin_script;
};

/// The site settings of the plugstack line, from the environment tula.so sets in sbatch
/// (spank-tula(8)): conf= (TULA_PLUGSTACK_CONF), db= and margin= (TULA_PLUGSTACK_DB,
/// TULA_PLUGSTACK_MARGIN: absolute paths below 1024 bytes and plain decimals; other values
/// are ignored), whether the plugin is loaded, its memory file for the plan table, why it is
/// disabled, and strict.
struct SiteSettings {
    std::string conf;    ///< "" : the default tula.conf
    std::string db;      ///< "" : tula.conf's system_db
    double margin = -1;  ///< < 0: tula.conf's time_margin
    std::string plan;    ///< the plugin's memory file ("" : none)
    std::string disabled;  ///< why the plugin refused its plugstack arguments ("" : it did not)
    bool loaded = false;
    bool strict = false;
};
/// SiteSettings from `env` (SubmitInput::env). Pure.
SiteSettings site_settings(const std::map<std::string, std::string>& env);

/// What the submission filter takes of a plan: the chosen node count, the time
/// limit (minutes), the seconds before it that the stop signal comes (Candidate::signal_seconds;
/// 0: none), the --time-min and whether tula.conf asks for it, the one-line summary, the plan table for the plugin, and the partition, ranks per
/// node and GPUs per node of the choice ("" / 0 : none).
struct PlanAnswer {
    int nodes = 0;
    int time_limit = 0;
    int signal_seconds = 0;
    int time_min = 0;               ///< the job's --time-min, minutes (time_min_minutes; 0: none)
    bool time_min_default = false;  ///< the plan was for a --time-min (tula.conf's time_min, or the job's --tula-time-min): set one unless the job says no
    std::string summary;
    std::string table;
    std::string partition;
    int ranks_per_node = 0;
    int gpus_per_node = 0;
    bool exclusive = false;  ///< the plan assumed whole nodes (tula.conf exclusive): ask --exclusive
    int cpus_per_rank = 0;   ///< CPUs of one rank (the script's --threads; 0: not said): ask --cpus-per-task
    /// Whether the chosen partition's class has a compute profile of its own
    /// (Candidate::own_profile); without one the job measures its step (TULA_PROFILE=1).
    bool own_profile = true;
};

/// The decision the plugin hands to the job (the decision record, tula/tula.h: cli_filter.lua
/// copies record_lines() into the plugin's memory file): the canonical mode ("" : Tula is off
/// for the submission, no record), the deadline or budget policy as policy_text() writes it
/// ("" : the mode's), the workload given (--tula-workload, $TULA_WORKLOAD; "" : none) and the
/// plan table ("" : no plan reached the job).
struct SubmitRecord {
    std::string mode;
    std::string policy;
    std::string workload;
    std::string table;
};

/// The record's lines, KEY=VALUE in the order of tula/tula.h, absent fields left out; none when
/// the mode is "". Pure.
std::vector<std::string> record_lines(const SubmitRecord& r);

/// A deadline or budget policy as the record and the job's TULA_POLICY show it:
/// "deadline=HH:MM:SS" (format_hms: D-HH:MM:SS from a day on) or "budget=X" (a plain decimal,
/// the shortest that reads back as `p.budget`); "" for the other policies. Pure.
std::string policy_text(const PolicySpec& p);

/// What the filter does: leave the job unchanged (silently or with `said` lines), change it
/// (`sets`: option name and value, in order; `record.table`: the plan table), let it measure
/// itself (Measure: `sets` only, --export with TULA_PROFILE=1; no table) or refuse it (strict
/// sites). `record`: what the plugin passes to the job, whenever Tula is on for the submission
/// (the job of an unchanged one then says that no plan reached it). `said`: the lines to print,
/// each starting "tula: ".
struct SubmitOutcome {
    enum class Kind { Unchanged, Changed, Measure, Refused };
    Kind kind = Kind::Unchanged;
    std::vector<std::pair<std::string, std::string>> sets;
    SubmitRecord record;
    std::vector<std::string> said;
};

/// The planner the filter asks with tula plan's options (the policy, the workload and/or the
/// script, the node range the user asked for, fixed epochs, the partitions and ranks per
/// node the user fixed, and the site's tula.conf, db= and margin=): returns the plan or
/// throws std::exception with the reason (its first warning, when there is one, in
/// parentheses).
using Planner = std::function<PlanAnswer(const PlanOptions&)>;

/// The whole decision of one submission (what etc/cli_filter.lua applies), in order:
/// only sbatch's first component; the mode (--tula, else $TULA_MODE, else auto when
/// --tula-deadline or --tula-budget was given, else off; a bare --tula, shown as "set", is
/// auto); salloc is told it is not planned; a disabled or absent plugin, a bad mode, policy,
/// workload or node range is a problem; the plan; then --nodes and --time set only where the
/// user left them open, and the partition, ranks per node and GPUs per node likewise, whole
/// nodes (--exclusive) where the plan assumed them and the user gave neither --exclusive nor
/// --oversubscribe, the plan's CPUs per rank (--cpus-per-task) where the user gave no -c
/// (shape_changes), and --signal=USR1@S (S: the plan's signal_seconds) and --requeue where the
/// user gave no --signal and neither --requeue nor --no-requeue (stop_changes), and --time-min
/// with --tula-time-min=yes, or tula.conf's time_min = yes unless --tula-time-min=no, where
/// the user gave none (at most the job's time limit). A workload with no profile
/// (NoProfileError from the planner) runs as submitted and measures itself: --export set to
/// ALL,TULA_PROFILE=1 where the user gave no --export and no SBATCH_EXPORT (tula-jobs(7)),
/// with one line, strict or not; with the user's own --export it is a problem that says to add
/// TULA_PROFILE=1 to it. A problem leaves the job unchanged with one `tula: warning: ...; job
/// submitted unchanged` line, or under strict refuses it with one `tula: error: ...` line.
/// dry-run says what it would set and changes nothing. The outcome's record holds the mode
/// once Tula is on (not off, a valid mode), then the policy and the workload once they are
/// valid, and the plan table when the job is changed: what the plugin passes to the job.
/// Errors: none (the planner's are problems).
SubmitOutcome decide_submission(const SubmitInput& in, const Planner& planner);

/// Whole minutes (seconds rounded up) of a Slurm time string: M, M:S, H:M:S, D-H, D-H:M,
/// D-H:M:S. nullopt for UNLIMITED, 0, empty or anything unparsable (no limit given), and for
/// Slurm's NO_VAL (4294967294 minutes, what 22.05 shows for a --time not given). Pure.
std::optional<long> time_minutes(const std::string& t);

/// The node counts asked for with --nodes as cli_filter shows them: "N" or "LO-HI" (LO >= 1,
/// HI <= 1000000); nullopt for "1-0" (not given), empty or anything else. Pure.
std::optional<std::pair<int, int>> node_request(const std::string& nodes);

}  // namespace tula::cli
