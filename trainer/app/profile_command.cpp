// tula-train: the data and database helpers of the commands, --list-models and the profiling modes (--profile-compute, --profile-allreduce).
#include <CLI/CLI.hpp>

#include <malloc.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "train/checkpoint.hpp"
#include "dist/comm.hpp"
#include "data/data.hpp"
#include "cpu/gemm/gemm.hpp"
#include "train/metrics.hpp"
#include "dist/local_sgd.hpp"
#include "core/model.hpp"
#include "optim/optim.hpp"
#include "train/train.hpp"
#include "tula/conf.hpp"
#include "tula/error.hpp"
#include "tula/workload.hpp"
#ifdef TULA_HAVE_CUDA
#include "gpu_train.hpp"
#endif

#include "app/app.hpp"

namespace tula {
namespace train {
namespace app {

// The data set's name in workload names: "cifar10" / "cifar100" without the directory; a
// synthetic set's spec with '-' for ':' (synthetic-1x28x28-10: a workload name has letters,
// digits, _ . - only); else --data as given.
std::string data_name(const Options& o) {
    if (is_cifar(o.data)) return "cifar" + std::to_string(parse_cifar(o.data).classes);
    if (is_synthetic(o.data)) {
        std::string d = o.data;
        std::replace(d.begin(), d.end(), ':', '-');
        return d;
    }
    return o.data;
}

// The workload's row: the data set's full sizes (from the IDX headers), even when this run
// used --limit-train / --limit-test, since the planner computes epochs from them.
tula::Workload workload_of(const Options& o, const Model& m, int64_t train_n, int64_t test_n) {
    if ((o.limit_train > 0 || o.limit_test > 0) && is_cifar(o.data)) {
        train_n = 50000;  // both CIFARs: 50,000 training and 10,000 test images
        test_n = 10000;
    } else if ((o.limit_train > 0 || o.limit_test > 0) && !is_synthetic(o.data)) {
        train_n = fashion_mnist_count(o.data_dir, true);
        test_n = fashion_mnist_count(o.data_dir, false);
    }
    tula::Workload w;
    w.model = o.model;
    w.dataset = data_name(o);
    w.name = tula::workload_name(o.model, data_name(o));
    w.params = static_cast<int64_t>(m.num_params());
    w.train_examples = train_n;
    w.test_examples = test_n;
    w.activation_floats = static_cast<int64_t>(m.activation_floats_per_example());
    return w;
}

// Example shape and class count of --data (Fashion-MNIST: 1x28x28, 10 classes).
SyntheticSpec input_of(const Options& o) {
    if (is_synthetic(o.data)) return parse_synthetic(o.data);
    if (is_cifar(o.data)) return SyntheticSpec{Shape{3, 32, 32}, parse_cifar(o.data).classes};
    return SyntheticSpec{Shape{1, 28, 28}, 10};
}

// The training (train = true) or test set of --data; a synthetic set has --limit-train
// (default 10,000) / --limit-test (default 1,000) random images. Errors: DataError.
Dataset load_set(const Options& o, bool train) {
    if (is_synthetic(o.data)) {
        const int64_t lim = train ? o.limit_train : o.limit_test;
        const int n = lim > 0 ? static_cast<int>(std::min<int64_t>(lim, 1 << 30)) : (train ? 10000 : 1000);
        return make_synthetic(parse_synthetic(o.data), n, o.seed + (train ? 1 : 2));
    }
    if (is_cifar(o.data)) return load_cifar(parse_cifar(o.data), train, train ? o.limit_train : o.limit_test);
    return load_fashion_mnist(o.data_dir, train, train ? o.limit_train : o.limit_test);
}

// Loads both data sets on every rank. On failure anywhere, every rank learns it (one
// allreduce) and the caller exits 2 on all ranks; the failing ranks print why.
bool load_data(const Options& o, Comm& comm, Dataset& tr, Dataset& te) {
    std::string err;
    try {
        tr = load_set(o, true);
        te = load_set(o, false);
    } catch (const std::exception& e) {
        err = e.what();
    }
    double fail[2] = {err.empty() ? 0.0 : 1.0, (!err.empty() && comm.rank() == 0) ? 1.0 : 0.0};
    comm.allreduce_sum(fail, 2);
    if (fail[0] == 0) {
        if (is_cifar(o.data)) {  // normalize both sets with the training set's pixel statistics
            double m = 0, sd = 1;
            pixel_stats(tr, &m, &sd);
            if (!(sd > 0)) sd = 1;
            tr.mean = te.mean = static_cast<float>(m);
            tr.std = te.std = static_cast<float>(sd);
        }
        return true;
    }
    // rank 0's message suffices when it failed too; otherwise each failing rank speaks
    if (!err.empty() && (comm.rank() == 0 || fail[1] == 0)) {
        const std::string who = comm.size() > 1 && comm.rank() != 0 ? "rank " + std::to_string(comm.rank()) + ": " : "";
        std::fprintf(stderr, "%s\n", msg(who + err).c_str());
        std::fflush(stderr);
    }
    return false;
}

// Name and parameter count of every model for the example shape and classes of --data.
int list_models(const Options& o) {
    const SyntheticSpec in = input_of(o);
    std::printf("models for %s input, %d classes:\n", in.shape.str().c_str(), in.classes);
    for (const auto& n : model_names()) {
        try {
            std::printf("%-18s %zu parameters\n", n.c_str(), count_model_params(n, in.shape, in.classes));
        } catch (const std::exception& e) {
            std::printf("%-18s (does not fit: %s)\n", n.c_str(), e.what());
        }
    }
    return 0;
}

// --profile-compute: seconds per training step at each --batch-sizes local batch. On one
// rank it times alone. Under mpirun -np P (P ranks, R of them on each node) every rank
// times the same steps at the same time, every step started together, and the mean of each
// step's slowest rank is recorded with ranks = P and ranks_per_node = R (ComputeSample): what
// a synchronous step waits for when its ranks share hardware. Rank 0 writes the samples.
int profile_compute(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    const std::string wl = tula::workload_name(o.model, data_name(o));
    const int ranks = comm.size();
    int rc = 0;
    Dataset tr, te;
    try {
        tr = load_set(o, true);
        te = load_set(o, false);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", msg(e.what()).c_str());  // whichever rank it is: it may be the only one
        rc = 2;
    }
    {
        double r = rc;
        comm.allreduce_max(&r, 1);  // every rank stops when one cannot read the data
        if (r != 0) return static_cast<int>(r);
    }
    std::vector<nlohmann::json> lines;  // the "profile" lines, one per batch size
    RunShape shape;
    shape.nodes = comm.nodes() > 0 ? comm.nodes() : 1;
    shape.ranks = ranks;
    if (root) {
        std::string class_warning;
        shape.hardware_class = tula::hardware_class_from_env(&class_warning);
        if (!class_warning.empty()) warn(class_warning);
    }
    auto model = build_model(o.model, input_of(o).shape, input_of(o).classes);
    model->init(o.seed);
#ifdef TULA_HAVE_CUDA
    std::unique_ptr<cuda::GpuContext> gpu;
    {
        std::string why;
        try {
            if (o.device == "cuda") gpu = open_gpu(o);
        } catch (const std::exception& e) {
            why = e.what();
        }
        double r = why.empty() ? 0 : 2;
        if (!why.empty()) std::fprintf(stderr, "%s\n", msg(why).c_str());
        comm.allreduce_max(&r, 1);
        if (r != 0) return 2;
    }
#endif
    say(root, "profile " + wl + ": " +
                  (o.device == "cuda" ? "GPU (cuda, " + o.precision + ")"
                                      : std::to_string(gemm_threads()) + " thread(s), matrix kernels " +
                                            std::string(gemm_isa_name(gemm_isa()))) +
                  ", host " + host_name() +
                  (ranks > 1 ? ", " + std::to_string(ranks) + " ranks at once (each step at its slowest rank)" : ""));
    bool fresh = true;  // the process's first batch size: its warm-up steps are a run's start-up
    for (int b : o.batch_sizes) {
        int timed = o.iters;
        double startup = std::numeric_limits<double>::quiet_NaN();
        comm.barrier();  // the ranks start each batch size together
#ifdef TULA_HAVE_CUDA
        double s = gpu ? cuda::time_compute_step_gpu(*gpu, *model, tr, b, 3, o.iters)
                       : time_compute_step(*model, tr, b, 3, o.iters, o.min_time, &timed, &startup, &comm);
#else
        double s = time_compute_step(*model, tr, b, 3, o.iters, o.min_time, &timed, &startup, &comm);
#endif
        comm.allreduce_max(&s, 1);  // the GPU path times each rank alone (the CPU path's s is already the same)
        // start-up: measured alone in a fresh process only (see ComputeSample)
        if (!fresh || ranks > 1) startup = std::numeric_limits<double>::quiet_NaN();
        fresh = false;
        // with several ranks on the CPU, also the whole data-parallel step as a job takes it
        double synced = std::numeric_limits<double>::quiet_NaN();
        if (ranks > 1 && o.device != "cuda" && static_cast<int64_t>(b) * ranks <= tr.count)
            synced = time_synced_step(*model, tr, b, 3, o.iters, o.min_time, comm,
                                      static_cast<size_t>(o.bucket_mb * 1048576.0));
        say(root, "profile " + wl + ": local batch " + std::to_string(b) + ": " + fmt("%.2f", s * 1e3) + " ms/iter (" +
                      std::to_string(timed) + " iters" + (ranks > 1 ? ", slowest of " + std::to_string(ranks) + " ranks" : "") +
                      (std::isfinite(startup) ? ", start-up " + fmt("%.3f", startup) + " s" : "") + ")" +
                      (std::isfinite(synced) ? "; synchronized step with its allreduce " + fmt("%.2f", synced * 1e3) + " ms" : ""));
        nlohmann::json l = {{"type", "profile"}, {"local_batch", b}, {"seconds", s}, {"steps", timed},
                            {"threads", gemm_threads()}};
        if (std::isfinite(startup)) l["startup_seconds"] = startup;
        if (std::isfinite(synced)) l["synced_seconds"] = synced;
        lines.push_back(l);
    }
    if (root) {
        // ranks that share the nodes unevenly are recorded as one rank per node
        const int per_node = comm.ranks_per_node() > 0 && ranks % comm.ranks_per_node() == 0 ? comm.ranks_per_node() : 1;
        shape.nodes = ranks / per_node;
        nlohmann::json header = run_header(o, shape, *model, tr, te);
        for (const char* k : {"global_batch", "epochs", "steps_per_epoch", "seed", "optimizer"}) header.erase(k);
        if (!finish_file(o, o.metrics, [&](MetricsLog& f) {
                f.write(header);
                for (const auto& l : lines) f.write(l);
            }, "compute profile"))
            rc = 1;
    }
    double r = rc;
    comm.allreduce_max(&r, 1);  // the other ranks share rank 0's exit status
    return static_cast<int>(r);
}

int profile_allreduce(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    if (comm.size() < 2) {
        say(root, "tula-train: --profile-allreduce: only 1 rank, nothing to measure (start it with mpirun -np K, K >= 2)");
        return 0;
    }
    // The shape recorded (AllreduceSample): K nodes of R ranks each. All ranks on one node (R >= 2
    // ranks through shared memory) is the within-node profile, nodes = 1; one rank per node the
    // across-node one, nodes = K.
    const int nodes = comm.nodes(), per_node = comm.ranks_per_node();
    if (nodes < 1 || per_node < 1 || nodes * per_node != comm.size()) {
        if (root)
            std::fprintf(stderr, "%s\n",
                         msg("--profile-allreduce: the " + std::to_string(comm.size()) + " ranks are not spread evenly over " +
                             std::to_string(nodes) + " nodes (at most " + std::to_string(per_node) +
                             " on one); start the same number of ranks on every node")
                             .c_str());
        return 1;
    }
    std::vector<int64_t> sizes = o.sizes;
    if (!o.model.empty()) sizes.push_back(4 * static_cast<int64_t>(count_model_params(o.model, input_of(o).shape, input_of(o).classes)));
    std::vector<nlohmann::json> lines;  // the "allreduce" lines, one per size
    std::string hardware_class;
    if (root) {
        std::string class_warning;
        hardware_class = tula::hardware_class_from_env(&class_warning);
        if (!class_warning.empty()) warn(class_warning);
    }
    for (int64_t bytes : sizes) {
        const double s = time_allreduce(comm, bytes, 3, 20);
        say(root, "profile allreduce: " + std::to_string(comm.size()) + " ranks, " + std::to_string(bytes) +
                      " bytes: " + fmt("%.3f", s * 1e3) + " ms (20 iters)");
        lines.push_back({{"type", "allreduce"}, {"bytes", bytes}, {"seconds", s}, {"iters", 20}});
    }
    int rc = 0;
    if (root) {
        const nlohmann::json header = {{"type", "run"}, {"nodes", nodes}, {"ranks", comm.size()},
                                       {"hardware_class", hardware_class}, {"host", host_name()}};
        if (!finish_file(o, o.metrics, [&](MetricsLog& f) {
                f.write(header);
                for (const auto& l : lines) f.write(l);
            }, "allreduce profile"))
            rc = 1;
    }
    double r = rc;
    comm.allreduce_max(&r, 1);
    return static_cast<int>(r);
}

}  // namespace app
}  // namespace train
}  // namespace tula
