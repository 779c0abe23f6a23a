// libtula: the reader of the metrics file of the job contract (tula-jobs(7)): JSON lines
// that a training job writes, a "run" header first, then "step", "epoch", "summary",
// "profile" and "allreduce" lines.
// It streams: one line is read and checked at a time, and only the per-epoch values and the
// profile lines are kept, so a file of any length is read in bounded memory.
#pragma once
#include <cstdint>
#include <istream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tula/records.hpp"
#include "tula/workload.hpp"

namespace tula {

/// Longest line of a metrics file, bytes (the '\n' not counted): a longer one is an error.
constexpr size_t kMaxMetricsLineBytes = 64 * 1024;

/// The fields of a metrics file's "run" header (the first line). Absent optional fields
/// keep the defaults below.
struct MetricsHeader {
    std::string workload;       ///< MODEL@DATASET, a valid workload name
    int nodes = 0;              ///< nodes of the job, >= 1
    int ranks = 0;              ///< ranks of the job, a multiple of nodes (ranks per node = ranks / nodes)
    int global_batch = 0;       ///< examples per step over all ranks; 0 = absent (a profile-only file)
    int epochs = 0;             ///< planned epochs; 0 = absent
    int64_t train_examples = 0; ///< training examples per epoch; 0 = absent
    int64_t test_examples = 0;  ///< test examples; 0 = absent
    int64_t params = 0;         ///< trainable parameters (count); 0 = absent
    /// The data set's training and test examples (the workload row's sizes) when the run
    /// trains or tests on part of it; 0 = absent (then train_examples and test_examples).
    int64_t dataset_train_examples = 0;
    int64_t dataset_test_examples = 0;
    std::string optimizer;      ///< e.g. "sgd"; "" = absent
    double predicted_seconds = -1;  ///< Tula's prediction, seconds; -1 = absent
    std::string job_id;         ///< "" = absent
    std::string host;           ///< the host that measured a profile; "" = absent
    /// Activation floats per example of one forward pass (Workload::activation_floats); 0 = absent.
    int64_t activation_floats = 0;
    std::string hardware_class; ///< "" = absent
    bool has_hardware_class = false;  ///< the header has "hardware_class" (it may be "")
    bool resumed = false;       ///< "resumed": true
    int64_t resumed_at_step = 0;  ///< steps done before a resume
    /// The workload row the header describes: params, and the data set's sizes
    /// (dataset_train_examples, else train_examples; the same for the test set); nullopt when
    /// params or the training examples are absent. Pure.
    std::optional<Workload> workload_row() const;
    /// Ranks on each node: ranks / nodes (1 when nodes is 0).
    int ranks_per_node() const { return nodes > 0 ? ranks / nodes : 1; }
};

/// One "profile" line: the median seconds of one training step at a local batch.
struct ProfileLine {
    int local_batch = 0;  ///< examples per rank per step, >= 1
    double seconds = 0;   ///< median seconds of one step (forward, backward, update), finite > 0
    int64_t steps = 0;    ///< timed steps, >= 1
    int threads = 1;      ///< threads of the timed process ("threads"; default 1)
    /// Seconds the warm-up steps took beyond as many steady steps ("startup_seconds"); NaN = absent.
    double startup_seconds = std::numeric_limits<double>::quiet_NaN();
    /// Seconds of the whole data-parallel step with its allreduce, when the ranks of the
    /// header timed it together ("synced_seconds"); NaN = absent.
    double synced_seconds = std::numeric_limits<double>::quiet_NaN();
};

/// One "allreduce" line: the mean seconds of one allreduce of `bytes` over the header's
/// nodes and ranks.
struct AllreduceLine {
    int64_t bytes = 0;   ///< message size, bytes >= 1
    double seconds = 0;  ///< mean seconds of one allreduce, finite > 0
    int64_t iters = 0;   ///< timed allreduces, >= 1
};

/// A run file read by read_metrics_run.
struct MetricsRun {
    MetricsHeader header;  ///< the first header (a resume's header repeats its identity)
    /// The run as the profile database stores it: workload, nodes, ranks_per_node,
    /// global_batch, epochs (= epoch lines), measured_seconds (sum of epoch seconds),
    /// test_accuracy (the last epoch's), epoch_seconds / epoch_train_loss (NaN where null or
    /// absent) / epoch_test_accuracy, noise_scale (the "summary" line's, else the last epoch's
    /// non-null one, else 0), noise_observations (the "summary" line's, else the sum of the
    /// epochs' values), parts (the last "summary" line's after the last resume header, else 1 +
    /// the resume headers: 1 + 1 when the first header is itself a resume), part_seconds (that
    /// summary's when parts > 1, else empty), optimizer, train_examples,
    /// predicted_seconds (0 when absent), job_id and hardware_class from the header. `created`
    /// is left 0 (the database sets the time of the write).
    RunRecord run;
    int64_t steps = 0;    ///< step lines read
    int resumes = 0;      ///< resume headers read
};

/// A profile file read by read_metrics_profile.
struct MetricsProfile {
    MetricsHeader header;
    std::vector<ProfileLine> lines;  ///< in file order
    std::vector<AllreduceLine> allreduce;  ///< in file order
};

/// Reads a run file from `in`: the header, then any lines; at least one "epoch" line is
/// required, and the header's global_batch must be >= 1. `source` names the file in messages.
/// Every line is checked as tula-jobs(7) says (a line over kMaxMetricsLineBytes, bad JSON, not
/// an object, a missing or non-string "type", a missing or wrongly typed field, a negative,
/// NaN or null value where none is allowed, a step number not above the previous one, an
/// epoch number that is not the previous one + 1, a second header that is not a resume of the
/// same workload, nodes, ranks and global batch, a missing last '\n' is accepted). Unknown
/// types and fields are ignored. Errors: tula::Error "SOURCE:LINE: what was wrong (what to
/// do)" at the first bad line; "SOURCE: ..." for an empty file, a read error or no epoch line.
MetricsRun read_metrics_run(std::istream& in, const std::string& source);

/// Reads a profile file from `in` (as read_metrics_run checks it; "profile" lines are kept,
/// the header's global_batch may be 0 or absent). Errors: tula::Error as read_metrics_run's;
/// "SOURCE: no \"profile\" line" when there is none.
MetricsProfile read_metrics_profile(std::istream& in, const std::string& source);

/// read_metrics_run of the file at `path` (named so in messages). Errors: tula::Error as
/// read_metrics_run's, and when the file cannot be opened.
MetricsRun read_metrics_run_file(const std::string& path);

/// read_metrics_profile of the file at `path`. Errors: as read_metrics_run_file's.
MetricsProfile read_metrics_profile_file(const std::string& path);

/// What a file of the job contract holds, by its lines: a run (an "epoch" line), else a
/// compute profile ("profile" lines), else an allreduce profile ("allreduce" lines).
enum class MetricsKind { Run, Profile, Allreduce };

/// The kind of the file at `path`, every line checked as read_metrics_run checks it (the
/// header's workload may be absent). Errors: as read_metrics_run_file's; "PATH: no ..." when
/// it has none of those lines.
MetricsKind metrics_file_kind(const std::string& path);

/// Reads an allreduce profile file at `path` (checked as read_metrics_run checks a file; its
/// "allreduce" lines are kept in MetricsProfile::allreduce). Errors: as read_metrics_run_file's;
/// "PATH: no \"allreduce\" line" when there is none.
MetricsProfile read_metrics_allreduce_file(const std::string& path);

}  // namespace tula
