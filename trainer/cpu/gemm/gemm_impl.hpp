// tula-train: body of the GEMM entry point, included by gemm.cpp (generic) and
// gemm_avx2.cpp (AVX2+FMA) with TULA_GEMM_FN set to the function name. Eigen must be
// included before (as namespace `Eigen`, which gemm_avx2.cpp renames by macro).
// Not a public header.

namespace tula {
namespace train {
namespace detail {

void TULA_GEMM_FN(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c, bool acc) {
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using CMap = Eigen::Map<const RowMat>;
    Eigen::Map<RowMat> C(c, m, n);
    if (k == 0) {
        if (!acc) C.setZero();
        return;
    }
    // A stored (m, k) or (k, m); B stored (k, n) or (n, k); the transposes are views.
    const CMap A(a, ta ? k : m, ta ? m : k);
    const CMap B(b, tb ? n : k, tb ? k : n);
#define TULA_GEMM_CASE(EA, EB)           \
    if (acc) C.noalias() += (EA) * (EB); \
    else C.noalias() = (EA) * (EB);
    if (!ta && !tb) {
        TULA_GEMM_CASE(A, B)
    } else if (!ta && tb) {
        TULA_GEMM_CASE(A, B.transpose())
    } else if (ta && !tb) {
        TULA_GEMM_CASE(A.transpose(), B)
    } else {
        TULA_GEMM_CASE(A.transpose(), B.transpose())
    }
#undef TULA_GEMM_CASE
}

// Threads of this copy of Eigen's GEMM (OpenMP; 1 without -fopenmp).
void TULA_GEMM_THREADS_FN(int n) { Eigen::setNbThreads(n); }

}  // namespace detail
}  // namespace train
}  // namespace tula
