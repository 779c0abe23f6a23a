// tula-train: generic GEMM and the run-time dispatch. See gemm.hpp.
#include "cpu/gemm/gemm.hpp"

#include <Eigen/Core>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#define TULA_GEMM_FN gemm_generic
#define TULA_GEMM_THREADS_FN gemm_threads_generic
#include "cpu/gemm/gemm_impl.hpp"

namespace tula {
namespace train {

namespace detail {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define TULA_HAVE_GEMM_AVX2 1
// defined in gemm_avx2.cpp
void gemm_avx2(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c, bool acc);
void gemm_threads_avx2(int n);
// defined in gemm_avx512.cpp
void gemm_avx512(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c, bool acc);
void gemm_threads_avx512(int n);
#endif
}  // namespace detail

namespace {
int g_threads = 1;
}
// one thread until told otherwise (Eigen's default under OpenMP would be every core)
static const bool g_threads_init = (set_gemm_threads(1), true);

void set_gemm_threads(int n) {
    g_threads = n < 1 ? 1 : n;
    detail::gemm_threads_generic(g_threads);
#ifdef TULA_HAVE_GEMM_AVX2
    detail::gemm_threads_avx2(g_threads);
    detail::gemm_threads_avx512(g_threads);
#endif
}

int gemm_threads() {
#ifdef _OPENMP
    return g_threads;
#else
    return 1;
#endif
}

bool gemm_isa_available(GemmIsa isa) {
    if (isa == GemmIsa::Generic) return true;
#ifdef TULA_HAVE_GEMM_AVX2
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == GemmIsa::Avx2) return avx2;
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

GemmIsa gemm_isa() {
    static const GemmIsa chosen = [] {
        const char* env = std::getenv("TULA_TRAIN_ISA");
        if (env && std::strcmp(env, "generic") == 0) return GemmIsa::Generic;
        if (env && std::strcmp(env, "avx2") == 0 && gemm_isa_available(GemmIsa::Avx2)) return GemmIsa::Avx2;
        if (gemm_isa_available(GemmIsa::Avx512)) return GemmIsa::Avx512;
        return gemm_isa_available(GemmIsa::Avx2) ? GemmIsa::Avx2 : GemmIsa::Generic;
    }();
    return chosen;
}

std::string gemm_isa_name(GemmIsa isa) {
#if defined(__AVX2__) && defined(__FMA__)
    if (isa == GemmIsa::Generic) return "generic (built for avx2+fma)";
#endif
    return isa == GemmIsa::Avx512 ? "avx512" : isa == GemmIsa::Avx2 ? "avx2+fma" : "generic";
}

void gemm_with(GemmIsa isa, bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c,
               bool acc) {
#ifdef TULA_HAVE_GEMM_AVX2
    if (isa == GemmIsa::Avx2) {
        if (!gemm_isa_available(GemmIsa::Avx2)) throw std::runtime_error("gemm: this CPU has no AVX2+FMA");
        detail::gemm_avx2(ta, tb, m, n, k, a, b, c, acc);
        return;
    }
    if (isa == GemmIsa::Avx512) {
        if (!gemm_isa_available(GemmIsa::Avx512)) throw std::runtime_error("gemm: this CPU has no AVX-512 F+DQ");
        detail::gemm_avx512(ta, tb, m, n, k, a, b, c, acc);
        return;
    }
#else
    if (isa != GemmIsa::Generic) throw std::runtime_error("gemm: the AVX2 / AVX-512 kernels are not built for this target");
#endif
    detail::gemm_generic(ta, tb, m, n, k, a, b, c, acc);
}

void gemm(bool ta, bool tb, long m, long n, long k, const float* a, const float* b, float* c, bool acc) {
#ifdef TULA_HAVE_GEMM_AVX2
    static const GemmIsa isa = gemm_isa();
    if (isa == GemmIsa::Avx512) {
        detail::gemm_avx512(ta, tb, m, n, k, a, b, c, acc);
        return;
    }
    if (isa == GemmIsa::Avx2) {
        detail::gemm_avx2(ta, tb, m, n, k, a, b, c, acc);
        return;
    }
#endif
    detail::gemm_generic(ta, tb, m, n, k, a, b, c, acc);
}

}  // namespace train
}  // namespace tula
