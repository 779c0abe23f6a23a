// tula CLI: `tula plan` as a function, for the commands that plan in the same process
// (tula plan itself, tula submit-filter).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "format.hpp"
#include "tula/hardware.hpp"
#include "tula/planner.hpp"

namespace tula::cli {

/// The options of `tula plan` (tula(1)), typed: what the command line gives as text is parsed
/// once, before planning (tula plan's option parsing, decide_submission).
struct PlanOptions : TargetOptions {
    CommonOptions common;
    /// --node-range LO-HI, node counts (1 <= LO <= HI <= 1000000, at most TULA_PLAN_ROWS_MAX of
    /// them): Slurm may give the job any count in it; nullopt: not given.
    std::optional<std::pair<int, int>> node_range;
    /// --policy: the policy and its deadline (seconds) or budget (price unit); its other fields
    /// come from the other options (make_plan_report sets them).
    PolicySpec policy;
    std::string hardware;  ///< --hardware FILE: simulation mode
    double target_accuracy = -1;  ///< --target-accuracy A: a fraction in (0, 1]; -1: not given
    std::string format = "table";
    bool json = false;
    int timeout = 0;  ///< --timeout SECONDS; 0: no limit
    std::string partition;  ///< --partition LIST (sbatch -p): plan only these partitions
    int ranks_per_node = 0;  ///< --ranks-per-node N (sbatch --ntasks-per-node); 0: each partition's
    /// --time-min yes|no (sbatch --tula-time-min): the job gets a --time-min, so the queue
    /// estimate also looks for a backfill hole; "": tula.conf's time_min.
    std::string time_min;
    /// The batch script's text when it is not a file (sbatch --wrap, standard input); `script`
    /// then names it in messages.
    std::string script_text;
};

/// Plans as `tula plan` does with options `o`: the report every format prints, the plan table
/// the job receives (`*table`: WORKLOAD;N:B:E:S[:R][;...], spank-tula(8); "" for a simulated
/// plan) and, for a hardware file of one partition, the models derived from it (`*sim`).
/// Warnings are appended to `*warnings`. Errors: UsageError (a bad option combination or
/// value), tula::Error (unknown workload, no profile, nothing feasible, unreadable file).
PlanReport make_plan_report(const PlanOptions& o, std::vector<std::string>* warnings, std::string* table,
                            std::optional<SimulatedModels>* sim);

/// --node-range's text "LO-HI" (or "N"): the counts. Errors: UsageError for anything else, for
/// LO < 1, HI < LO, HI > 1000000 or more than TULA_PLAN_ROWS_MAX counts.
std::pair<int, int> parse_node_range(const std::string& s);

/// --timeout: `seconds` (> 0) of wall-clock time from now, after which SIGALRM ends the
/// process with its default action (a shell reports exit status 142), printing nothing.
/// Errors: tula::Error when a call fails.
void arm_timeout(int seconds);

}  // namespace tula::cli
