// tula-train: the first job measures itself (TULA_PROFILE, tula-jobs(7)): before training, the
// step is timed at a few local batches around the job's own on a throwaway copy of the model,
// and recorded as compute samples of the job's hardware class, so that the next submission of
// a workload nobody profiled can be planned. Each sample carries its start-up as `tula profile
// compute` records it: the seconds the batch's warm-up step took beyond a steady step.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "cpu/gemm/gemm.hpp"
#include "dist/comm.hpp"
#include "train/metrics.hpp"
#include "train/train.hpp"
#include "tula/conf.hpp"

#include "app/app.hpp"

namespace tula {
namespace train {
namespace app {

namespace {

// Seconds on a steady clock.
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Warm-up and timed steps per local batch: a handful, as the contract says.
constexpr int kWarmupSteps = 1, kTimedSteps = 3;

// The local batches measured for local batch b: b/4, b/2, b, 2b (at least 1, at most the
// training set), ascending, each once.
std::vector<int> measured_batches(int b, int64_t examples) {
    std::vector<int> out;
    for (const int x : {b / 4, b / 2, b, 2 * b}) {
        const int v = static_cast<int>(std::min<int64_t>(std::max(1, x), examples));
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

double measure_budget(const char* value, std::optional<double> time_left, std::string* why) {
    if (!value || !*value || std::string(value) == "0" || std::string(value) == "no") return 0.0;
    double cap = kMeasureSeconds;
    if (std::string(value) != "1" && std::string(value) != "yes") {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(value, &end);
        if (errno != 0 || !end || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 3600) {
            if (why)
                *why = "TULA_PROFILE='" + std::string(value).substr(0, 40) +
                       "' is not 1, yes, 0, no or seconds in (0, 3600]; the step is not measured";
            return 0.0;
        }
        cap = v;
    }
    if (time_left && *time_left > 0) cap = std::min(cap, kMeasureShare * *time_left);
    return cap;
}

void measure_before_training(const Options& o, Comm& comm, const Model& trained, const Dataset& tr, const Dataset& te,
                             bool resume) {
    const bool root = comm.rank() == 0;
    std::string why;
    double budget = 0;
    if (root) {
        const char* v = std::getenv("TULA_PROFILE");
        budget = v && *v && !resume ? measure_budget(v, job_time_left(), &why) : 0.0;
        if (!why.empty()) warn(why);
    }
    comm.allreduce_max(&budget, 1);  // rank 0's verdict
    if (!(budget > 0)) return;
    if (o.device == "cuda" || o.local_steps > 0) {
        say(root, "tula-train: TULA_PROFILE: the step is measured on the CPU path of synchronous SGD only; not measured");
        return;
    }
    const int ranks = comm.size();
    const int b = std::max(1, o.batch / std::max(1, ranks));
    const std::vector<int> batches = measured_batches(b, tr.count);
    const std::string wl = tula::workload_name(o.model, data_name(o));
    say(root, "tula-train: measuring the step of " + wl + " before training (TULA_PROFILE, at most " +
                  fmt("%.0f", budget) + " s): local batches " + [&] {
                      std::string s;
                      for (int x : batches) s += (s.empty() ? "" : ", ") + std::to_string(x);
                      return s;
                  }() + ", " + std::to_string(kTimedSteps) + " steps each, on a copy of the model");
    // a throwaway model: the one trained keeps its initial weights, and the training its result
    auto scratch = build_model(o.model, input_of(o).shape, input_of(o).classes);
    scratch->init(o.seed);
    std::vector<nlohmann::json> lines;
    const double start = now_seconds();
    double last_seconds = 0;
    int last_batch = 0;
    for (const int x : batches) {
        // every rank takes the same decision: rank 0's clock and estimates, shared
        double spent = now_seconds() - start;
        comm.allreduce_max(&spent, 1);
        const double estimate = last_batch > 0 ? (kWarmupSteps + kTimedSteps) * last_seconds * x / last_batch : 0.0;
        if (spent + estimate > budget) {
            say(root, "tula-train: local batch " + std::to_string(x) + " not measured: it would pass the budget of " +
                          fmt("%.0f", budget) + " s");
            break;
        }
        double seconds = std::numeric_limits<double>::quiet_NaN(), startup = seconds, failed = 0;
        std::string error;
        comm.barrier();  // the ranks time each batch together, each alone (no collective inside)
        try {
            seconds = time_compute_step(*scratch, tr, x, kWarmupSteps, kTimedSteps, 0, nullptr, &startup);
        } catch (const std::bad_alloc&) {
            error = "out of memory";
        } catch (const std::exception& e) {
            error = e.what();
        }
        if (!error.empty() || !std::isfinite(seconds) || seconds <= 0) failed = 1;
        if (!error.empty()) warn("TULA_PROFILE: local batch " + std::to_string(x) + " not measured: " + error);
        double agg[3] = {failed, failed ? 0.0 : seconds, std::isfinite(startup) && startup >= 0 ? startup : -1.0};
        comm.allreduce_max(agg, 3);  // the slowest rank's step and start-up; skipped where any rank failed
        if (agg[0] > 0) continue;
        last_seconds = agg[1];
        last_batch = x;
        say(root, "tula-train: measured local batch " + std::to_string(x) + ": " + fmt("%.2f", agg[1] * 1e3) +
                      " ms per step (" + std::to_string(kTimedSteps) + " steps" +
                      (ranks > 1 ? ", slowest of " + std::to_string(ranks) + " ranks" : "") +
                      (agg[2] >= 0 ? ", start-up " + fmt("%.3f", agg[2]) + " s" : "") + ")");
        nlohmann::json l = {{"type", "profile"}, {"local_batch", x}, {"seconds", agg[1]}, {"steps", kTimedSteps},
                            {"threads", gemm_threads()}};
        if (agg[2] >= 0) l["startup_seconds"] = agg[2];
        lines.push_back(l);
    }
    scratch.reset();
    if (!root) return;
    if (lines.empty()) {
        warn("TULA_PROFILE: no local batch could be measured; the job trains as asked");
        return;
    }
    RunShape shape;
    const int per_node = comm.ranks_per_node() > 0 && ranks % comm.ranks_per_node() == 0 ? comm.ranks_per_node() : 1;
    shape.ranks = ranks;
    shape.nodes = ranks / per_node;
    std::string class_warning;  // said once already, by the run's own header
    shape.hardware_class = tula::hardware_class_from_env(&class_warning);
    nlohmann::json header = run_header(o, shape, trained, tr, te);
    for (const char* k : {"global_batch", "epochs", "steps_per_epoch", "seed", "optimizer"}) header.erase(k);
    const bool ok = finish_file(o, "", [&](MetricsLog& f) {
        f.write(header);
        for (const auto& l : lines) f.write(l);
    }, "compute profile");
    say(true, "tula-train: measured " + std::to_string(lines.size()) + " local batch(es) in " +
                  fmt("%.1f", now_seconds() - start) + " s" +
                  (ok && !o.no_db ? ", recorded as compute samples of " + wl : o.no_db ? " (--no-db: not recorded)" : "") +
                  "; training starts");
}

}  // namespace app
}  // namespace train
}  // namespace tula
