// tula-train: the communicator of data-parallel training: MPI when built with
// TULA_HAVE_MPI and started by an MPI launcher, otherwise one serial rank.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tula {
namespace train {

/// Ranks, collective sums and broadcasts. One instance per process.
/// With TULA_HAVE_MPI, Comm(argc, argv) initializes MPI (MPI_Init) when the process was
/// started by an MPI launcher (mpirun / mpiexec / srun with PMI: the environment has
/// OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK) and finalizes it in the destructor; a
/// process started directly runs as one serial rank without touching MPI (no singleton
/// start-up cost). Without TULA_HAVE_MPI it is always serial.
/// All collectives must be called by every rank in the same order (MPI semantics).
class Comm {
public:
    /// Starts MPI as described above, at MPI_THREAD_FUNNELED (only the main thread calls MPI;
    /// the prefetching loader's thread never does). Errors: none reported; MPI errors abort
    /// the job (MPI_ERRORS_ARE_FATAL).
    Comm(int* argc, char*** argv);
    /// A serial communicator (size 1), never touching MPI; for tests and tools.
    Comm();
    ~Comm();
    Comm(const Comm&) = delete;
    Comm& operator=(const Comm&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    /// Nodes the ranks run on: distinct shared-memory domains (MPI_Comm_split_type with
    /// MPI_COMM_TYPE_SHARED), 1 for the serial rank; when all ranks share one host but the
    /// Slurm job has SLURM_JOB_NUM_NODES = N > 1 nodes and N divides the ranks (Slurm nodes
    /// on one host, as the local cluster's shared mode has them), N.
    int nodes() const { return nodes_; }
    /// Most ranks on one node (size() / nodes() when every node has as many), 1 when serial.
    int ranks_per_node() const { return ranks_per_node_; }
    /// Whether MPI is in use (false for the serial rank).
    bool mpi() const { return mpi_; }

    /// In-place elementwise sum over ranks of buf[0..n) (MPI_Allreduce with MPI_IN_PLACE,
    /// MPI_SUM); n may exceed INT_MAX (done in chunks).
    void allreduce_sum(float* buf, size_t n);
    void allreduce_sum(double* buf, size_t n);
    /// In-place elementwise maximum over ranks.
    void allreduce_max(double* buf, size_t n);
    /// buf[0..n) of rank `root` copied to every rank.
    void broadcast(float* buf, size_t n, int root = 0);
    void barrier();
    /// Starts a non-blocking in-place sum over ranks of buf[0..n) (MPI_Iallreduce with
    /// MPI_IN_PLACE, MPI_SUM; chunks of at most INT_MAX/2 values). buf must stay valid and
    /// untouched until wait_all(). Every rank must start the same sequence of reductions.
    /// No-op for a single rank.
    void iallreduce_sum(float* buf, size_t n);
    /// Lets the MPI library progress the started reductions (MPI_Testall); returns without
    /// waiting. Call it between pieces of computation to overlap communication with them.
    void progress();
    /// Waits until every reduction started by iallreduce_sum has completed (MPI_Waitall).
    void wait_all();
    /// Ends every rank of the job with exit status `code` (MPI_Abort), or exits this
    /// process when serial. Use after printing a fatal error mid-run so no rank hangs.
    [[noreturn]] void abort(int code);
    /// Ends MPI early (MPI_Finalize) so that the process may exit; idempotent.
    void finalize();

private:
    int rank_ = 0;
    int size_ = 1;
    int nodes_ = 1;
    int ranks_per_node_ = 1;
    bool mpi_ = false;
    bool finalized_ = false;
    struct Pending;                    // the outstanding MPI requests (defined in comm.cpp)
    std::unique_ptr<Pending> pending_;
};

}  // namespace train
}  // namespace tula
