// libtula: the plain records the profile database stores and the models read: a compute
// point, an allreduce point and a finished run. No storage, no fitting: db.hpp stores them,
// models.hpp and validate.hpp read them.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tula {

/// One profiled compute point: mean time of one training iteration (forward, backward,
/// optimizer step; no allreduce) at local batch `local_batch` on one node. With ranks > 1,
/// `ranks` ranks of a multi-node job (one per node) timed the same steps at the same time,
/// every step started together, and the mean over steps of each step's slowest rank is kept: what a synchronous step of that many nodes waits
/// for when the nodes share hardware (ranks co-located on one host, a shared memory bus or
/// file system) or differ in speed.
struct ComputeSample {
    std::string workload;
    std::string host;          ///< hostname it was measured on (rank 0's)
    int local_batch = 0;       ///< examples per rank per iteration
    int threads = 1;           ///< compute threads per rank
    double seconds_per_iter = 0;  ///< seconds
    int iters = 0;             ///< iterations averaged
    int ranks = 1;             ///< ranks that ran at once (all nodes together); 1 = alone
    /// Of those, the ranks that shared each node (ranks / ranks_per_node nodes); 1 = one rank
    /// per node (every profile before schema version 8).
    int ranks_per_node = 1;
    /// Seconds the untimed warm-up steps of a fresh process took beyond as many steady steps
    /// (first touch of the activation buffers, caches): paid once per training run. NaN = not
    /// measured (a batch size timed after another in the same process is not fresh).
    double startup_seconds = std::numeric_limits<double>::quiet_NaN();
    /// With ranks > 1: seconds of one data-parallel training step as a job takes it, on the
    /// same ranks at once: shuffled examples, the gradients allreduced over the ranks in the
    /// training's buckets (MPI_Iallreduce), the update, and the per-step agreement a job under
    /// Slurm makes; the mean over steps of each step's slowest rank. What the compute part
    /// (seconds_per_iter) and the allreduce profile (MPI_Allreduce alone) leave out of a
    /// multi-node step is its ratio to their sum (ComputeModel::synced_factor). NaN = not
    /// measured (one rank alone, or a profile older than schema version 5).
    double synced_seconds_per_iter = std::numeric_limits<double>::quiet_NaN();
    /// The hardware class (tula.conf `hardware_class`) of the nodes it was measured on; "" =
    /// unknown (profiles older than schema version 8): counted as any class's.
    std::string hardware_class;
    /// The Slurm job that measured it (a job's own measurement, TULA_PROFILE, or tula
    /// profile's job); "" = not known (measured outside Slurm, or before schema version 11).
    std::string job_id;
};

/// One allreduce measurement: mean seconds of MPI_Allreduce(SUM, float32) of `bytes`
/// bytes across `nodes` nodes of `ranks_per_node` ranks each. The across-node profile has
/// one rank per node (nodes >= 2); the within-node profile has nodes = 1 and
/// ranks_per_node >= 2 (ranks on one host, which MPI connects through shared memory).
struct AllreduceSample {
    std::string host;          ///< host of rank 0
    int nodes = 0;
    /// Ranks on each node; 1 = one rank per node (every profile before schema version 9).
    int ranks_per_node = 1;
    int64_t bytes = 0;
    double seconds = 0;
    std::string hardware_class;  ///< class of the nodes; "" = unknown (as ComputeSample's)
};

/// A finished training run, written by tula-train at its end (the feedback loop).
struct RunRecord {
    int64_t id = 0;
    std::string job_id;        ///< SLURM_JOB_ID, or "" outside Slurm
    std::string workload;
    int nodes = 0;             ///< nodes (before schema version 8: ranks, one per node)
    int ranks_per_node = 1;    ///< ranks on each node; the run had nodes * ranks_per_node ranks
    int global_batch = 0;
    int epochs = 0;
    double predicted_seconds = 0;  ///< Tula's prediction of measured_seconds, 0 when none
    double measured_seconds = 0;   ///< training time (sum of epoch times, no evaluation), seconds
    double test_accuracy = 0;      ///< final test accuracy, fraction in [0, 1]
    double created = 0;            ///< Unix time, seconds
    /// Gradient noise scale B_simple = tr(Sigma)/|G|^2 that tula-train measured in this run
    /// (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.9 and
    /// App. A.1), examples; 0 = not measured (stored as NULL). tula-train stores the median of
    /// its EMA-smoothed estimates after each observation of the last epoch (tula-train(1),
    /// PROFILE DATABASE). add_run stores a non-finite or non-positive value as NULL.
    double noise_scale = 0;
    int64_t noise_observations = 0;  ///< noise-scale observations of the whole run (0: none)
    /// Training examples per epoch of this run (tula-train --limit-train trains on a prefix);
    /// 0 = the workload's train_examples (runs recorded before schema version 3).
    int64_t train_examples = 0;
    /// The optimizer tula-train trained with, lower case: "sgd", "ags", "lars", "lamb" or
    /// "local-sgd" (`--optimizer auto` recorded as the one it resolved to); "" = not recorded
    /// (runs recorded before schema version 7). The convergence fit keeps optimizers apart.
    std::string optimizer;
    /// The hardware class of the nodes it ran on; "" = unknown (runs before schema version 8,
    /// or a partition tula.conf does not describe).
    std::string hardware_class;
    /// The parts the run trained in: 1, plus one for each stop and resume (a job that wrote
    /// a checkpoint before its time limit and was requeued); >= 1. Runs recorded before schema
    /// version 10 have 1.
    int parts = 1;
    /// Training seconds of each part, in order: empty (not known, or one part) or (parts,),
    /// finite and >= 0, summing to measured_seconds within rounding.
    std::vector<double> part_seconds;
    /// Ranks of the run (nodes x ranks per node, at least 1 per node).
    int ranks() const { return nodes * (ranks_per_node > 0 ? ranks_per_node : 1); }
    /// Examples per rank per step: global_batch / ranks(); 0 when the run has no ranks.
    double local_batch() const { return ranks() > 0 ? static_cast<double>(global_batch) / ranks() : 0.0; }
    /// The examples per epoch the models use for this run: train_examples, else `workload_d`.
    double examples_per_epoch(double workload_d) const { return train_examples > 0 ? double(train_examples) : workload_d; }
    std::vector<double> epoch_seconds;        ///< (epochs,) seconds per epoch
    std::vector<double> epoch_train_loss;     ///< (epochs,)
    std::vector<double> epoch_test_accuracy;  ///< (epochs,) fraction
};

/// A finished run checked against the prediction interval of the models refitted without it
/// (online refit: every other finished run is in the overlap fit, so the next prediction uses
/// this one too).
struct RunCheck {
    std::string job_id;
    int nodes = 0;
    int global_batch = 0;
    int epochs = 0;
    double created = 0;             ///< Unix seconds, of the run
    double measured_seconds = 0;    ///< training seconds the run recorded
    double predicted_seconds = 0;   ///< Predictor::run of the models without this run, seconds
    double lower_seconds = 0;       ///< lower end of the prediction interval, seconds
    double upper_seconds = 0;       ///< upper end, seconds
    bool has_interval = false;      ///< false when the compute fit has no residual degrees of freedom
    bool flagged = false;           ///< has_interval and measured outside [lower, upper]
    int ranks_per_node = 1;         ///< ranks on each node of the run
    /// The predicted step's parts, seconds per step (as Candidate's): compute, the allreduce
    /// not hidden behind it, and the start-up and the evaluations after each epoch
    /// (Predictor::evaluation_seconds) spread over the run's steps.
    double compute_step_seconds = 0, exposed_comm_step_seconds = 0, overhead_step_seconds = 0;
};

}  // namespace tula
