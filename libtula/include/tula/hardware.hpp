// libtula: simulation mode -- plan for a described cluster from published hardware figures,
// without profiling it (`tula plan --hardware FILE`, tula(1) "HARDWARE FILE").
#pragma once
#include <string>
#include <vector>

#include "tula/conf.hpp"
#include "tula/models.hpp"
#include "tula/planner.hpp"
#include "tula/workload.hpp"

namespace tula {

/// PyTorch DistributedDataParallel's default gradient bucket, bucket_cap_mb = 25 (Li et al.
/// 2020, PVLDB 13(12), sec. 3.2.3), bytes: a hardware file's workload.allreduce_bucket_bytes
/// when it gives none.
constexpr double kDefaultBucketBytes = 25.0 * 1024 * 1024;

/// A cluster and a workload described by published figures (the hardware file). Units in
/// the comments; every value is finite. Keys of the JSON file in brackets.
struct HardwareSpec {
    std::string name;                 ///< [name] cluster name, for messages (default "cluster")
    /// [partitions[i].name] the partition's name in a file with several partitions (keys
    /// "partitions": a list of objects with the node keys below and a name; the workload and
    /// global batches stay at the top level and are shared); "" in a one-partition file.
    std::string partition;
    int nodes = 0;                    ///< [nodes] nodes in the partition, 1..1,000,000
    int gpus_per_node = 1;            ///< [gpus_per_node] devices per node, 1..1024
    double peak_flops = 0;            ///< [device.peak_flops] FLOP/s of one device (datasheet, at the training precision)
    double efficiency = 0.4;          ///< [device.efficiency] fraction of peak reached, (0, 1]
    double device_memory_bytes = 0;   ///< [device.memory_bytes] bytes of one device
    int saturation_batch = 0;         ///< [device.saturation_batch] examples per device below which the
                                      ///< time per iteration stops falling (0: linear model)
    double network_bandwidth = 0;     ///< [network.bandwidth] bytes/s one node injects into the network
    double network_latency = 0;       ///< [network.latency] seconds per message step (alpha)
    double intra_node_bandwidth = 0;  ///< [network.intra_node_bandwidth] bytes/s between the devices of
                                      ///< a node; 0: intra-node reduction not modelled
    AllreduceModel::Algorithm algorithm = AllreduceModel::Algorithm::Rabenseifner;  ///< [network.allreduce]
    /// [network.bus_bandwidth.intra_node] nccl-tests all_reduce_perf on one node of
    /// gpus_per_node devices, [[bytes, busbw bytes/s], ...] ascending in bytes (1 to 64 points;
    /// BusBandwidthTable); empty: the ring at intra_node_bandwidth.
    BusBandwidthTable intra_bus_bandwidth;
    /// [network.bus_bandwidth.inter_node] the same over several nodes of gpus_per_node devices
    /// (the whole allreduce across nodes); empty: the alpha-beta model of bandwidth and latency.
    BusBandwidthTable inter_bus_bandwidth;
    double iteration_overhead = 0;    ///< [iteration_overhead_seconds] fixed seconds per iteration
    double price_per_node_hour = 1;   ///< [price_per_node_hour] price unit per node-hour
    double price_per_gpu_hour = 0;    ///< [price_per_gpu_hour] price unit per GPU-hour on top (optional)
    double watts_per_node = 0;        ///< [watts_per_node] watts of one busy node (optional; energy)
    Workload workload;                ///< [workload.name, .parameter_bytes, .train_examples]
    double flops_per_example = 0;     ///< [workload.flops_per_example] FLOPs of forward + backward per example
    double parameter_bytes = 0;       ///< [workload.parameter_bytes] gradient bytes each allreduce sums
    double activation_bytes_per_example = 0;  ///< [workload.activation_bytes_per_example] bytes; 0: not modelled
    int epochs = 0;                   ///< [workload.epochs] 0: --epochs or default_epochs of tula.conf
    double noise_scale = 0;           ///< [workload.noise_scale] B_noise, examples; 0: tula.conf's
    /// [workload.allreduce_bucket_bytes] bytes per gradient bucket the trainer reduces during
    /// the backward pass (OverlapModel's bucketed form); 0: one allreduce after it, not hidden.
    double allreduce_bucket_bytes = kDefaultBucketBytes;
    std::vector<int> global_batches;  ///< [global_batches] empty: default_global_batches()
};

/// Parses the JSON text of a hardware file (nlohmann-json): every partition, in file order: one
/// for a file without "partitions" (partition ""), else one per element of "partitions" (each
/// with the file's name, workload and global batches). `source` names it in messages.
/// Errors: tula::Error naming the key ("partitions[1].device.peak_flops") for malformed JSON, a
/// missing required key (nodes, gpus_per_node, device.peak_flops, device.memory_bytes,
/// network.bandwidth, network.latency, price_per_node_hour, workload.name,
/// workload.flops_per_example, workload.parameter_bytes, workload.train_examples), an unknown
/// key, a value of the wrong type, a non-finite or out-of-range value; a node key at the top
/// level next to "partitions", a missing or bad partition name, a name given twice.
std::vector<HardwareSpec> parse_hardware_partitions(const std::string& json_text,
                                                    const std::string& source = "hardware file");

/// Reads (at most 1 MiB) and parses every partition of `path` (one, without a "partitions"
/// list). Errors: tula::Error naming the path and strerror when it cannot be read, or as
/// parse_hardware_partitions.
std::vector<HardwareSpec> load_hardware_partitions(const std::string& path);

/// Powers of two from 32 to 64 x nodes x gpus_per_node (64 examples per device on the whole
/// partition), at most 2^24: the global batches planned when the file gives none.
std::vector<int> default_global_batches(const HardwareSpec& h);

/// The models of the planner derived from the figures. A planner rank is one node; its
/// local batch b is split evenly over the node's g devices.
struct SimulatedModels {
    /// Roofline-style compute (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4),
    /// compute-bound side): one device computes F FLOPs per example at peak P x efficiency e,
    ///   t(b) = t_over + t_intra + b F / (g P e)                 seconds per iteration,
    /// floor t_min = t_over + t_intra + s F / (P e) when a saturation batch s > 0 is given
    /// (flat-then-linear form). t_intra is the intra-node ring reduction of the gradient
    /// (n bytes) over the g devices, 2 (g-1)/g n / bw_intra (Thakur, Rabenseifner & Gropp
    /// 2005, sec. 4.5, bandwidth term), 0 when g = 1 or bw_intra is not given; with
    /// network.bus_bandwidth.intra_node, bus_bandwidth_seconds of that table for g ranks.
    ComputeModel compute;
    /// Inter-node allreduce from network.bus_bandwidth.inter_node when the file gives it
    /// (AllreduceModel::bus_bandwidth: nccl-tests' time of the whole allreduce less the
    /// within-node part t_intra), else alpha-beta: alpha = network.latency, beta = 1 / network.bandwidth;
    /// ring T = 2 (K-1) alpha + 2 (K-1)/K n beta, Rabenseifner (recursive halving + doubling,
    /// Thakur, Rabenseifner & Gropp 2005 sec. 4.5; Rabenseifner 2004) T = 2 log2 K alpha +
    /// 2 (K-1)/K n beta. The two-level (hierarchical) scheme: after the intra-node
    /// reduce-scatter the g devices of a node allreduce n/g bytes each through the node's
    /// link, together n bytes at the node's bandwidth.
    AllreduceModel allreduce;
    /// Per node: g x 4 x parameter_bytes (weights, gradients, momentum, allreduce buffer on
    /// every device, as MemoryModel::from_workload) + activation_bytes_per_example x b.
    MemoryModel memory;
    double node_memory_bytes = 0;   ///< g x device memory, bytes (the planner's per-rank bound)
    double intra_node_seconds = 0;  ///< t_intra above, seconds per iteration
    /// How compute and the inter-node allreduce combine: the bucketed form with the workload's
    /// allreduce_bucket_bytes (OverlapModel; 0 bytes: the sum, gamma = 1).
    OverlapModel overlap;
};

/// Derives the models (pure). Errors: none beyond those of a spec parse_hardware_partitions accepted.
SimulatedModels derive_models(const HardwareSpec& h);

/// True when run `r` was measured on partition `p` of a hardware file: its hardware_class names
/// the partition (a one-partition file's: its name), or it has none (a history of unknown
/// hardware is taken as the planned partition's). Pure.
bool runs_serve_partition(const RunRecord& r, const HardwareSpec& p);

/// Calibrates m->compute of partition `p` (derive_models) by the finished runs of p's workload
/// that serve it (runs_serve_partition, usable_run): each run gives the seconds of one step,
///   y = measured_seconds / (floor(D / B) x epochs) - exposed allreduce(nodes, 4 x params)
/// (D its examples per epoch, B its global batch, the inter-node allreduce of m->allreduce,
/// less the part m->overlap hides behind the backward pass of the fitted c x),
/// at x = B / (nodes x ranks_per_node) examples per device (a run's ranks_per_node is its
/// devices per node). The fixed part per step plus a part per example (as Pollux's per-GPU
/// gradient time alpha + beta x local batch, Qiao et al. 2021, OSDI) y = a + c x is fitted by least squares weighted
/// by 1 / y^2 (relative residuals), a >= 0; then t0 = a, t1 = c / gpus_per_node (seconds per
/// example of the node's batch) and no floor. Needs runs at 2 or more distinct x and c > 0;
/// otherwise m->compute is left as derived. The largest x of the runs fits the device: where
/// m->memory's bytes per example would not let x x gpus_per_node examples fit the node's
/// memory, they are lowered until they do. Returns the runs used (0: none). docs/models.md, "Runs
/// calibrate a hardware file's compute model".
int fit_hardware_compute(const HardwareSpec& p, const std::vector<RunRecord>& runs, SimulatedModels* m);

/// The models of partition `p` as every --hardware plan and its display use them:
/// derive_models(p) calibrated by fit_hardware_compute(p, runs); `calibrated_runs` (when given)
/// receives the runs used. Errors: none.
SimulatedModels hardware_models(const HardwareSpec& p, const std::vector<RunRecord>& runs, int* calibrated_runs);

/// Plans the hardware file's workload on its cluster: make_site_plan with the derived models,
/// node range 1..min(nodes, max_nodes) (max_nodes <= 0: nodes), price of the file,
/// time margin and overhead of `cfg`; `epochs` <= 0: the file's, else cfg.default_epochs;
/// `fixed_nodes` > 0: exactly that many (global batches rounded down to a multiple).
/// The prediction intervals are empty (nothing was measured): upper bound = prediction.
/// Errors: tula::Error as make_site_plan, when fixed_nodes exceeds the file's nodes, or when the
/// node range x global batches exceeds 10^8 pairs (the planner's enumeration would take minutes).
/// `runs` (a run history, e.g. imported with tula db import): the convergence model from
/// history_convergence (B_crit fitted to the runs' epochs to policy.target_accuracy, or to
/// what the requested epochs reach at the reference batch), the file's (or tula.conf's)
/// B_noise its prior; a note on a target that could not be fitted goes to `warnings`.
Plan plan_hardware(const Config& cfg, const HardwareSpec& h, int epochs, int max_nodes, int fixed_nodes,
                   const PolicySpec& policy, const std::vector<RunRecord>& runs = {},
                   std::vector<std::string>* warnings = nullptr);

/// plan_hardware across several partitions (parse_hardware_partitions): make_site_plan with
/// each partition's derived models, node count, GPUs, prices and memory; the workload, epochs
/// and global batches of the first. A candidate names its partition (Candidate::partition)
/// and has 1 planner rank per node driving the node's gpus_per_node devices
/// (SimulatedModels); its gpus_per_node is the partition's. Errors: as plan_hardware (the
/// node bound is the largest partition's; the pair bound counts every partition). `runs` and
/// `warnings`: as plan_hardware.
Plan plan_hardware_site(const Config& cfg, const std::vector<HardwareSpec>& parts, int epochs, int max_nodes,
                        int fixed_nodes, const PolicySpec& policy, const std::vector<RunRecord>& runs = {},
                        std::vector<std::string>* warnings = nullptr);

}  // namespace tula
