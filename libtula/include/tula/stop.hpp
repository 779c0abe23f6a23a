// libtula: when a job stops before its time limit to checkpoint and requeue; the one rule the
// planner (the --signal time and the time limit it leaves), tula-train and the Python module
// (tula.Requeue, which mirrors it) follow. Derivation: docs/models.md "Stop before the time limit".
#pragma once
#include <cstdint>

namespace tula {

/// Seconds kept free beyond the step in flight and the checkpoint write (process exit,
/// `scontrol requeue`, a slow file system's fsync), seconds.
constexpr double kStopMarginSeconds = 30;
/// The checkpoint write rate assumed before one was measured, bytes per second: a shared
/// file system under load (a local disk writes several times faster).
constexpr double kCheckpointWriteBandwidth = 100e6;
/// How much earlier than asked slurmctld may send --signal's signal: its time-limit check
/// runs about every 30 s, and sbatch(1) says "up to 60 seconds earlier", seconds. A time
/// limit leaves signal_seconds + this beyond the predicted training (candidate_time_limit), so
/// that a job whose training ends when predicted is not interrupted.
constexpr int kSlurmSignalResolution = 60;

/// The least share of its time limit a job's --time-min asks for. Slurm starts a job in a hole
/// with its --time-min as the limit and keeps that shorter limit for every later part after a
/// requeue (a user cannot raise it), so a job started in a hole runs in parts of its
/// --time-min; at half the limit that is about three parts, each paying the requeue wait and the
/// start-up. docs/models.md, "Stop before the time limit".
constexpr double kTimeMinShareOfLimit = 0.5;

/// A Slurm time limit, whole minutes: ceil((seconds x (1 + margin) + overhead) / 60), at least 1
/// (also for NaN) and at most INT_MAX / 2. seconds: the job's predicted (or measured) run;
/// margin: tula.conf's time_margin (fraction); overhead: seconds added after the margin
/// (time_overhead and the stop allowance). Pure.
int slurm_time_limit_minutes(double seconds, double margin, double overhead);

/// A part of a job that met its time limit and ran slower than this ratio of its plan's step
/// (measured / predicted seconds per step) is reported as slower than planned, and the next
/// part's limit is taken from the measured speed (next_part_time_limit).
constexpr double kSlowerThanPlanned = 1.25;

/// measured_step / predicted_step when it exceeds kSlowerThanPlanned, else 0 (also when either
/// is not a positive finite number of seconds). Pure.
double slower_than_planned(double measured_step_seconds, double predicted_step_seconds);

/// The time limit of the next part of a job, minutes, from the speed measured in the part that
/// met its limit: slurm_time_limit_minutes(steps_left x step_seconds + startup_seconds, margin,
/// overhead + signal_seconds + kSlurmSignalResolution), the rule candidate_time_limit applies
/// to a prediction (planner.hpp). Negative or non-finite inputs count as 0. Pure.
int next_part_time_limit(double steps_left, double step_seconds, double startup_seconds, double margin,
                         double overhead, int signal_seconds);

/// Bytes of a checkpoint of a model with `params` trainable parameters: the weights and the
/// optimizer's two moment vectors, float32 (12 x params); the running statistics and the
/// header are small beside them. params < 0 counts as 0. Pure.
double checkpoint_bytes(int64_t params);

/// Seconds to write `bytes` at kCheckpointWriteBandwidth. bytes < 0 counts as 0. Pure.
double checkpoint_write_seconds(double bytes);

/// The time a job keeps before its time limit to stop cleanly, seconds:
/// kStopMarginSeconds + 2 x step_seconds (the step in flight, and one more of slack) +
/// checkpoint_seconds. step_seconds: the longest step (seconds); checkpoint_seconds: the last
/// measured checkpoint write, else checkpoint_write_seconds(checkpoint_bytes(params)).
/// Negative or non-finite inputs count as 0. Pure.
double stop_reserve_seconds(double step_seconds, double checkpoint_seconds);

/// The S of Slurm's --signal=USR1@S (seconds before the time limit): stop_reserve_seconds
/// rounded up to whole seconds, within 1..65535 (Slurm keeps it in 16 bits). Pure.
int signal_seconds(double step_seconds, double checkpoint_seconds);

/// The --time-min of a job, minutes: the shortest part worth starting in a backfill hole, the
/// start-up, one epoch of training and the stop allowance (signal_seconds +
/// kSlurmSignalResolution), ceil((startup_seconds + epoch_seconds + signal_seconds + 60) / 60),
/// and at least ceil(kTimeMinShareOfLimit x time_limit_minutes); at least 1 and at most
/// time_limit_minutes (when that is > 0). Pure. docs/models.md, "Stop before the time limit".
int time_min_minutes(double startup_seconds, double epoch_seconds, int signal_seconds, int time_limit_minutes);

/// How long a requeued job waits before it may start again, seconds: slurmctld holds it until
/// the credentials of its last start expire, AuthInfo's cred_expire (120 s by default,
/// slurm.conf(5)).
constexpr double kRequeueDelaySeconds = 120;

/// A job started early in a backfill hole, in parts of its --time-min limit
/// (hole_time_to_result). All times are seconds; the waits count from now.
struct HoleStart {
    /// The hole version is earlier than waiting for the full time limit (time_to_result <
    /// full_wait + total); false: the candidate is planned as one part at its full limit.
    bool used = false;
    double wait_seconds = 0;        ///< until the hole starts (slurmctld's start at --time-min)
    double seconds = 0;             ///< the hole's length H
    double part_seconds = 0;        ///< L: the time limit of every part (the --time-min)
    int hole_parts = 0;             ///< parts run in the hole
    double train_seconds = 0;       ///< training done in the hole
    int rest_parts = 0;             ///< parts after the hole; 0 when the hole finishes the training
    double rest_wait_seconds = 0;   ///< until the rest starts; 0 when the hole finishes the training
    double rest_train_seconds = 0;  ///< the rest's run: its parts, start-ups and requeue waits; 0 likewise
    double time_to_result = 0;      ///< from now to the end of the training
    double full_seconds = 0;        ///< the time to result without the hole: full_wait + total
};

/// The time to result of a job that starts in a backfill hole and runs in parts of its
/// --time-min (docs/models.md, "Starting in a hole"). With u = startup_seconds, T =
/// total_seconds (the training and u), S = signal_seconds, R = kSlurmSignalResolution, d =
/// kRequeueDelaySeconds, L = part_seconds (H when <= 0), H = hole_seconds, w_h =
/// hole_wait_seconds and w_f = full_wait_seconds (the start of a job at the full time limit): a
/// part trains at most c = L - u - S - R; parts run from w_h one after the other (a part that
/// does not finish occupies L, then d) while a whole part fits before w_h + H; the rest waits for
/// w_f and runs k = ceil(left / c) parts back to back. `used` when c > 0 and the result is
/// earlier than w_f + T. Negative or non-finite inputs count as 0. Pure.
HoleStart hole_time_to_result(double hole_wait_seconds, double hole_seconds, double full_wait_seconds,
                              double total_seconds, double startup_seconds, int signal_seconds,
                              double part_seconds);

}  // namespace tula
