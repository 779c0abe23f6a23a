// tula-train: the GEMM compiled for AVX2+FMA (x86-64), chosen at run time by gemm.cpp.
//
// How: every standard header Eigen uses is included first, with the build's flags, so
// their inline functions are NOT compiled for AVX2 (they might otherwise be merged by the
// linker into code that runs on CPUs without it). Then, for the rest of this file only,
// `#pragma GCC target("avx2,fma")` and the feature macros GCC's command-line flags would
// define (GCC does not define them for the pragma in C++; Eigen reads them to choose its
// Packet8f kernels), and `#define Eigen tula_eigen_avx2`, so this copy of Eigen has
// symbols of its own. The only entry point is detail::gemm_avx2 (raw pointers).
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define TULA_GEMM_AVX2_BUILT 1

#include "cpu/gemm/gemm_std_headers.hpp"

#pragma GCC push_options
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define Eigen tula_eigen_avx2
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"  // in Eigen's AVX bfloat16 code
#include <Eigen/Core>
#pragma GCC diagnostic pop

#define TULA_GEMM_FN gemm_avx2
#define TULA_GEMM_THREADS_FN gemm_threads_avx2
#include "cpu/gemm/gemm_impl.hpp"

#pragma GCC pop_options

#elif defined(__AVX2__) && defined(__FMA__)
// The whole build already targets AVX2+FMA (e.g. -march=native): the generic copy in
// gemm.cpp is that code; this file contributes nothing.
#endif
