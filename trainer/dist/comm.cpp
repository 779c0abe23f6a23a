// tula-train: Comm, MPI or serial. See comm.hpp.
#include "dist/comm.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef TULA_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // C bindings only (the C++ ones are deprecated and warn)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tula {
namespace train {

namespace {
#ifdef TULA_HAVE_MPI
bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
        if (std::getenv(v)) return true;
    return false;
}
constexpr size_t kChunk = static_cast<size_t>(INT_MAX) / 2;
MPI_Datatype mpi_type(const float*) { return MPI_FLOAT; }
MPI_Datatype mpi_type(const double*) { return MPI_DOUBLE; }
#endif

// In-place elementwise sum (or maximum when `max`) over the ranks of MPI_COMM_WORLD of
// buf[0, n), in chunks of at most kChunk values (MPI counts are int); nothing unless `active`.
template <class T>
void allreduce_in_place(bool active, T* buf, size_t n, bool max) {
#ifdef TULA_HAVE_MPI
    if (!active) return;
    for (size_t o = 0; o < n; o += kChunk)
        MPI_Allreduce(MPI_IN_PLACE, buf + o, static_cast<int>(std::min(kChunk, n - o)), mpi_type(buf),
                      max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
#else
    (void)active;
    (void)buf;
    (void)n;
    (void)max;
#endif
}
}  // namespace

struct Comm::Pending {
#ifdef TULA_HAVE_MPI
    std::vector<MPI_Request> req;
#endif
};

Comm::Comm() : pending_(new Pending) {}

Comm::Comm(int* argc, char*** argv) : pending_(new Pending) {
#ifdef TULA_HAVE_MPI
    if (!launched_by_mpi()) return;
    int inited = 0;
    MPI_Initialized(&inited);
    int provided = 0;  // FUNNELED: the loader thread (prefetch.hpp) exists but never calls MPI
    if (!inited) MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    mpi_ = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (size_ > 1) {
        // Ranks that share memory share a node (MPI_COMM_TYPE_SHARED); the nodes are the
        // ranks that are rank 0 of their node's communicator, counted over the job.
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
        int local_rank = 0, leader = 0;
        MPI_Comm_rank(local, &local_rank);
        MPI_Comm_size(local, &ranks_per_node_);
        MPI_Comm_free(&local);
        leader = local_rank == 0 ? 1 : 0;
        MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int most = ranks_per_node_;
        MPI_Allreduce(&ranks_per_node_, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        ranks_per_node_ = most;
        // Slurm nodes that share one host (the local cluster's shared mode, every node at
        // 127.0.0.1) are one shared-memory domain: then Slurm's node count of the job, when it
        // divides the ranks, is the node count (a bounded integer of the environment).
        const char* slurm_nodes = std::getenv("SLURM_JOB_NUM_NODES");
        const long n = slurm_nodes ? std::strtol(slurm_nodes, nullptr, 10) : 0;
        if (nodes_ == 1 && n > 1 && n <= size_ && size_ % n == 0) {
            nodes_ = static_cast<int>(n);
            ranks_per_node_ = size_ / nodes_;
        }
    }
#else
    (void)argc;
    (void)argv;
#endif
}

Comm::~Comm() { finalize(); }

void Comm::finalize() {
#ifdef TULA_HAVE_MPI
    if (mpi_ && !finalized_) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
#endif
    finalized_ = true;
}

void Comm::allreduce_sum(float* buf, size_t n) { allreduce_in_place(mpi_ && size_ > 1, buf, n, false); }
void Comm::allreduce_sum(double* buf, size_t n) { allreduce_in_place(mpi_ && size_ > 1, buf, n, false); }
void Comm::allreduce_max(double* buf, size_t n) { allreduce_in_place(mpi_ && size_ > 1, buf, n, true); }

void Comm::broadcast(float* buf, size_t n, int root) {
#ifdef TULA_HAVE_MPI
    if (!mpi_ || size_ == 1) return;
    for (size_t o = 0; o < n; o += kChunk)
        MPI_Bcast(buf + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, root, MPI_COMM_WORLD);
#else
    (void)buf;
    (void)n;
    (void)root;
#endif
}

void Comm::iallreduce_sum(float* buf, size_t n) {
#ifdef TULA_HAVE_MPI
    if (!mpi_ || size_ == 1) return;
    for (size_t o = 0; o < n; o += kChunk) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, buf + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &r);
        pending_->req.push_back(r);
    }
#else
    (void)buf;
    (void)n;
#endif
}

void Comm::progress() {
#ifdef TULA_HAVE_MPI
    if (pending_->req.empty()) return;
    int done = 0;
    MPI_Testall(static_cast<int>(pending_->req.size()), pending_->req.data(), &done, MPI_STATUSES_IGNORE);
    if (done) pending_->req.clear();
#endif
}

void Comm::wait_all() {
#ifdef TULA_HAVE_MPI
    if (pending_->req.empty()) return;
    MPI_Waitall(static_cast<int>(pending_->req.size()), pending_->req.data(), MPI_STATUSES_IGNORE);
    pending_->req.clear();
#endif
}

void Comm::barrier() {
#ifdef TULA_HAVE_MPI
    if (mpi_ && size_ > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

void Comm::abort(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
#ifdef TULA_HAVE_MPI
    if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    finalize();
    std::exit(code);
}

}  // namespace train
}  // namespace tula
