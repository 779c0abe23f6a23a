// tula-train: trains a CNN on Fashion-MNIST with MPI data parallelism and writes the
// measured times to the profile database; also the profiling modes of `tula profile`.
// See tula-train(1).
//
// Exit status: 0 success; 1 training failed (diverged, internal error; or a profiling
// mode could not write its rows); 2 bad usage or bad input (unknown model, batch not
// divisible by the ranks, missing / truncated dataset file, unusable checkpoint); 3 stopped
// by SIGTERM / SIGUSR1 after writing a checkpoint.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "app/app.hpp"
#include "cpu/gemm/gemm.hpp"

using namespace tula::train;
using namespace tula::train::app;

int main(int argc, char** argv) {
    // Eigen allocates its GEMM packing buffers on every product; keep freed memory in the
    // heap (no mmap / munmap and page faults per call). glibc-specific, harmless elsewhere.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    Comm comm(&argc, &argv);
    const bool root = comm.rank() == 0;
    int rc = 0;
    try {
        Options o;
        rc = parse_args(argc, argv, o, root);
        if (rc < 0) set_gemm_threads(o.threads);
        if (rc < 0) {
            if (o.list_models) rc = root ? list_models(o) : 0;
            else if (o.profile_compute) rc = profile_compute(o, comm);
            else if (o.profile_allreduce) rc = profile_allreduce(o, comm);
            else rc = run_training(o, comm);
        }
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "%s\n",
                     msg("rank " + std::to_string(comm.rank()) +
                         ": out of memory; use a smaller --batch-size (or --batch-sizes)")
                         .c_str());
        comm.abort(1);
    } catch (const std::exception& e) {
        // Unexpected and possibly on this rank only: end every rank so none waits forever.
        std::fprintf(stderr, "%s\n", msg(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what()).c_str());
        comm.abort(1);
    }
    std::fflush(stdout);
    comm.finalize();
    return rc;
}
