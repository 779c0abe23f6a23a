// tula CLI: what slurmctld says about the site: each partition's limits (MaxNodes, MaxTime),
// the nodes that are up, whether this user may submit there, and when a job of a given shape
// would start (slurm_job_will_run2). Only the `tula` command links libslurm; libtula does not.
//
// Every query runs in a child process with a deadline: a slurmctld that is stopped or slow
// costs the caller at most that deadline, never Slurm's own MessageTimeout, and a crash in
// libslurm cannot take the caller down. The child reports in tab-separated lines (one record
// a line, see encode_* / decode_reply), which the parent reads through a pipe.
#pragma once
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tula::cli {

/// One partition as slurmctld reports it (slurm_load_partitions and slurm_load_node).
struct SlurmPartition {
    std::string name;
    int total_nodes = 0;       ///< nodes in the partition
    int up_nodes = 0;          ///< of those, nodes neither down, drained, failing nor future
    int max_nodes = 0;         ///< MaxNodes per job; 0: unlimited
    int max_time_minutes = 0;  ///< MaxTime, minutes; 0: unlimited
    bool usable = true;        ///< State=UP and this user may submit there
    bool is_default = false;   ///< Default=YES: where a job without -p goes
    std::string why_not;       ///< why not usable ("State=DOWN", "AllowGroups=admin"); empty when usable
};

/// A job shape to ask slurmctld about: when would it start?
struct StartProbe {
    std::string partition;
    int nodes = 1;
    int ranks_per_node = 1;
    int gpus_per_node = 0;       ///< 0: none asked
    int time_limit_minutes = 1;  ///< > 0
    /// The job's --time-min, minutes: > 0 and below time_limit_minutes, query_starts also looks
    /// for a backfill hole (find_hole); 0: not asked.
    int time_min_minutes = 0;
};

/// slurmctld's answer for one StartProbe.
struct StartEstimate {
    bool answered = false;    ///< false: no answer (error or deadline); see error
    double wait_seconds = 0;  ///< expected start minus now, seconds (>= 0)
    std::string error;        ///< why there is no answer; empty when answered
    /// A start in a backfill hole (find_hole): a job at the probe's --time-min would start in
    /// hole_wait_seconds (seconds from now), and hole_minutes is the longest time limit that
    /// still starts then; hole_minutes 0: none found or not asked.
    double hole_wait_seconds = 0;
    int hole_minutes = 0;
};

/// Will-run questions per plan for the backfill holes, over all probes, and per probe: a
/// question at the --time-min, then bisection of the hole's length (each about 1-3 ms on the
/// testbed; 6 questions narrow a limit of 1000 minutes to within 32).
constexpr int kMaxHoleProbes = 48;
constexpr int kHoleProbesPerShape = 6;
/// A start at the --time-min is a hole only when it is at least this much earlier than the
/// start at the full limit, seconds (backfill plans in whole minutes).
constexpr double kHoleEarlierSeconds = 60;
/// A longer limit starts "in the hole" when slurmctld's start for it is within this of the
/// start at the --time-min, seconds (the clock moves between the questions).
constexpr double kHoleSlackSeconds = 5;

/// The wait, seconds from now, of a job of a fixed shape with time limit `minutes`; nullopt
/// when slurmctld did not answer (slurm_job_will_run2 in the query child; a fake in tests).
using StartOracle = std::function<std::optional<double>(int minutes)>;

/// What find_hole found: `minutes` 0 when there is no hole.
struct HoleFound {
    double wait_seconds = 0;  ///< start of a job at the --time-min, seconds from now
    int minutes = 0;          ///< the longest limit found that starts then (a lower bound when
                              ///< the questions ran out), minutes
    int probes = 0;           ///< questions asked
};

/// Looks for a backfill hole: asks `start` for `time_min` minutes; when that start is at least
/// kHoleEarlierSeconds before `full_wait_seconds` (the start at `time_limit`), bisects the
/// limits (time_min, time_limit) for the longest one that starts within kHoleSlackSeconds of it
/// (a limit that is not answered counts as not starting then). At most `max_probes` questions.
/// No hole when time_min < 1, time_min >= time_limit, max_probes < 1 or the first question is
/// not answered.
HoleFound find_hole(int time_min, int time_limit, double full_wait_seconds, const StartOracle& start,
                    int max_probes);

/// At most this many reservation ends are tried for one probe (wait_after_reservations).
constexpr int kMaxReservationEnds = 3;

/// The wait, seconds from now, of a job of a fixed shape and limit that may not start before
/// `begin` (seconds since the epoch; 0: now); nullopt when slurmctld did not answer
/// (slurm_job_will_run2 with the job's begin time in the query child; a fake in tests).
using BeginOracle = std::function<std::optional<double>(time_t begin)>;

/// The wait of a job whose will-run question failed because a reservation that the job may not
/// use overlaps its limit: slurmctld's will-run refuses such a job ("Requested node
/// configuration is not available") instead of starting it after the reservation. Asks `start`
/// again with the job beginning at each of `reservation_ends` (seconds since the epoch) after
/// `now`, earliest first, each end once, at most `max_tries`; returns the first answer, seconds
/// from now, or nullopt when none answers. *asked (may be null) gets the questions asked.
std::optional<double> wait_after_reservations(const BeginOracle& start, std::vector<time_t> reservation_ends,
                                              time_t now, int max_tries, int* asked);


/// What one query returned: `answered` false when slurmctld did not answer before the
/// deadline or could not be asked (error says which).
struct SlurmSite {
    bool answered = false;
    std::string error;
    std::vector<SlurmPartition> partitions;
};

/// Partitions, limits and up nodes from slurmctld, for the calling user (getuid, getgroups),
/// within `timeout_seconds` (> 0) of wall-clock time. Never throws for Slurm's errors or a
/// slow controller: those come back as answered = false with the reason.
SlurmSite query_partitions(double timeout_seconds);

/// For each probe, when slurmctld would start such a job now (slurm_job_will_run2), within
/// `timeout_seconds` for all of them together; probes not answered in time come back with
/// answered = false. A probe that slurmctld refuses now is asked again at the ends of the
/// reservations (wait_after_reservations), since a reservation it may not use makes slurmctld
/// refuse it instead of starting it later. After every probe's start, the probes with a time_min_minutes are asked
/// about a backfill hole (find_hole, kHoleProbesPerShape each, kMaxHoleProbes in all, in the
/// same deadline). Never throws for Slurm's errors.
std::vector<StartEstimate> query_starts(const std::vector<StartProbe>& probes, double timeout_seconds);

// The child's line protocol, pure (unit-tested).

/// "P\tname\ttotal\tup\tmax_nodes\tmax_time\tusable\tdefault\twhy\n"; tabs and newlines in text fields
/// become spaces.
std::string encode_partition(const SlurmPartition& p);
/// "S\tindex\twait_seconds\n", or "E\tindex\tmessage\n" when not answered.
std::string encode_start(size_t index, const StartEstimate& s);
/// "H\tindex\twait_seconds\tminutes\n": a backfill hole of the probe `index` (minutes > 0).
std::string encode_hole(size_t index, const HoleFound& h);
/// "X\tmessage\n": the whole query failed.
std::string encode_failure(const std::string& message);
/// "D\n": the child's last line, written after everything else (a reply without it was cut
/// short: the child died, for example when a Slurm plugin could not be loaded into it).
std::string encode_done();
/// Whether `text` ends with the child's last line (encode_done).
bool reply_complete(const std::string& text);

/// Parses the child's whole output into `site` (P and X lines) and `starts` (S, E and H lines;
/// indices beyond starts.size() are ignored). Malformed lines are skipped. Returns false if an
/// X line was seen, with its message in site.error.
bool decode_reply(const std::string& text, SlurmSite* site, std::vector<StartEstimate>* starts);

/// Whether a user in groups `user_groups` may submit to a partition whose AllowGroups is
/// `allow_groups` (comma-separated group names; empty or "ALL": everyone).
bool groups_allowed(const std::string& allow_groups, const std::vector<std::string>& user_groups);

}  // namespace tula::cli
