// tula-train: the GPU a rank uses (only built with the CUDA backend, TULA_HAVE_CUDA).
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "app/app.hpp"

namespace tula {
namespace train {
namespace app {

#ifdef TULA_HAVE_CUDA
// The GPU of this rank: the node-local rank (Open MPI's or Slurm's) modulo the number of
// devices. Throws std::runtime_error when no device can be used.
std::unique_ptr<cuda::GpuContext> open_gpu(const Options& o) {
    std::string why;
    const int n = cuda::device_count(&why);
    if (n <= 0) throw std::runtime_error("--device cuda: no usable CUDA device (" + why + "); use --device cpu");
    int local = 0;
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
        if (const char* e = std::getenv(v); e && *e) {
            local = std::atoi(e);
            break;
        }
    return std::make_unique<cuda::GpuContext>(local % n, !o.no_tf32, cuda::parse_precision(o.precision));
}
#endif

}  // namespace app
}  // namespace train
}  // namespace tula
