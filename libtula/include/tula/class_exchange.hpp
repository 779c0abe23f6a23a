// libtula: what the finished runs of the other workloads on a hardware class measured of the
// exchange across nodes (ClassExchange), and what it says about one workload's step
// (borrowed_exchange_observations), and a workload's own exchange as the allreduce samples of a
// class without a profile (allreduce_from_runs). Pure: no SQLite. Derivation: docs/models.md,
// "Runs of other workloads on the class" and "A workload planned from its runs".
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tula/records.hpp"
#include "tula/step_fit.hpp"
#include "tula/workload.hpp"

namespace tula {

/// The exchange across nodes that one workload's runs on one hardware class measured at K x R:
/// its step s(K, R, b) on K >= 2 nodes less its step s(1, R, b) on one node at the same local
/// batch b, the median over the paired b.
struct ClassExchange {
    std::string hardware_class;   ///< the runs' class ("" unknown)
    std::string workload;         ///< MODEL@DATASET of the runs
    int nodes = 2;                ///< K >= 2
    int ranks_per_node = 1;       ///< R >= 1
    double bytes = 0;             ///< the workload's gradient, 4 x params, bytes
    double exchange_seconds = 0;  ///< median of s(K, R, b) - s(1, R, b), seconds (may be < 0: noise)
    int batches = 0;              ///< local batches b with runs on both K x R and 1 x R
};

/// The ClassExchange of every (class, workload, K, R) of `runs` (any workloads, any order) with
/// usable runs (usable_run) on K >= 2 nodes and on 1 node at the same R and local batch
/// (StepFit::batch_key). A run's step is measured_seconds / (steps_per_epoch x epochs), its
/// start-up included (it cancels in the difference when the paired runs are as long); several
/// runs at one placement give their median. Runs of a workload that `workloads` lacks, or whose
/// params or examples per epoch are 0, are skipped. Sorted by (class, workload, K, R). Errors: none.
std::vector<ClassExchange> class_exchange(const std::vector<RunRecord>& runs, const std::vector<Workload>& workloads);

/// The exchange of `exchange` as StepFit's borrowed observations of workload `self`: one for
/// each ClassExchange of another workload on class `cls` (any class when `cls` is nullptr), at
/// its (K, R). `across(K, bytes)` is the class's modelled allreduce across K nodes (seconds;
/// AllreduceModel::seconds); the other workload's measured exchange over its modelled one,
/// rho = exchange_seconds / across(K, bytes), clamped at 0, carries to `self` as
/// E = rho x across(K, 4 `self`.params). With m1, mK the modelled steps of `self` at (1, R, b)
/// and (K, R, b), b = `local_batch(R)` (examples), the observation is measured m1 + E against
/// model mK, compute 0 (StepObservation::borrowed). `model_step(K, R, b)` is the modelled step,
/// seconds; a step, or an across time, that is not > 0 and finite skips the observation. None
/// when `self`.params is 0. Errors: none.
std::vector<StepObservation> borrowed_exchange_observations(
    const std::vector<ClassExchange>& exchange, const Workload& self, const std::string* cls,
    const std::function<double(int)>& local_batch, const std::function<double(int, int, double)>& model_step,
    const std::function<double(int, double)>& across);

/// Across-node allreduce samples made of a workload's own exchange, for the hardware classes
/// that `profile` cannot serve: a class c with ClassExchange rows in `own` and no row of
/// `profile` on 2 or more nodes with one rank per node whose class is c or "" (unknown, which
/// serves every class; and any such row serves c = ""). For each such class, the rows of `own`
/// with an exchange_seconds > 0 and finite (the others are noise) at the fewest ranks per node R
/// that has one give one sample each: nodes K, ranks_per_node 1, bytes (the workload's
/// gradient), seconds = exchange_seconds, host "runs". The step on K nodes less the step on one node at the same R and local
/// batch is the exchange the backward pass did not hide, so the samples stand for the
/// across-node term as the allreduce profile would (docs/models.md, "A workload planned from
/// its runs"). Errors: none.
std::vector<AllreduceSample> allreduce_from_runs(const std::vector<ClassExchange>& own,
                                                 const std::vector<AllreduceSample>& profile);

}  // namespace tula
