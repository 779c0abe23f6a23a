// tula-train: the matrix products of the CPU layers, dispatched at run time to Eigen
// compiled for the best instruction set the CPU has.
//
// Eigen chooses its SIMD kernels at compile time from the compiler's target flags. The
// project builds with plain -O2 (SSE2 on x86-64), which leaves about two thirds of a
// modern core's floating-point throughput unused in the GEMMs that dominate training. So
// the GEMMs are compiled three times: gemm.cpp with the build's flags (runs anywhere),
// gemm_avx2.cpp for AVX2+FMA and gemm_avx512.cpp for AVX-512 F+DQ (x86-64 with GCC only,
// each its own copy of Eigen in a renamed namespace so that nothing is shared with the
// generic copy); gemm() picks the best copy the CPU supports (__builtin_cpu_supports)
// unless TULA_TRAIN_ISA asks for less.
#pragma once
#include <string>

namespace tula {
namespace train {

/// C = op(A) * op(B)  (accumulate = false)  or  C += op(A) * op(B)  (accumulate = true),
/// all matrices row-major float32 and contiguous. C is (m, n). op(A) is (m, k): A is
/// stored (m, k), or (k, m) when trans_a (then op(A) = A^T); likewise op(B) is (k, n), B
/// stored (k, n) or (n, k) when trans_b. m, n, k >= 0. C must not overlap A or B.
void gemm(bool trans_a, bool trans_b, long m, long n, long k, const float* a, const float* b, float* c,
          bool accumulate);

/// The instruction sets gemm() can use.
enum class GemmIsa { Generic, Avx2, Avx512 };

/// The same product with a given implementation. Errors: std::runtime_error when `isa`
/// is not available on this CPU or in this build.
void gemm_with(GemmIsa isa, bool trans_a, bool trans_b, long m, long n, long k, const float* a, const float* b,
               float* c, bool accumulate);

/// Whether `isa` is compiled in and supported by this CPU.
bool gemm_isa_available(GemmIsa isa);
/// The implementation gemm() uses: Avx512 (a third copy of Eigen compiled for AVX-512 F+DQ,
/// Packet16f) when the CPU has it, else Avx2 when available; the environment variable
/// TULA_TRAIN_ISA = "generic" or "avx2" chooses the lesser one. Decided once per process.
GemmIsa gemm_isa();
/// Sets the threads every GEMM may use to n (>= 1; smaller values count as 1): Eigen's
/// OpenMP-parallel product (Eigen::setNbThreads) in both compiled copies. The other layers
/// run on one thread. Call before training, not concurrently with gemm().
void set_gemm_threads(int n);
/// The threads set_gemm_threads gave (1 by default, and always 1 in a build without OpenMP).
int gemm_threads();

/// "generic", "avx2+fma" or "avx512", for messages.
std::string gemm_isa_name(GemmIsa isa);

}  // namespace train
}  // namespace tula
