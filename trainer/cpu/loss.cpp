// tula-train: the softmax cross-entropy loss on the CPU. See core/layers.hpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/common.hpp"

namespace tula {
namespace train {

using namespace cpu;

// ---- loss ------------------------------------------------------------------------------

double SoftmaxCrossEntropy::forward(const Tensor& logits, const int* labels, int n, int64_t* correct) {
    if (logits.n != n) throw std::invalid_argument("softmax cross-entropy: " + std::to_string(n) + " labels for logits " +
                                                   logits.str());
    const int k = static_cast<int>(logits.sample_size());
    prob_.resize(n, k, 1, 1);
    labels_.assign(labels, labels + n);
    double loss = 0;
    int64_t right = 0;
    for (int i = 0; i < n; ++i) {
        const int y = labels[i];
        if (y < 0 || y >= k)
            throw std::invalid_argument("softmax cross-entropy: label " + std::to_string(y) + " outside [0, " +
                                        std::to_string(k) + ")");
        const float* z = logits.sample(i);
        float* p = prob_.sample(i);
        int arg = 0;
        for (int j = 1; j < k; ++j)
            if (z[j] > z[arg]) arg = j;
        const float zmax = z[arg];
        double s = 0;
        for (int j = 0; j < k; ++j) {
            p[j] = std::exp(z[j] - zmax);
            s += p[j];
        }
        const float inv = static_cast<float>(1.0 / s);
        for (int j = 0; j < k; ++j) p[j] *= inv;
        const double lse = std::log(s);
        double nll = lse - (z[y] - zmax);  // -log softmax(z)[y]
        if (smoothing_ > 0) {               // -sum_j q_j log p_j with q = (1-eps) onehot + eps/K
            double all = 0;
            for (int j = 0; j < k; ++j) all += lse - (z[j] - zmax);
            nll = (1.0 - smoothing_) * nll + smoothing_ / k * all;
        }
        loss += nll;
        if (arg == y) ++right;
    }
    if (correct) *correct += right;
    return n > 0 ? loss / n : 0.0;
}

const Tensor& SoftmaxCrossEntropy::backward() {
    dz_.resize_like(prob_);
    const int n = prob_.n, k = prob_.c;
    const float inv_n = n > 0 ? 1.0f / n : 0.0f;
    for (int i = 0; i < n; ++i) {
        const float* p = prob_.sample(i);
        float* d = dz_.sample(i);
        const float u = smoothing_ / k;  // dL/dz = (p - q) / N
        for (int j = 0; j < k; ++j) d[j] = (p[j] - u) * inv_n;
        d[labels_[i]] -= (1.0f - smoothing_) * inv_n;
    }
    return dz_;
}

}  // namespace train
}  // namespace tula
