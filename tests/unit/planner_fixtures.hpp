// Helpers of the planner unit tests (test_libtula_planner.cpp and test_libtula_plan_workload.cpp), written once.
#pragma once
#include <cppunit/extensions/HelperMacros.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "record_builders.hpp"
#include "test_util.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/planner.hpp"

namespace planner_test {

using tula_test::hand_epochs;

using tula_test::error_of;
using tula_test::contains;

using tula_test::TempDir;  // tests/unit/test_util.hpp
using tula_test::seconds_in_child;
using tula_test::thread_cpu_seconds;

// The plan of one partition: `req`'s implicit target (tula::implicit_target) with `compute` and
// `allreduce` (null: 1 node only), planned by tula::make_site_plan.
inline tula::Plan make_plan(const tula::PlanRequest& req, const tula::ComputeModel& compute,
                            const tula::AllreduceModel* allreduce) {
    return tula::make_site_plan(req, {tula::implicit_target(req, compute, allreduce)});
}

// Naive O(n^2) Pareto set: i is on the front unless some j is no worse in both and better in one.
inline std::set<size_t> naive_front(const std::vector<tula::Candidate>& c) {
    std::set<size_t> out;
    for (size_t i = 0; i < c.size(); ++i) {
        bool dominated = false;
        for (size_t j = 0; j < c.size() && !dominated; ++j)
            dominated = c[j].time_to_target <= c[i].time_to_target && c[j].cost_to_target <= c[i].cost_to_target &&
                        (c[j].time_to_target < c[i].time_to_target || c[j].cost_to_target < c[i].cost_to_target);
        if (!dominated) out.insert(i);
    }
    return out;
}

inline tula::Workload workload(int64_t params, int64_t train) {
    return tula_test::fmnist_workload("lenet5", params, train);
}

// A plan request for workload `w` over `epochs` epochs, node counts min_nodes..max_nodes and the
// global batches `batches`; everything else at PlanRequest's defaults.
inline tula::PlanRequest request(const tula::Workload& w, int epochs, int min_nodes, int max_nodes,
                                 std::vector<int> batches) {
    tula::PlanRequest r;
    r.workload = w;
    r.epochs = epochs;
    r.min_nodes = min_nodes;
    r.max_nodes = max_nodes;
    r.global_batches = std::move(batches);
    return r;
}

// The allreduce model alpha + n beta per step (seconds; alpha latency, beta seconds per byte).
inline tula::AllreduceModel alpha_beta(double alpha, double beta) {
    tula::AllreduceModel ar;
    ar.alpha = alpha;
    ar.beta = beta;
    return ar;
}

// The prediction for (K, B), written out from the formulas in planner.hpp/models.hpp.
inline double hand_total(int K, int B, int epochs, int64_t train, int64_t params, double t0, double t1, double alpha,
                  double beta) {
    const double b = static_cast<double>(B) / K;
    double iter = t0 + t1 * b;
    if (K > 1) iter += 2.0 * (K - 1) * alpha + 2.0 * (K - 1) / K * (4.0 * params) * beta;
    const double iters_per_epoch = std::floor(static_cast<double>(train) / B);  // full batches only
    return epochs * iters_per_epoch * iter;
}

// The profile database at `path`, opened read-write, with lenet5@fashion-mnist (61,706
// parameters, 60,000 training examples) in its workload table.
inline tula::ProfileDb lenet5_db(const std::string& path) {
    auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
    db.upsert_workload(workload(61706, 60000));
    return db;
}

// Exact linear compute samples of lenet5@fashion-mnist: t0 + t1 b seconds per iteration at
// each local batch b (the fit must reproduce t0, t1).
inline void add_linear_compute(tula::ProfileDb& db, std::initializer_list<int> local_batches, double t0, double t1) {
    for (int b : local_batches) {
        tula::ComputeSample c;
        c.workload = "lenet5@fashion-mnist";
        c.local_batch = b;
        c.seconds_per_iter = t0 + t1 * b;
        db.add_compute(c);
    }
}

// Exact ring-allreduce samples on 2-4 nodes, 4 KiB to 4 MiB: 2 (K-1) alpha + 2 (K-1)/K n beta
// seconds (alpha in seconds, beta in seconds per byte; the model of models.hpp), of hardware
// class `cls` ("" = unknown).
inline std::vector<tula::AllreduceSample> ring_samples(double alpha, double beta, const std::string& cls = "") {
    std::vector<tula::AllreduceSample> out;
    for (int k : {2, 3, 4})
        for (int64_t n : {int64_t(4096), int64_t(246824), int64_t(1) << 22}) {
            tula::AllreduceSample a;
            a.nodes = k;
            a.bytes = n;
            a.seconds = 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * n * beta;
            a.hardware_class = cls;
            out.push_back(a);
        }
    return out;
}

// ring_samples written to `db`.
inline void add_ring_allreduce(tula::ProfileDb& db, double alpha, double beta) {
    for (const auto& a : ring_samples(alpha, beta)) db.add_allreduce(a);
}

}  // namespace planner_test
