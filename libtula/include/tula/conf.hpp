// libtula: tula.conf, the site configuration (see tula.conf(5)).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tula {

/// Price of one node-hour with its GPUs, currency units per node-hour: price_per_node_hour +
/// gpus_per_node x price_per_gpu_hour (tula.conf(5), the prices). Pure.
inline double node_hour_price(double price_per_node_hour, int gpus_per_node, double price_per_gpu_hour) {
    return price_per_node_hour + gpus_per_node * price_per_gpu_hour;
}

/// One partition of the site: a `[partition NAME]` section of tula.conf (tula.conf(5),
/// PARTITIONS), or the implicit one a file without sections describes with its top-level keys.
struct PartitionConf {
    /// Slurm partition name (letters, digits, '_', '.', '-'); "" for the implicit partition
    /// of a file without sections (no partition is requested from Slurm then).
    std::string name;
    int nodes = 1;                  ///< [nodes] nodes of the partition the planner may use
    int cpus_per_node = 1;          ///< [cpus_per_node] CPUs (cores) of one node
    int gpus_per_node = 0;          ///< [gpus_per_node] GPUs of one node; 0 for a CPU partition
    /// [ranks_per_node] training processes (Slurm tasks) per node; default gpus_per_node when
    /// it is > 0, else 1. The implicit partition runs 1 rank per node, as before sections.
    int ranks_per_node = 1;
    double price_per_node_hour = 1.0;  ///< [price_per_node_hour] currency units per node-hour
    double price_per_gpu_hour = 0;     ///< [price_per_gpu_hour] currency units per GPU-hour, on top
    double watts_per_node = 0;         ///< [watts_per_node] watts of one busy node; 0: unknown
    /// [hardware_class] names the profiles that describe the nodes (profiles are kept per
    /// class); default: the partition's name; "" for the implicit partition (the profiles of
    /// every class, as before sections).
    std::string hardware_class;
    /// Published figures of the class, for predicting a class that has no profile of its own
    /// from one that has (0: not given): [peak_flops] FLOP/s of one rank's device at the
    /// training precision, [memory_bandwidth] bytes/s of that device's memory, [link_bandwidth]
    /// bytes/s one node injects into the network, [intra_node_bandwidth] bytes/s between the
    /// ranks of one node (0: the within-node part of the allreduce is not modelled).
    double peak_flops = 0, memory_bandwidth = 0, link_bandwidth = 0, intra_node_bandwidth = 0;
    /// [exclusive] a job of the partition gets whole nodes (sbatch --exclusive): the profiles
    /// describe a node that no other job shares (its CPU quota, memory bandwidth and link).
    /// Default: the top-level `exclusive`.
    bool exclusive = false;
    /// What Slurm says of the partition at planning time (not tula.conf keys: the `tula`
    /// command fills them in from slurmctld, see tula(1), QUEUE AND LIMITS). MaxTime in
    /// minutes (0: none or not known): candidates predicted to train longer are left out and
    /// the time limit is clamped to it.
    int max_time_minutes = 0;
    /// Why Slurm will not run a job there now ("State=DOWN", "AllowGroups=..."); empty when
    /// it will or when Slurm was not asked. A partition with a reason is left out with it.
    std::string unavailable;
    /// tula::node_hour_price of this partition's prices (currency units per node-hour).
    double node_hour_price() const { return tula::node_hour_price(price_per_node_hour, gpus_per_node, price_per_gpu_hour); }
};

/// Site configuration read from tula.conf. Units are in the field names' comments.
struct Config {
    /// System profile database (read-only to users). Path.
    std::string system_db = "/var/lib/tula/profiles.db";
    /// User id of the administrator who writes the system database besides root (0 = root
    /// alone). Readers trust the system database only when it, its directory and its -wal,
    /// -shm and -journal files are owned by root or this uid and are not group- or
    /// world-writable (system_db_distrust, db.hpp).
    uint32_t admin_uid = 0;
    /// Price of one node for one hour, in the site's currency unit per node-hour.
    double price_per_node_hour = 1.0;
    /// GPUs (accelerators) per node of the partition; 0 for a CPU partition. With
    /// price_per_gpu_hour it prices GPU-hours: cost = node-hours * (price_per_node_hour +
    /// gpus_per_node * price_per_gpu_hour).
    int gpus_per_node = 0;
    /// Price of one GPU for one hour, currency units per GPU-hour, charged on top of
    /// price_per_node_hour (0: GPUs are included in the node price).
    double price_per_gpu_hour = 0;
    /// Average electrical power of one busy node, watts (0: unknown; no energy figure).
    /// Energy of a job: node-hours * watts_per_node / 1000, kWh.
    double watts_per_node = 0;
    /// Largest node count the planner may choose (partition limit).
    int max_nodes = 4;
    /// Global batch sizes the planner considers (examples per optimizer step, summed over ranks).
    std::vector<int> global_batches = {32, 64, 128, 256, 512};
    /// Fractional safety margin added to the predicted time for the Slurm time limit (0.25 = +25 %).
    double time_margin = 0.25;
    /// Fixed seconds added to the time limit for start-up, data loading and evaluation.
    double time_overhead = 120.0;
    /// Epochs assumed when the batch script does not say (--epochs).
    int default_epochs = 12;
    /// Memory of one device (one rank), bytes; 0 = not limited. Bounds the local batch
    /// through the memory model M(b) = M_static + M_act * b.
    double device_memory_bytes = 0;
    /// Gradient noise scale B_noise (examples) of the convergence model when the profile
    /// database has none; McCandlish et al. 2018.
    double noise_scale = 1024;
    /// Largest loss of expected test accuracy (fraction: 0.01 = 1 point) the planner accepts
    /// for speed: candidates whose accuracy predicted from the run history (AccuracyModel)
    /// is more than this below the best candidate's are not planned. 1 = never exclude.
    double max_accuracy_loss = 0.01;
    /// Keep every job's epochs as its batch script gives them (yes), instead of training the
    /// epochs its planned global batch needs to reach the accuracy those epochs reach at the
    /// script's own batch (no, the default; see tula.conf(5), fixed_epochs).
    bool fixed_epochs = false;
    /// Give every Tula job a --time-min (the shortest useful part: start-up, one epoch and
    /// the stop allowance; time_min_minutes, tula/stop.hpp), so that Slurm's backfill may
    /// start it early with a shorter limit, in which it checkpoints and requeues itself
    /// (yes), or not (no, the default). A job's --tula-time-min=yes|no overrides it.
    bool time_min = false;
    /// Ask slurmctld, when the `tula` command plans inside a Slurm cluster, for each
    /// partition's limits (MaxNodes, MaxTime, nodes up, who may submit) and for the expected
    /// start of the leading candidates, and rank them by time to result (expected wait plus
    /// run time) (yes, the default), or plan as if the queue were empty (no).
    bool queue_estimate = true;
    /// Seconds the `tula` command waits for slurmctld's answers (both queries together);
    /// past it, it plans as if the queue were empty and says so.
    double queue_timeout = 1.0;
    /// Every Tula job gets whole nodes (sbatch --exclusive) unless its partition's section says
    /// otherwise or the user gave --exclusive or --oversubscribe (yes), or only the CPUs and
    /// GPUs of its ranks (no, the default). A section's `exclusive` defaults to this.
    bool exclusive = false;
    /// max_nodes was written in the file (then it caps every partition's nodes too).
    bool max_nodes_set = false;
    /// The `[partition NAME]` sections, in file order; empty for a file without sections.
    std::vector<PartitionConf> partitions;
    /// The whole site's partitions (site_partitions()) when `partitions` was narrowed to some of
    /// them (a job's --partition), so that those left are predicted as in the whole site: the
    /// class that profiles without a class belong to and the class a partition without
    /// profiles is scaled from come from these. Empty: not narrowed.
    std::vector<PartitionConf> site_before_narrowing;
    /// The partitions the planner uses: `partitions`, or, when it is empty, one implicit
    /// partition (name "", class "", 1 rank per node) with nodes = max_nodes and the
    /// top-level gpus_per_node, prices and watts (today's single-partition file). Each
    /// section's nodes are capped at max_nodes when max_nodes was written. Pure.
    std::vector<PartitionConf> site_partitions() const;
};

/// Parses the text of a tula.conf: `key = value` lines, `#` comments, blank lines.
/// Keys: system_db, admin_uid (a user id, 0 .. 4294967294), price_per_node_hour, gpus_per_node, price_per_gpu_hour (currency units per
/// GPU-hour), watts_per_node (watts), max_nodes, global_batches (comma list),
/// time_margin, time_overhead, default_epochs, device_memory_bytes (bytes, suffixes K M G T
/// for powers of 1024 allowed), noise_scale (examples), max_accuracy_loss (fraction),
/// fixed_epochs (yes or no), time_min (yes or no), queue_estimate (yes or no), queue_timeout (seconds, 0.05 .. 4),
/// exclusive (yes or no).
/// Then optional `[partition NAME]` sections (PartitionConf) with
/// the keys nodes (required), cpus_per_node, gpus_per_node, ranks_per_node,
/// price_per_node_hour, price_per_gpu_hour, watts_per_node, hardware_class, peak_flops,
/// memory_bandwidth, link_bandwidth, intra_node_bandwidth, exclusive; a section's price_per_node_hour,
/// gpus_per_node, price_per_gpu_hour, watts_per_node and exclusive default to the top-level ones.
/// Pure function (no I/O). Errors: throws tula::Error naming the line number for an
/// unknown key, a missing '=', or a value that is not a valid number / out of range, a
/// section header that is not `[partition NAME]`, a repeated partition name, a site-wide
/// key inside a section, or a section without nodes; `source` ("tula.conf" or the file's path)
/// names the text in those messages.
Config parse_config(const std::string& text, const std::string& source = "tula.conf");

/// Reads at most `max_bytes` of the regular file `path` (opened O_CLOEXEC, read to its end or
/// the limit). Errors: tula::Error naming the path and strerror, or saying it is not a regular
/// file.
std::string read_text_file(const std::string& path, size_t max_bytes);

/// Reads and parses the file at `path`. Errors: tula::Error if it cannot be read
/// (message names the path and strerror) or parse_config fails.
Config load_config(const std::string& path);

/// Whether `s` is a partition or hardware class name: 1 to 63 letters, digits, '_', '.', '-'.
/// Pure.
bool valid_class_name(const std::string& s);

/// The hardware class of the section named `partition` in `cfg` (PartitionConf::hardware_class),
/// or "" (the unknown class) when no section has that name. Pure.
std::string partition_class(const Config& cfg, const std::string& partition);

/// The site's tula.conf as a job's process sees it: the file at $TULA_CONF when it is set and
/// not empty, else TULA_DEFAULT_CONF; nullopt when it cannot be read or parsed. Reads the
/// environment and at most that file. Errors: none.
std::optional<Config> site_config_from_env();

/// The hardware class a process records its profiles and its run under: $TULA_HARDWARE_CLASS
/// when it is set (a class name, or empty for the unknown class; another value is ignored with
/// a one-line reason in `*warning`, when given, and gives ""); else the class of
/// $SLURM_JOB_PARTITION in the tula.conf at $TULA_CONF, else TULA_DEFAULT_CONF
/// (partition_class); else "" (outside Slurm, no section of that name, or a tula.conf that
/// cannot be read or parsed). Reads the environment and at most that file. Errors: none.
std::string hardware_class_from_env(std::string* warning);

/// Path of the per-user profile database: $XDG_DATA_HOME/tula/profiles.db, else
/// $HOME/.local/share/tula/profiles.db. Either argument may be null or empty.
/// Errors: tula::Error if both are unset. Pure function.
std::string user_db_path(const char* xdg_data_home, const char* home);

}  // namespace tula
