// tula CLI: planning for the site as Slurm has it now: the partitions and ranks per node the
// user asked for (sbatch -p, --ntasks-per-node), each partition's limits from slurmctld
// (MaxNodes, MaxTime, nodes up, who may submit), and the queue: the expected start of the
// leading candidates (slurm_job_will_run2), so that they are ranked by time to result.
#pragma once
#include <string>
#include <vector>

#include "format.hpp"
#include "tula/conf.hpp"
#include "tula/hardware.hpp"
#include "tula/planner.hpp"

namespace tula::cli {

/// Narrows `cfg` to what the user fixed. `partitions`: a comma list of Slurm partition names
/// (sbatch -p); with partition sections in tula.conf only those sections are planned (in
/// tula.conf's order), without sections the list is Slurm's business and nothing changes.
/// `ranks_per_node` > 0 (sbatch --ntasks-per-node): every partition runs that many ranks per
/// node. Errors: UsageError for a malformed list or a count outside 1 .. 1024; tula::Error
/// when no section is named in the list (the message lists the sections).
void narrow_site(Config* cfg, const std::string& partitions, int ranks_per_node);

/// Narrows the partitions of a --hardware `file` (`parts`, in the file's order) to those of
/// `partitions` (a comma list, as narrow_site's; a one-partition file's partition is named by
/// the file's cluster name). Errors: UsageError for a malformed list, a list that names none of
/// the file's partitions (the message lists them), or a `ranks_per_node` above a kept
/// partition's gpus_per_node. `ranks_per_node` > 0: the job runs that many GPUs of each node, one
/// rank each (a run's ranks per node are its GPUs per node), so each kept partition's
/// gpus_per_node becomes it; 0: the file's.
void narrow_hardware(std::vector<HardwareSpec>* parts, const std::string& file, const std::string& partitions,
                     int ranks_per_node);

/// Whether this process runs where Slurm is configured: $SLURM_CONF names a file, or
/// /etc/slurm/slurm.conf exists. Only then does the tula command ask slurmctld.
bool slurm_configured();

/// What asking slurmctld gave, for the summary and the queue step.
struct SiteQueue {
    bool asked = false;          ///< slurmctld was asked (queue_estimate = yes, Slurm configured)
    bool answered = false;       ///< it answered the partition query in time
    double seconds_left = 0;     ///< of tula.conf's queue_timeout, for the start estimates
    std::string note;            ///< one phrase for the summary line; empty when nothing to say
};

/// Applies slurmctld's partition limits to `cfg` (see site.hpp's header): each planned
/// partition's nodes become at most its MaxNodes and its nodes that are up, MaxTime becomes
/// PartitionConf::max_time_minutes, and a partition Slurm does not have, that is not up, or
/// that this user may not use gets PartitionConf::unavailable (it is left out with that
/// reason). The implicit partition of a file without sections is Slurm's default partition.
/// Does nothing unless cfg.queue_estimate and slurm_configured(). When slurmctld does not
/// answer within cfg.queue_timeout, `cfg` is unchanged and a line goes to `warnings`.
/// Never throws for Slurm's errors.
SiteQueue apply_slurm_limits(Config* cfg, std::vector<std::string>* warnings);

/// Ranks r->plan by time to result (apply_queue_starts): asks slurmctld when the leading
/// candidates would start (for each partition, the node counts of its own time/cost Pareto
/// front and of the plan's, at most 16 shapes in all, each at its time limit), gives every
/// other candidate the wait of the nearest probed node count at or above its own in its
/// partition (else its partition's largest), and chooses again. When r->time_min, each shape
/// is also asked at its --time-min for a backfill hole (StartProbe::time_min_minutes,
/// find_hole), and a candidate whose own --time-min fits in the hole of its shape is ranked by
/// the hole and the requeued rest when that is earlier (apply_queue_starts); the note then
/// ends with hole_phrase. Sets q->note to the expected
/// wait of the choice and what the queue changed ("fast starts in about 25 min; 2 nodes of cpu
/// start now and finish first"). Does nothing unless q->answered. Never throws for Slurm's
/// errors (a start that is not answered counts as no wait, and a warning says so); throws
/// tula::Error as apply_queue_starts when no candidate meets a deadline or budget any more.
void apply_queue(PlanReport* r, const Config& cfg, const PolicySpec& policy, SiteQueue* q,
                 std::vector<std::string>* warnings);

}  // namespace tula::cli
