// tula-train: the GEMM compiled for AVX-512 (F and DQ, x86-64), chosen at run time by
// gemm.cpp; the same construction as gemm_avx2.cpp (read its comment), with Eigen's
// Packet16f kernels.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define TULA_GEMM_AVX512_BUILT 1

#include "cpu/gemm/gemm_std_headers.hpp"

#pragma GCC push_options
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c,avx512f,avx512dq")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define __AVX512F__ 1
#define __AVX512DQ__ 1
#define Eigen tula_eigen_avx512
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"  // in Eigen's AVX bfloat16 code
#pragma GCC diagnostic ignored "-Wunused-parameter"
// GCC 12's avx512fintrin.h: _mm512_undefined_ps() seen as uninitialized (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>

#define TULA_GEMM_FN gemm_avx512
#define TULA_GEMM_THREADS_FN gemm_threads_avx512
#include "cpu/gemm/gemm_impl.hpp"
#pragma GCC diagnostic pop

#pragma GCC pop_options

#elif defined(__AVX2__) && defined(__FMA__)
// The whole build already targets AVX2 or more (e.g. -march=native): the generic copy in
// gemm.cpp is built for it; this file contributes nothing.
#endif
