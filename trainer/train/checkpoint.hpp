// tula-train: checkpoints (the whole training state at a step boundary) written atomically,
// read back with every defect reported, and the stop signals that ask for one.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tula {
namespace train {

/// A checkpoint that cannot be written or used: unreadable, not a checkpoint, truncated,
/// corrupt, of a newer format, or of another run. The message names the file and what to do.
struct CheckpointError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// A run's configuration: the options that determine its loss trajectory, as one JSON object
/// of named values (strings and numbers; null: a bare key), in a fixed order. tula-train's
/// run_config builds it from the options; checkpoints store and compare it.
using RunConfig = nlohmann::ordered_json;

/// The canonical text of a configuration, "key=value key=value ..." in its order: a string
/// value as it is, a number in its shortest round-trip form (nlohmann::json's dump), a null
/// value as the bare key. Two configurations are the same run's when their texts are equal
/// (a number and its text compare equal). Errors: none.
std::string config_text(const RunConfig& config);

/// FNV-1a (fnv1a64) of config_text(config): the "config_hash" of checkpoints and of the
/// metrics file's header. Errors: none.
uint64_t config_hash(const RunConfig& config);

/// What differs between the configuration of this run (`now`) and a checkpoint's (`then`),
/// for a message: "" when their texts are equal; else "KEY is A here but B in the checkpoint"
/// for the first key of `now` whose value differs ("(absent)" when `then` lacks it), or "the
/// configuration differs" when only `then` has more keys. Errors: none.
std::string config_difference(const RunConfig& now, const RunConfig& then);

/// The training state at a step boundary, enough to continue bit-identically (same rank
/// count, same configuration). Written by rank 0; every rank reads it on resume.
struct Checkpoint {
    RunConfig config = RunConfig::object();  ///< the run's configuration (RunConfig)
    int32_t ranks = 1;          ///< MPI ranks of the run that wrote it
    int32_t epoch = 1;          ///< 1-based epoch in progress
    int64_t step_in_epoch = 0;  ///< steps of that epoch already done (0..steps per epoch)
    int64_t global_step = 0;    ///< steps done in the whole run
    double epoch_seconds = 0;   ///< training seconds of the epoch so far (rank 0)
    double lr = 0;              ///< rate of the last step
    double noise_scale = 0;     ///< the schedule's B_noise (examples), LrScaling::Noise
    /// Per rank r: [2r] sum of loss * examples, [2r+1] examples classified right, of the
    /// epoch so far, (2 * ranks,).
    std::vector<double> rank_sums;
    nlohmann::json noise_estimator;        ///< NoiseScale::to_json(): its named fields
    nlohmann::json warmup;                 ///< NormWarmup::to_json()
    nlohmann::json epochs_done = nlohmann::json::array();  ///< the finished epochs, an object each
    std::vector<float> params;             ///< Model::params(), (num_params,)
    std::vector<float> state;              ///< Model::state() (BN running statistics) of rank 0
    std::vector<float> opt_m1, opt_m2;     ///< Optimizer::get_state moments
    int64_t opt_t = 0;                     ///< Optimizer step count
    std::vector<std::string> layer_rng;    ///< Model::rng_states() (dropout generators) of rank 0
    /// Training seconds of each part of the run that ended before this checkpoint was written
    /// (a part is one process's stretch of training: from the start or a resume to a stop),
    /// in order; empty while the run has not been stopped. The part in progress is not in it:
    /// the run has parts.size() + 1 parts so far.
    std::vector<double> parts;
};

/// 64-bit FNV-1a hash of `s` (Fowler, Noll, Vo: offset basis 14695981039346656037, prime
/// 1099511628211; config_hash). Errors: none.
uint64_t fnv1a64(const std::string& s);

/// Writes `c` to `path` atomically: into a temporary file in the same directory, fsync,
/// rename over `path`, fsync of the directory; a crash at any point leaves either the old
/// file or the new one, never a partial one. Format 2 (host byte order): "TULACKPT", u32
/// version (2), u32 0x01020304 (byte-order mark), u64 header bytes, u64 tensor bytes, u32
/// CRC-32 (zlib) of header and tensors; then the header, a JSON object of named fields
/// ("format", "version", "config" (Checkpoint::config, the object), "config_hash"
/// (config_hash(c.config), 16 hex digits), "ranks", "epoch", "step_in_epoch", "global_step",
/// "epoch_seconds", "lr", "noise_scale", "rank_sums", "noise_estimator", "warmup",
/// "epochs_done", "opt_t", "layer_rng", "parts" (Checkpoint::parts, seconds), and "tensors":
/// the name and element count of each float32 array that follows); then the tensors (params, state, opt_m1, opt_m2) in that
/// order. Temporary files of `path` left by an earlier writer that was killed are removed
/// first (remove_checkpoint_temporaries), so that one checkpoint at most is kept per path.
/// Errors: CheckpointError (cannot create / write / rename; the temporary file is removed).
void write_checkpoint(const std::string& path, const Checkpoint& c);

/// Removes the temporary files write_checkpoint makes for `path` ("PATH.tmp." and six letters
/// or digits, in the directory of `path`) that a writer killed before its rename left behind;
/// no other file is touched. Returns how many were removed. Errors: none (a directory that
/// cannot be read, or a file that cannot be removed, is passed over).
int remove_checkpoint_temporaries(const std::string& path);

/// Reads a checkpoint written by write_checkpoint. Errors: CheckpointError when the file
/// cannot be opened, is not a tula-train checkpoint, has another byte order or another
/// format version (format 1, of older tula-train releases, is refused: it cannot be resumed
/// by this one), is truncated, fails its checksum, lacks a field, or has a "parts" entry that
/// is not a finite number >= 0. A "config_hash" of earlier releases (FNV-1a's steps from a
/// mistyped offset basis) is accepted beside config_hash's. A header without "parts" (written before the field existed)
/// reads as a run not stopped before: parts empty.
Checkpoint read_checkpoint(const std::string& path);

/// Makes SIGTERM (Slurm's warning before the time limit, sbatch --signal, and scancel)
/// and SIGUSR1 set the stop flag instead of ending the process (sigaction, SA_RESTART).
void install_stop_signals();
/// Whether a stop signal has arrived since install_stop_signals(), or set_stop_requested(true).
bool stop_requested();
/// Whether SIGTERM was among the stop signals (scancel, the time limit itself): the run stops
/// for good, where SIGUSR1 (Slurm's --signal) and a near time limit stop it to be requeued.
bool stop_terminates();
/// Sets the stop flag as SIGUSR1 does (on), or clears it and the SIGTERM mark (off): the
/// near time limit and tests.
void set_stop_requested(bool on);

}  // namespace train
}  // namespace tula
