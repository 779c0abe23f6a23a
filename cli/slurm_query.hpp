// tula CLI: what slurmctld says about the site: each partition's limits (MaxNodes, MaxTime),
// the nodes that are up, whether this user may submit there, and when a job of a given shape
// would start (slurm_job_will_run2). Only the `tula` command links libslurm; libtula does not.
//
// Every query runs in a child process with a deadline: a slurmctld that is stopped or slow
// costs the caller at most that deadline, never Slurm's own MessageTimeout, and a crash in
// libslurm cannot take the caller down. The child reports in tab-separated lines (one record
// a line, see encode_* / decode_reply), which the parent reads through a pipe.
#pragma once
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
};

/// slurmctld's answer for one StartProbe.
struct StartEstimate {
    bool answered = false;    ///< false: no answer (error or deadline); see error
    double wait_seconds = 0;  ///< expected start minus now, seconds (>= 0)
    std::string error;        ///< why there is no answer; empty when answered
};

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
/// answered = false. Never throws for Slurm's errors.
std::vector<StartEstimate> query_starts(const std::vector<StartProbe>& probes, double timeout_seconds);

// The child's line protocol, pure (unit-tested).

/// "P\tname\ttotal\tup\tmax_nodes\tmax_time\tusable\tdefault\twhy\n"; tabs and newlines in text fields
/// become spaces.
std::string encode_partition(const SlurmPartition& p);
/// "S\tindex\twait_seconds\n", or "E\tindex\tmessage\n" when not answered.
std::string encode_start(size_t index, const StartEstimate& s);
/// "X\tmessage\n": the whole query failed.
std::string encode_failure(const std::string& message);
/// "D\n": the child's last line, written after everything else (a reply without it was cut
/// short: the child died, for example when a Slurm plugin could not be loaded into it).
std::string encode_done();
/// Whether `text` ends with the child's last line (encode_done).
bool reply_complete(const std::string& text);

/// Parses the child's whole output into `site` (P and X lines) and `starts` (S and E lines;
/// indices beyond starts.size() are ignored). Malformed lines are skipped. Returns false if an
/// X line was seen, with its message in site.error.
bool decode_reply(const std::string& text, SlurmSite* site, std::vector<StartEstimate>* starts);

/// Whether a user in groups `user_groups` may submit to a partition whose AllowGroups is
/// `allow_groups` (comma-separated group names; empty or "ALL": everyone).
bool groups_allowed(const std::string& allow_groups, const std::vector<std::string>& user_groups);

}  // namespace tula::cli
