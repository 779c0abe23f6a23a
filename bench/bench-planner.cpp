// tula-bench-planner: latency of the planner at scale: 4,096 node counts x 64 global batch
// sizes planned on one partition (make_site_plan of implicit_target), repeated; prints the
// median latency in ms and its ratio to the 5 ms target (ratio <= 1 meets it). The models are synthetic (known
// parameters) so the benchmark needs no profile database. A second figure: the same
// enumeration in simulation mode (plan_hardware, tula plan --hardware) on
// etc/hardware-h100-512.json widened to 4,096 nodes, run from the repository root. A third:
// a site of 4 partitions x 4,096 nodes x 8 ranks per node x the same 64 global batches
// (make_site_plan, hierarchical allreduce), with its ratio to the target and to the first
// figure (its anchor: one partition of one rank per node, measured in the same run), then the
// same site with a StepFit per partition's class (its anchor: the site figure). A fourth:
// the critical-batch fit (convergence_from_history: run selection, GSL fit and its
// 200-resample bootstrap) from 1,000 runs of a synthetic history drawn from E(B) = E_min
// (1 + B/B_crit), its median against the 20 ms target and as a ratio to the planner's median
// in the same run (the anchor: both are CPU-bound on the same machine). A fifth: reading a
// metrics file of 10,000 step lines and 10 epoch lines into a run (read_metrics_run, the
// path of `tula db record`), its median against the 100 ms target and as a ratio to its
// anchor measured in the same run: the same text split with std::getline and each line
// parsed with nlohmann::json::parse, without the checks. A sixth (alone with --fit, as
// bench/bench-fit runs it): the time models fitted to 10,000 finished runs (fit_run_models:
// the overlap and the runs' step model, StepFit), its median against the 1 s target and as a
// ratio to its anchor in the same run: the 10,000 runs predicted once each by the fitted
// models (Predictor::run), the predictions a fit needs at the least; then the same fit with
// its fits from the cache (FitCache: in memory, and from a cache directory), each as a
// ratio to the fit and to the anchor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <vector>

#include "tula/convergence_fit.hpp"
#include "tula/step_fit.hpp"
#include "tula/fit_cache.hpp"

#include "tula/error.hpp"
#include "tula/hardware.hpp"
#include "tula/metrics.hpp"
#include "tula/planner.hpp"
#include "tula/predict.hpp"

namespace {

// Median of `reps` timings of f(), milliseconds; sorts `ms`.
template <class F>
double median_ms(int reps, std::vector<double>& ms, F f) {
    ms.clear();
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// The sixth figure: fit_run_models on 10,000 synthetic runs (K = 1..16 nodes, R = 1, 2, 4, 8
// ranks per node, local batch 16..128, steps 10 % to 40 % slower than the profiles' model).
void bench_fit(int reps) {
    tula::Workload w;
    w.name = "resnet18@imagenet";
    w.model = "resnet18";
    w.params = 11689512;
    w.train_examples = 1281167;
    std::vector<tula::ComputeSample> cs;
    for (int b : {16, 32, 64, 128, 256}) {
        tula::ComputeSample s;
        s.workload = w.name;
        s.local_batch = b;
        s.seconds_per_iter = 2e-3 + 1.5e-4 * b;
        cs.push_back(s);
    }
    std::vector<tula::AllreduceSample> as;
    for (int k : {2, 4, 8})
        for (int64_t n : {int64_t(1) << 20, int64_t(1) << 26}) {
            tula::AllreduceSample s;
            s.nodes = k;
            s.bytes = n;
            s.seconds = 2.0 * (k - 1) * 20e-6 + 2.0 * (k - 1) / k * static_cast<double>(n) / 10e9;
            as.push_back(s);
        }
    const tula::TimeModels pm = tula::fit_profile_models(tula::Config{}, w, cs, as, tula::Corrections{}, nullptr);
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> slow(1.1, 1.4);
    std::vector<tula::RunRecord> runs;
    const int ranks[] = {1, 2, 4, 8};
    for (int i = 0; i < 10000; ++i) {
        tula::RunRecord r;
        r.job_id = std::to_string(i);
        r.workload = w.name;
        r.nodes = 1 + static_cast<int>(rng() % 16);
        r.ranks_per_node = ranks[rng() % 4];
        r.global_batch = r.nodes * r.ranks_per_node * (16 << (rng() % 4));
        r.epochs = 1;
        r.created = i;
        r.measured_seconds = slow(rng) * tula::Predictor(pm, pm.run_target("")).run(r).seconds;
        runs.push_back(r);
    }
    std::vector<double> ms;
    int fitted = 0;
    const double fit = median_ms(reps, ms, [&] { fitted = tula::fit_run_models(pm, runs, nullptr).step_fits.at("").runs; });
    const double fit_min = ms.front(), fit_max = ms.back();
    const tula::TimeModels m = tula::fit_run_models(pm, runs, nullptr);
    double sink = 0;
    const double anchor = median_ms(reps, ms, [&] {
        const tula::Predictor pred(m, m.run_target(""));
        for (const tula::RunRecord& r : runs) sink += pred.run(r).seconds;
    });
    const double target = 1000.0;
    std::printf("bench-fit: time models fitted to %zu runs (%d in the step model): median %.3f ms (min %.3f, max "
                "%.3f), target %.0f ms, ratio %.3f (<= 1 meets it); anchor (the %zu runs predicted once each) %.3f ms, "
                "%.2f x the anchor%s\n",
                runs.size(), fitted, fit, fit_min, fit_max, target, fit / target, runs.size(), anchor, fit / anchor,
                sink > 0 ? "" : " (no prediction)");
    // The same evidence again, its fits (overlap, StepFit) from the cache: in the process's
    // memory, and from a cache directory read by a fresh FitCache each time (as a new `tula
    // plan` reads it).
    char dir[] = "/tmp/tula-bench-fit-XXXXXX";
    if (!mkdtemp(dir)) {
        std::printf("bench-fit: cannot make a directory for the cache; the cached figures are not measured\n");
        return;
    }
    tula::TimeModels cached = pm;
    tula::FitCache memory(dir);
    cached.fit_cache = &memory;
    tula::fit_run_models(cached, runs, nullptr);  // fitted once, kept in memory and in the directory
    const double from_memory = median_ms(reps, ms, [&] { tula::fit_run_models(cached, runs, nullptr); });
    int file_hits = 0;
    const double from_file = median_ms(reps, ms, [&] {
        tula::FitCache fresh(dir);
        cached.fit_cache = &fresh;
        tula::fit_run_models(cached, runs, nullptr);
        file_hits += fresh.stats().file_hits;
    });
    std::printf("bench-fit: the same runs again with the fits cached: from memory %.3f ms (%.2f x the fit), "
                "from the cache directory %.3f ms (%.2f x the fit; %d of %d fits read from the files); anchor %.3f ms, "
                "%.2f and %.2f x the anchor\n",
                from_memory, from_memory / fit, from_file, from_file / fit, file_hits, 2 * reps, anchor,
                from_memory / anchor, from_file / anchor);
    const std::string rm = std::string("rm -rf '") + dir + "'";
    if (std::system(rm.c_str()) != 0) std::printf("bench-fit: %s failed\n", rm.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--fit") {
        bench_fit(11);
        return 0;
    }
    tula::ComputeModel compute;
    compute.t0 = 2e-3;
    compute.t1 = 1.5e-4;
    compute.sigma = 1e-4;
    compute.dof = 10;
    compute.xtx_inv[0] = 0.3;
    compute.xtx_inv[1] = -1e-3;
    compute.xtx_inv[2] = 1e-5;  // a prediction interval is computed for every candidate
    tula::AllreduceModel ar;
    ar.alpha = 20e-6;
    ar.beta = 1.0 / 10e9;
    ar.algorithm = tula::AllreduceModel::Algorithm::Rabenseifner;

    tula::PlanRequest req;
    req.workload.name = "resnet18@imagenet";
    req.workload.model = "resnet18";
    req.workload.params = 11689512;
    req.workload.train_examples = 1281167;
    req.epochs = 90;
    req.min_nodes = 1;
    req.max_nodes = 4096;
    for (int i = 1; i <= 64; ++i) req.global_batches.push_back(1024 * i);  // 1,024 .. 65,536
    req.price_per_node_hour = 2.5;
    req.policy = tula::Policy::Auto;
    req.overlap.gamma = 2.0;

    const int reps = 31;
    const double target = 5.0;
    std::vector<double> ms;
    size_t n_cand = 0;
    const double median = median_ms(reps, ms, [&] {
        n_cand = tula::make_site_plan(req, {tula::implicit_target(req, compute, &ar)}).candidates.size();
    });
    std::printf("bench-planner: 4096 nodes x 64 global batches (%zu feasible candidates), %d runs\n", n_cand, reps);
    std::printf("bench-planner: median %.3f ms (min %.3f, max %.3f), target %.1f ms, ratio %.3f (<= 1 meets it)\n",
                median, ms.front(), ms.back(), target, median / target);

    // 4 partitions of different speed, price and links, 8 ranks (GPUs) per node each.
    std::vector<tula::PartitionTarget> site;
    for (int i = 0; i < 4; ++i) {
        tula::PartitionTarget t;
        t.conf.name = "p" + std::to_string(i);
        t.conf.nodes = 4096;
        t.conf.ranks_per_node = 8;
        t.conf.gpus_per_node = 8;
        t.conf.price_per_node_hour = 2.5 * (i + 1);
        t.conf.intra_node_bandwidth = 100e9 * (i + 1);
        t.compute = compute;
        t.compute_factor = 1.0 / (i + 1);
        t.allreduce = ar;
        t.allreduce->beta = ar.beta / (i + 1);
        site.push_back(t);
    }
    size_t n_site = 0;
    const double site_ms = median_ms(reps, ms, [&] { n_site = tula::make_site_plan(req, site).candidates.size(); });
    std::printf("bench-planner: site (4 partitions x 4096 nodes x 8 ranks per node x 64 global batches, %zu feasible "
                "candidates): median %.3f ms (min %.3f, max %.3f), target %.1f ms, ratio %.3f (<= 1 meets it); "
                "%.2fx the one-partition figure above (%.3f ms) of this run\n",
                n_site, site_ms, ms.front(), ms.back(), target, site_ms / target, site_ms / median, median);
    // The same site with the runs' step model of each partition's class (StepFit of 48 runs at
    // 1-2 nodes x 1, 2, 4, 8 ranks per node): every candidate's step and interval take it.
    tula::PlanRequest fitted = req;
    for (tula::PartitionTarget& t : site) {
        t.conf.hardware_class = t.conf.name;
        std::vector<tula::StepObservation> obs;
        for (int K : {1, 2})
            for (int R : {1, 2, 4, 8})
                for (double c : {0.01, 0.02, 0.04}) {
                    tula::StepObservation o;
                    o.nodes = K, o.ranks_per_node = R, o.compute_seconds = c;
                    o.model_seconds = c + 0.002 * (K - 1);
                    o.measured_seconds = o.model_seconds * (1.2 + 0.02 * R);
                    obs.push_back(o);
                }
        fitted.step_fits[t.conf.hardware_class] = tula::StepFit::fit(obs);
    }
    const double fit_site_ms = median_ms(reps, ms, [&] { n_site = tula::make_site_plan(fitted, site).candidates.size(); });
    std::printf("bench-planner: site with the runs' step model of each class (%zu feasible candidates): median %.3f ms "
                "(min %.3f, max %.3f), target %.1f ms, ratio %.3f (<= 1 meets it); %.2fx the site figure above (%.3f ms) "
                "of this run\n",
                n_site, fit_site_ms, ms.front(), ms.back(), target, fit_site_ms / target, fit_site_ms / site_ms, site_ms);

    try {
        tula::HardwareSpec h = tula::load_hardware_partitions("etc/hardware-h100-512.json").front();
        h.nodes = 4096;
        h.global_batches = req.global_batches;
        tula::PolicySpec auto_policy;
        size_t n_sim = 0;
        const double sim = median_ms(reps, ms, [&] {
            n_sim = tula::plan_hardware(tula::Config{}, h, 0, 0, 0, auto_policy).candidates.size();
        });
        std::printf("bench-planner: simulated (--hardware etc/hardware-h100-512.json at 4096 nodes x 8 GPUs, 64 global "
                    "batches, %zu feasible candidates): median %.3f ms (min %.3f, max %.3f), target %.1f ms, ratio %.3f\n",
                    n_sim, sim, ms.front(), ms.back(), target, sim / target);
    } catch (const tula::Error& e) {
        std::fprintf(stderr, "%s (simulated figure skipped; run from the repository root)\n", e.what());
    }

    // 1,000 runs at 64 global batches 1K..64K, E_min 30, B_crit 12,000, 5 % noise, each with
    // a per-epoch test accuracy crossing 0.75 at its drawn epoch.
    std::vector<tula::RunRecord> runs;
    std::mt19937 rng(5);
    std::normal_distribution<double> noise(0.0, 0.05);
    for (int i = 0; i < 1000; ++i) {
        tula::RunRecord r;
        r.workload = req.workload.name;
        r.nodes = 1;
        r.global_batch = 1024 * (1 + i % 64);
        r.optimizer = "sgd";
        const int hit = static_cast<int>(std::ceil(30.0 * (1.0 + r.global_batch / 12000.0) * std::exp(noise(rng))));
        r.epochs = hit + 1;
        for (int e = 1; e <= r.epochs; ++e) r.epoch_test_accuracy.push_back(e < hit ? 0.7 : 0.76);
        runs.push_back(std::move(r));
    }
    const double fit_target = 20.0;
    tula::ConvergenceModel m;
    const double fit = median_ms(reps, ms, [&] {
        m = tula::convergence_from_history(runs, req.workload, 0.75, tula::ConvergenceModel{});
    });
    std::printf("bench-planner: B_crit fit from %d runs at %d batches (%d bootstrap resamples): B_crit %.0f, E_min "
                "%.2f; median %.3f ms (min %.3f, max %.3f), target %.1f ms, ratio %.3f (<= 1 meets it); "
                "%.3f x the planner's median above\n",
                m.fit_runs, m.fit_batches, tula::CriticalBatchFit::kResamples, m.noise_scale, m.e_min, fit, ms.front(),
                ms.back(), fit_target, fit / fit_target, fit / median);

    std::string file = "{\"type\":\"run\",\"workload\":\"lenet5@fashion-mnist\",\"nodes\":2,\"ranks\":4,"
                       "\"global_batch\":256,\"params\":61706,\"train_examples\":60000}\n";
    for (int t = 0; t < 10000; ++t) {
        file += "{\"type\":\"step\",\"step\":" + std::to_string(t) + ",\"seconds\":0.0123,\"examples\":256,\"loss\":0.5}\n";
        if ((t + 1) % 1000 == 0)
            file += "{\"type\":\"epoch\",\"epoch\":" + std::to_string((t + 1) / 1000) +
                    ",\"seconds\":12.3,\"test_accuracy\":0.8,\"train_loss\":0.5,\"noise_scale\":300}\n";
    }
    const double record_target = 100.0;
    int epochs = 0;
    const double record = median_ms(reps, ms, [&] {
        std::istringstream in(file);
        epochs = tula::read_metrics_run(in, "bench.jsonl").run.epochs;
    });
    const double rec_min = ms.front(), rec_max = ms.back();
    size_t objects = 0;
    const double anchor = median_ms(reps, ms, [&] {
        std::istringstream in(file);
        std::string line;
        while (std::getline(in, line)) objects += nlohmann::json::parse(line).size();
    });
    std::printf("bench-planner: metrics file of 10000 steps and %d epochs (%zu bytes) read into a run: median %.3f ms "
                "(min %.3f, max %.3f), target %.1f ms, ratio %.3f (<= 1 meets it); anchor (std::getline + "
                "nlohmann::json::parse of each line, no checks) %.3f ms, %.3f x the anchor\n",
                epochs, file.size(), record, rec_min, rec_max, record_target, record / record_target, anchor,
                record / anchor);
    bench_fit(11);
    return objects > 0 ? 0 : 1;
}
