// libtula: the planner's candidates, per partition (see candidates.hpp and planner.hpp).
//
// Prediction for a candidate (partition with R ranks per node, nodes K, global batch B, local
// batch b = B / (K R)), following Scavenger (Tyagi & Sharma 2023): T = (e * D / B) * tau,
// C = T * K * p, with
//   tau = overlap(f * compute(b), allreduce)          seconds per iteration; f the partition's
//                                                      compute factor (1, or scaled from another
//                                                      class), allreduce hierarchical: within the
//                                                      node among R ranks, then across K nodes
//                                                      (hierarchical_allreduce_seconds)
//   iterations per epoch = steps_per_epoch(D, B)       D = training examples per epoch; floor(D / B)
//                                                      when the trainer drops the last partial
//                                                      batch (tula-train), ceil(D / B) when it
//                                                      keeps it (the workload's LastBatch)
//   T = epochs(B) * iterations per epoch * tau + start-up   (total_seconds, the training)
//   J = T + epochs(B) * V(K)                           the job: V the evaluation of the test set
//                                                      after an epoch (Predictor::evaluation_seconds)
//   C = K * J / 3600 * (price per node-hour + GPUs per node * price per GPU-hour)
#include "candidates.hpp"

#include "tula/stop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "tula/error.hpp"

namespace tula {
namespace planner_detail {

std::string config_str(const Candidate& c) {
    return nodes_str(c.nodes) + (c.partition.empty() ? "" : " of " + c.partition) + " x " + std::to_string(c.global_batch);
}

int whole_epochs(double epochs_to_target, int fallback) {
    constexpr double kMaxEpochs = 100000;  // tula-train's bound on --epochs and TULA_EPOCHS
    if (!std::isfinite(epochs_to_target)) return fallback;
    return static_cast<int>(std::min(kMaxEpochs, std::max(1.0, std::ceil(epochs_to_target - 1e-9))));
}


std::string synced_shape_str(const SyncedRatios& synced, int nodes, int ranks_per_node) {
    std::pair<int, int> timed;
    synced.serving(nodes, ranks_per_node, &timed);
    return timed.second > 1 ? nodes_str(timed.first) + " x " + std::to_string(timed.second) + " ranks"
                            : std::to_string(timed.first) + " ranks at once";
}

// One candidate: K nodes x R ranks at global batch B (local batch B / (K R)), its step predicted
// by `pred` with the node count's gradient allreduce; the whole epochs it needs (relative to
// the reference batch B_ref), its times (seconds), node-hours, GPU-hours, energy (kWh), cost and
// memory per rank (bytes). evaluation_per_epoch: seconds of one test-set evaluation;
// checkpoint_seconds: seconds to write the checkpoint (the stop signal's lead).
Candidate make_candidate(const PlanRequest& req, const Predictor& pred, int K, int R, int B, const GradientAllreduce& allreduce,
                         double evaluation_per_epoch, double B_ref, double checkpoint_seconds,
                         const std::optional<MemoryModel>& memory) {
    const PartitionTarget& t = pred.target();
    const int64_t D = req.examples_per_epoch();  // >= 1: checked by check_plan_request
    const int b = B / (K * R);
    Candidate c;
    c.partition = t.conf.name;
    c.nodes = K;
    c.ranks_per_node = R;
    c.gpus_per_node = t.conf.gpus_per_node;
    c.exclusive = t.conf.exclusive;
    c.global_batch = B;
    c.local_batch = b;
    c.scaled_from = t.scaled_from;
    c.own_profile = t.own_profile;
    c.intra_node_bandwidth = R > 1 ? t.intra_node_bandwidth() : 0.0;
    c.intra_node_source = R > 1 ? t.intra_node_source() : "none";
    const StepPrediction p = pred.step(K, R, b, allreduce);
    c.synced_profile = p.synced_profile;
    c.time_factor = p.time_factor;
    c.run_fit_seconds = p.run_fit_seconds;
    c.run_fit_runs = p.run_fit_runs;
    c.iter_seconds = p.seconds;
    const double iters = pred.steps_per_epoch(static_cast<double>(D), B);
    c.epoch_seconds = iters * c.iter_seconds;
    c.startup_seconds = p.startup_seconds;  // once per run
    c.epochs_to_target = req.convergence.epochs_for(B, req.epochs, B_ref);
    const bool ci = req.convergence.confidence > 0;
    c.epochs_to_target_low =
        ci ? req.convergence.epochs_with(req.convergence.noise_scale_high, B, req.epochs, B_ref) : c.epochs_to_target;
    c.epochs_to_target_high =
        ci ? req.convergence.epochs_with(req.convergence.noise_scale_low, B, req.epochs, B_ref) : c.epochs_to_target;
    c.epochs = req.fixed_epochs ? req.epochs : whole_epochs(c.epochs_to_target, req.epochs);
    const JobPrediction job = pred.job(p, K, iters, c.epochs, evaluation_per_epoch);
    c.total_seconds = job.run.seconds;
    c.total_seconds_upper = job.run.upper;
    c.compute_step_seconds = p.seconds - p.exposed_comm_seconds;
    c.exposed_comm_step_seconds = p.exposed_comm_seconds;
    c.evaluation_seconds = job.evaluation_seconds;
    c.overhead_step_seconds = job.overhead_step_seconds();
    c.node_hours = job.node_hours;
    c.gpu_hours = job.gpu_hours;
    c.energy_kwh = job.energy_kwh;
    c.cost = job.cost;
    c.cost_upper = job.cost_upper;
    c.signal_seconds = signal_seconds(p.upper, checkpoint_seconds);
    c.time_to_target = c.job_seconds();  // the job trains c.epochs: ranked on what it runs
    c.cost_to_target = c.cost;
    c.expected_accuracy = req.accuracy.at(B);
    c.memory_bytes = memory ? memory->bytes(b) : 0.0;    return c;
}

namespace {

// The shapes (K, B) with lo <= K <= hi whose K R ranks divide the global batch B, ordered by K
// then B; `batches` sorted and unique. Found from the divisors K of B / R (trial division up to
// its square root: 64 batches of up to 65,536 take about 16,000 divisions), not by testing every
// node count against every batch (4,096 x 64 divisions per partition), and ordered by a
// counting sort on K (stable, so each K keeps the batches' increasing order).
std::vector<std::pair<int, int>> divisible_shapes(const std::vector<int>& batches, int R, int lo, int hi) {
    std::vector<std::pair<int, int>> found;
    for (int B : batches) {
        if (B % R != 0) continue;
        const int q = B / R;
        for (int d = 1; static_cast<int64_t>(d) * d <= q; ++d) {
            if (q % d != 0) continue;
            const int e = q / d;
            if (d >= lo && d <= hi) found.emplace_back(d, B);
            if (e != d && e >= lo && e <= hi) found.emplace_back(e, B);
        }
    }
    if (found.empty()) return found;
    // every K found is in [lo, hi] and at most the largest B / R, so the counts stay small
    int top = lo;
    for (const auto& s : found) top = std::max(top, s.first);
    std::vector<size_t> start(static_cast<size_t>(top - lo) + 2, 0);
    for (const auto& s : found) ++start[static_cast<size_t>(s.first - lo) + 1];
    for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
    std::vector<std::pair<int, int>> out(found.size());
    for (const auto& s : found) out[start[static_cast<size_t>(s.first - lo)]++] = s;
    return out;
}

}  // namespace

void enumerate_partition(const PlanRequest& req, const Predictor& pred, Plan* out, size_t partitions_after) {
    const Workload& w = req.workload;
    const PartitionTarget& t = pred.target();
    const ComputeModel& compute = t.compute;
    const AllreduceModel* allreduce = t.allreduce ? &*t.allreduce : nullptr;
    const std::string where = t.conf.name.empty() ? std::string() : " on partition " + t.conf.name;
    const int R = std::max(1, t.conf.ranks_per_node);
    const int max_nodes = allreduce ? std::min(req.max_nodes, t.conf.nodes) : std::min(1, t.conf.nodes);
    if (max_nodes < req.min_nodes)
        throw Error("no candidate for " + w.name + where + ": " +
                    (allreduce || req.min_nodes <= t.conf.nodes
                         ? "it has " + nodes_str(t.conf.nodes) + ", fewer than the " + std::to_string(req.min_nodes) + " asked for"
                         : std::string(kNoAllreduceProfile)));
    Plan& plan = *out;
    std::vector<int> batches;
    for (int b : req.global_batches)
        if (b > 0) batches.push_back(b);
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());

    const std::optional<MemoryModel>& memory = t.memory ? t.memory : req.memory;
    const double device_memory = t.device_memory_bytes > 0 ? t.device_memory_bytes : req.device_memory_bytes;
    const bool mem_bound = memory && device_memory > 0;
    const int max_b = mem_bound ? memory->max_local_batch(device_memory) : 0;
    plan.max_local_batch = mem_bound ? max_b : 0;
    int too_big = 0, smallest_too_big = 0;
    const double B_ref = plan.reference_batch > 0 ? plan.reference_batch : 1.0;
    const std::vector<std::pair<int, int>> shapes = divisible_shapes(batches, R, req.min_nodes, max_nodes);
    // room for this partition and as many shapes for each one after it; beyond that grown
    // geometrically, so that the candidates of the earlier ones are moved once or twice at most
    const size_t need = plan.candidates.size() + shapes.size();
    if (need > plan.candidates.capacity())
        plan.candidates.reserve(std::max(need + partitions_after * shapes.size(), 2 * plan.candidates.capacity()));
    const size_t before = plan.candidates.size();
    // Slurm's MaxTime of the partition: candidates predicted to run longer cannot finish.
    const double max_seconds = t.conf.max_time_minutes > 0 ? 60.0 * t.conf.max_time_minutes : 0.0;
    double shortest_over = 0;  // the shortest predicted time MaxTime excluded, seconds
    const double checkpoint_seconds = checkpoint_write_seconds(checkpoint_bytes(req.workload.params));
    // a node count's allreduce and evaluation per epoch, computed for its first candidate (most
    // node counts divide none of the global batches)
    int known = 0;
    GradientAllreduce comm;
    double evaluation = 0;
    for (const auto& [K, B] : shapes) {
        const int b = B / (K * R);
        if (compute.max_batch > 0 && (b > kExtrapolation * compute.max_batch || b * kExtrapolation < compute.min_batch))
            continue;
        if (mem_bound && b > max_b) {
            if (!too_big || b < smallest_too_big) smallest_too_big = b;
            ++too_big;
            continue;
        }
        if (known != K) {
            comm = pred.gradient_allreduce(K, R);
            evaluation = pred.evaluation_seconds(K, R);
            known = K;
        }
        Candidate c = make_candidate(req, pred, K, R, B, comm, evaluation, B_ref, checkpoint_seconds, memory);
        if (max_seconds > 0 && c.job_seconds() > max_seconds) {
            if (shortest_over == 0 || c.job_seconds() < shortest_over) shortest_over = c.job_seconds();
            continue;
        }
        plan.candidates.push_back(std::move(c));
    }
    if (plan.candidates.size() > before) return;
    if (shortest_over > 0)
        throw Error("its MaxTime of " + std::to_string(t.conf.max_time_minutes) + " min is shorter than every prediction for " +
                    w.name + where + " (the shortest: " + fmt("%.0f", shortest_over / 60.0) +
                    " min); ask the administrator for a longer MaxTime or plan fewer epochs");
    if (too_big > 0) {
        throw Error("no candidate for " + w.name + where + " fits device memory: local batch " + std::to_string(smallest_too_big) +
                    " needs " + fmt("%.3g", memory->bytes(smallest_too_big) / 1073741824.0) + " GiB per rank but device_memory_bytes is " +
                    fmt("%.3g", device_memory / 1073741824.0) + " GiB; the largest local batch that fits is " +
                    std::to_string(max_b) + "; use more nodes (--max-nodes) or smaller global_batches in tula.conf");
    }
    std::string list;
    for (int b : batches) list += (list.empty() ? "" : ",") + std::to_string(b);
    const std::string per_node = R == 1 ? std::string() : " times " + std::to_string(R) + " ranks per node";
    throw Error("no feasible (nodes, global batch) candidate for " + w.name + where + " with " +
                (req.min_nodes == max_nodes ? nodes_str(max_nodes)
                                            : std::to_string(req.min_nodes) + ".." + std::to_string(max_nodes) + " nodes") +
                " and global batches {" + list + "}: the global batch must be a multiple of the node count" + per_node +
                " and the local batch within " + fmt("%g", kExtrapolation) + "x of the profiled " +
                std::to_string(compute.min_batch) + ".." + std::to_string(compute.max_batch) +
                "; adjust global_batches in tula.conf or profile more batch sizes");
}

}  // namespace planner_detail

PartitionTarget implicit_target(const PlanRequest& req, const ComputeModel& compute, const AllreduceModel* allreduce) {
    PartitionTarget t;
    t.conf.nodes = std::max(1, req.max_nodes);
    t.conf.ranks_per_node = 1;
    t.conf.gpus_per_node = req.gpus_per_node;
    t.conf.exclusive = req.exclusive;
    t.conf.price_per_node_hour = req.price_per_node_hour;
    t.conf.price_per_gpu_hour = req.price_per_gpu_hour;
    t.conf.watts_per_node = req.watts_per_node;
    t.compute = compute;
    if (allreduce) t.allreduce = *allreduce;
    return t;
}

double scaled_compute_factor(const PartitionConf& from, const PartitionConf& to) {
    const bool flops = from.peak_flops > 0 && to.peak_flops > 0;
    const bool mem = from.memory_bandwidth > 0 && to.memory_bandwidth > 0;
    if (!flops && !mem)
        throw Error("no peak_flops or memory_bandwidth for both class " + from.hardware_class + " and class " +
                    to.hardware_class + " in tula.conf, so one cannot be predicted from the other; give the published "
                    "figures, or profile class " + to.hardware_class);
    const double rf = flops ? from.peak_flops / to.peak_flops : 0.0;
    const double rm = mem ? from.memory_bandwidth / to.memory_bandwidth : 0.0;
    return flops && mem ? std::sqrt(rf * rm) : flops ? rf : rm;
}

namespace {

// Target `p` predicted from the models of class `from` (partition `profiled`): scaled by the
// published figures when the classes differ, else as they are; `left_out` when tula.conf lacks
// the figures.
PartitionTarget scaled_target(const PartitionConf& p, const PartitionConf& profiled, const ComputeModel& compute,
                              const AllreduceModel* allreduce) {
    PartitionTarget t;
    t.conf = p;
    t.compute = compute;
    if (allreduce) t.allreduce = *allreduce;
    if (!p.hardware_class.empty() && p.hardware_class != profiled.hardware_class) {
        try {
            t.compute_factor = scaled_compute_factor(profiled, p);
            if (allreduce) t.allreduce = scaled_allreduce(*allreduce, profiled, p);
            t.upper_factor = kScaledIntervalFactor;
            t.scaled_from = profiled.hardware_class;
            t.own_profile = false;
        } catch (const Error& e) {
            t.left_out = std::string("no profile of class ") + p.hardware_class + " (" + e.what() + ")";
        }
    }
    if (!p.unavailable.empty()) t.left_out = p.unavailable;  // Slurm's reason (the tula command's query)
    return t;
}

}  // namespace

std::vector<PartitionTarget> site_targets(const Config& cfg, const ComputeModel& compute, const AllreduceModel* allreduce) {
    const std::vector<PartitionConf> parts = cfg.site_partitions();
    const PartitionConf& first = cfg.site_before_narrowing.empty() ? parts.front() : cfg.site_before_narrowing.front();
    std::vector<PartitionTarget> out;
    for (const PartitionConf& p : parts) out.push_back(scaled_target(p, first, compute, allreduce));
    return out;
}

std::map<std::string, ClassFit> fit_classes(const Config& cfg, const std::vector<ComputeSample>& compute,
                                            const std::vector<AllreduceSample>& allreduce,
                                            std::vector<std::string>* warnings) {
    const std::vector<PartitionConf> parts =
        cfg.site_before_narrowing.empty() ? cfg.site_partitions() : cfg.site_before_narrowing;
    const bool classed = std::any_of(compute.begin(), compute.end(),
                                     [](const ComputeSample& c) { return !c.hardware_class.empty(); });
    // the rows of class `cls` (class_rows); without classes every row is the site's first
    // partition's (of Config::site_before_narrowing when narrowed; none for the others: they are
    // scaled from it, as before classes were recorded)
    const std::string& first = parts.front().hardware_class;
    auto rows_of = [&](const auto& rows, const std::string& cls, bool* own) {
        *own = true;
        if (!classed && cls == first) return rows;
        if (!classed && !cls.empty()) return std::remove_const_t<std::remove_reference_t<decltype(rows)>>{};
        return planner_detail::class_rows(rows, cls, own);
    };
    std::map<std::string, ClassFit> fits;
    std::vector<const PartitionConf*> unmeasured;  // classes with no across-node sample, first partition each
    for (const PartitionConf& p : parts) {
        const std::string& cls = p.hardware_class;
        if (fits.count(cls)) continue;
        bool own = true, ar_own = true;
        const std::vector<ComputeSample> cs = rows_of(compute, cls, &own);
        if (cs.empty()) continue;
        ClassFit f;
        f.own = own;
        try {
            f.compute = ComputeModel::fit(cs);
        } catch (const Error& e) {
            if (warnings) warnings->push_back("class " + (cls.empty() ? std::string("(any)") : cls) + ": " + e.what());
            continue;
        }
        const std::vector<AllreduceSample> as = rows_of(allreduce, cls, &ar_own);
        if (IntraNodeModel::has_samples(as)) {
            try {
                f.intra = IntraNodeModel::fit(as);
            } catch (const Error& e) {
                if (warnings) warnings->push_back(std::string(e.what()) + "; " +
                                                  (cls.empty() ? std::string("") : "class " + cls + ": ") +
                                                  "within-node allreduce from tula.conf's intra_node_bandwidth");
            }
        }
        if (AllreduceModel::has_inter_node(as)) {
            try {
                f.allreduce = AllreduceModel::fit(as);
                if (warnings && !f.allreduce->note.empty())
                    warnings->push_back((cls.empty() ? std::string("") : "class " + cls + ": ") + "allreduce model " +
                                        f.allreduce->note);
            } catch (const Error& e) {
                if (warnings) warnings->push_back(std::string(e.what()) + "; planning " +
                                                  (cls.empty() ? std::string("") : "class " + cls + " ") + "for 1 node only");
            }
        } else {
            unmeasured.push_back(&p);
        }
        fits.emplace(cls, std::move(f));
    }
    for (const PartitionConf* p : unmeasured) {
        ClassFit& f = fits.at(p->hardware_class);
        f.allreduce = allreduce_from_figures(parts, fits, *p, &f.allreduce_from);
        if (f.allreduce && warnings)
            warnings->push_back((p->hardware_class.empty() ? std::string("") : "class " + p->hardware_class + ": ") +
                                "no across-node allreduce profile; the allreduce is taken from " + f.allreduce_from +
                                "; `tula profile allreduce` on partition " + p->name + " measures it");
    }
    return fits;
}

std::optional<AllreduceModel> allreduce_from_figures(const std::vector<PartitionConf>& parts,
                                                     const std::map<std::string, ClassFit>& fits,
                                                     const PartitionConf& to, std::string* from) {
    if (!(to.link_bandwidth > 0)) return std::nullopt;
    for (const PartitionConf& p : parts) {
        const auto it = fits.find(p.hardware_class);
        if (p.hardware_class == to.hardware_class || !(p.link_bandwidth > 0) || it == fits.end() ||
            !it->second.allreduce || !it->second.allreduce_from.empty())
            continue;
        if (from)
            *from = "class " + p.hardware_class + "'s allreduce profile scaled by tula.conf's link_bandwidth (" +
                    detail::fmt("%.3g", p.link_bandwidth) + " / " + detail::fmt("%.3g", to.link_bandwidth) + " bytes/s)";
        return scaled_allreduce(*it->second.allreduce, p, to);
    }
    AllreduceModel a;
    a.alpha = 0;
    a.beta = 1.0 / to.link_bandwidth;
    a.algorithm = AllreduceModel::Algorithm::Ring;
    if (from)
        *from = "tula.conf's link_bandwidth of partition " + to.name + " (" + detail::fmt("%.3g", to.link_bandwidth) +
                " bytes/s; a ring, no latency term)";
    return a;
}

std::vector<PartitionTarget> site_targets(const Config& cfg, const std::map<std::string, ClassFit>& fits) {
    const std::vector<PartitionConf> parts = cfg.site_partitions();
    const std::vector<PartitionConf>& site = cfg.site_before_narrowing.empty() ? parts : cfg.site_before_narrowing;
    const PartitionConf* profiled = nullptr;  // the site's first partition whose class has rows of its own
    for (const PartitionConf& p : site) {
        const auto it = fits.find(p.hardware_class);
        if (it != fits.end() && it->second.own) {
            profiled = &p;
            break;
        }
    }
    std::vector<PartitionTarget> out;
    for (const PartitionConf& p : parts) {
        const auto it = fits.find(p.hardware_class);
        if (it != fits.end()) {
            const ClassFit& f = it->second;
            out.push_back(scaled_target(p, p, f.compute, f.allreduce ? &*f.allreduce : nullptr));
            out.back().allreduce_from = f.allreduce_from;
            out.back().intra = f.intra;
            out.back().own_profile = f.own || p.hardware_class.empty();
        } else if (profiled) {
            const ClassFit& f = fits.at(profiled->hardware_class);
            out.push_back(scaled_target(p, *profiled, f.compute, f.allreduce ? &*f.allreduce : nullptr));
        } else {
            PartitionTarget t;
            t.conf = p;
            t.left_out = !p.unavailable.empty() ? p.unavailable
                                                : "no profile of class " + p.hardware_class +
                                                      " and no class with a profile of its own to scale from";
            out.push_back(std::move(t));
        }
    }
    return out;
}

AllreduceModel scaled_allreduce(const AllreduceModel& a, const PartitionConf& from, const PartitionConf& to) {
    if (!(from.link_bandwidth > 0 && to.link_bandwidth > 0)) return a;
    AllreduceModel s = a;
    s.beta = a.beta * from.link_bandwidth / to.link_bandwidth;
    s.measured.clear();
    return s;
}

}  // namespace tula
