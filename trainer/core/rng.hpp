// tula-train: the seeded random number generator (deterministic across platforms).
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tula {
namespace train {

/// std::mt19937_64 (whose output sequence the C++ standard fixes) with distributions
/// written here, not std::*_distribution (whose algorithms are implementation-defined),
/// so that one seed gives the same numbers with every standard library.
class Rng {
public:
    explicit Rng(uint64_t seed) : g_(seed) {}

    /// Uniform double in [0, 1), 53 random bits.
    double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
    /// Uniform double in [a, b).
    double uniform(double a, double b) { return a + (b - a) * uniform(); }
    /// Standard normal N(0, 1) by the Box-Muller transform (Box & Muller 1958), one value
    /// per call (the second value of the pair is discarded: simplicity over speed).
    double normal() {
        double u1 = uniform();
        while (u1 <= 0.0) u1 = uniform();
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    /// Uniform integer in [0, n), n > 0, unbiased (rejection sampling).
    uint64_t below(uint64_t n) {
        const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // multiple of n
        uint64_t x;
        do { x = g_(); } while (x >= limit);
        return x % n;
    }
    /// Shuffles v[0..n) in place (Fisher-Yates / Knuth algorithm P).
    template <class T>
    void shuffle(T* v, size_t n) {
        for (size_t i = n; i > 1; --i) {
            const size_t j = static_cast<size_t>(below(i));
            T t = v[i - 1]; v[i - 1] = v[j]; v[j] = t;
        }
    }

    /// The generator's state as text (the standard's textual representation of
    /// mt19937_64), for checkpoints.
    std::string state() const {
        std::ostringstream o;
        o << g_;
        return o.str();
    }
    /// Restores a state() string. Errors: std::invalid_argument when it does not parse.
    void set_state(const std::string& s) {
        std::istringstream in(s);
        std::mt19937_64 g;
        in >> g;
        if (in.fail()) throw std::invalid_argument("not a random generator state");
        g_ = g;
    }

private:
    std::mt19937_64 g_;
};

}  // namespace train
}  // namespace tula
