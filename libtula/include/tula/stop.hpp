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

}  // namespace tula
