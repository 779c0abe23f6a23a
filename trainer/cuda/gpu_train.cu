// tula-train CUDA backend: the training step on a GPU and its timer. See gpu_train.hpp.
#include "gpu_train.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cmath>
#include <numeric>

#include "check.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

__global__ void k_gather(const uint8_t* __restrict__ images, const int* __restrict__ idx, int n, size_t px, float a,
                         float b, float* __restrict__ y) {
    const size_t total = static_cast<size_t>(n) * px;
    for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t i = t / px, j = t % px;
        y[t] = images[static_cast<size_t>(idx[i]) * px + j] * a + b;
    }
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void gather_normalize(cudaStream_t s, const uint8_t* images, const int* idx, int n, size_t px, float mean, float std_,
                      float* y) {
    const size_t total = static_cast<size_t>(n) * px;
    if (total == 0) return;
    size_t blocks = (total + 255) / 256;
    if (blocks > 65535 * 8) blocks = 65535 * 8;
    // (v/255 - mean)/std = v*a + b, the same arithmetic as gather_batch (data.cpp)
    const float a = 1.0f / (255.0f * std_), b = -mean / std_;
    k_gather<<<static_cast<unsigned>(blocks), 256, 0, s>>>(images, idx, n, px, a, b, y);
    CUDA_CHECK_LAUNCH();
}

GpuTrainer::GpuTrainer(GpuContext& ctx, Model& host_model, Comm& comm, const OptimConfig& oc, uint64_t seed,
                       const std::vector<std::string>& allreduce, bool force_allreduce)
    : ctx_(ctx), host_(host_model), comm_(comm), oc_(oc), ce_(ctx), force_allreduce_(force_allreduce) {
    g_ = build_gpu_model(ctx, host_model.name(), host_model.input_shape(), host_model.output_shape().c, seed);
    if (g_->num_params() != host_model.num_params() || g_->state_size() != host_model.state_size())
        throw std::logic_error("tula-train: the GPU twin of " + host_model.name() + " has " +
                               std::to_string(g_->num_params()) + " parameters, the host model " +
                               std::to_string(host_model.num_params()));
    if (oc.kind == OptimKind::Sgd)
        sgd_ = std::make_unique<GpuSgd>(*g_, oc.momentum, oc.weight_decay);
    else if (oc.kind == OptimKind::Lamb)
        host_opt_ = std::make_unique<Optimizer>(host_model.segments(), host_model.num_params(), oc);
    else
        Optimizer(std::vector<ParamSegment>{}, 0, oc);  // validates the configuration as the CPU path does
    trust_ = oc.kind == OptimKind::Ags || oc.kind == OptimKind::Lars;
    const auto& segs = g_->segments();
    const int ns = static_cast<int>(segs.size());
    if (trust_) {  // the block table of the fused update: chunks of <= 16 x 256 values of one segment
        std::vector<int> bs;
        std::vector<size_t> bb, be;
        std::vector<float> wd(ns);
        for (int k = 0; k < ns; ++k) {
            wd[k] = segs[k].decay ? static_cast<float>(oc.weight_decay) : 0.0f;
            for (size_t o = 0; o < segs[k].size; o += 4096) {
                bs.push_back(k);
                bb.push_back(segs[k].offset + o);
                be.push_back(segs[k].offset + std::min(segs[k].size, o + 4096));
            }
        }
        nblocks_ = static_cast<int>(bs.size());
        const size_t np = g_->num_params();
        vel_.reserve(sizeof(float) * std::max<size_t>(1, np));
        CUDA_CHECK(cudaMemset(vel_.get(), 0, sizeof(float) * np));
        blk_seg_.reserve(sizeof(int) * std::max(1, nblocks_));
        blk_beg_.reserve(sizeof(size_t) * std::max(1, nblocks_));
        blk_end_.reserve(sizeof(size_t) * std::max(1, nblocks_));
        seg_scale_.reserve(sizeof(float) * std::max(1, ns));
        seg_wd_.reserve(sizeof(float) * std::max(1, ns));
        wnorm_out_.reserve(sizeof(double) * std::max(1, ns));
        if (nblocks_) {
            CUDA_CHECK(cudaMemcpy(blk_seg_.get(), bs.data(), sizeof(int) * nblocks_, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(blk_beg_.get(), bb.data(), sizeof(size_t) * nblocks_, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(blk_end_.get(), be.data(), sizeof(size_t) * nblocks_, cudaMemcpyHostToDevice));
        }
        if (ns) CUDA_CHECK(cudaMemcpy(seg_wd_.get(), wd.data(), sizeof(float) * ns, cudaMemcpyHostToDevice));
        wnorms_.resize(ns);
        scale_.resize(ns);
    }
    std::vector<size_t> meta(2 * ns);
    for (int i = 0; i < ns; ++i) {
        meta[i] = segs[i].offset;
        meta[ns + i] = segs[i].size;
    }
    seg_meta_.reserve(sizeof(size_t) * std::max(1, 2 * ns));
    seg_out_.reserve(sizeof(double) * std::max(1, ns));
    if (ns) CUDA_CHECK(cudaMemcpy(seg_meta_.get(), meta.data(), sizeof(size_t) * 2 * ns, cudaMemcpyHostToDevice));
    norms_.resize(ns);
    if (comm.size() > 1 || force_allreduce) {
        allreduce_ = make_gpu_allreduce(ctx, comm, allreduce, &fallback_why_);
        method_ = allreduce_->name();
    }
}

void GpuTrainer::allreduce_grads() { allreduce_->mean(g_->grads(), g_->num_params()); }

void GpuTrainer::begin() {
    g_->upload(host_.params(), host_.num_params(), host_.state(), host_.state_size());
}

void GpuTrainer::end() {
    std::vector<float> st;
    g_->download(&hp_, nullptr, &st);
    std::copy(hp_.begin(), hp_.end(), host_.params());
    std::copy(st.begin(), st.end(), host_.state());
}

void GpuTrainer::gather(const Dataset& d, const int* idx, int n) {
    const size_t px = static_cast<size_t>(d.channels) * d.rows * d.cols;
    if (cached_ != &d) {  // the set's bytes go to the device when the set changes (the training and
                          // evaluation sets alternate, so each epoch copies each of them once)
        images_.reserve(std::max<size_t>(1, d.images.size()));
        // on the context's stream, so that the gather below reads them: a plain cudaMemcpy from
        // pageable memory runs on the legacy stream, which does not order with the non-blocking
        // one, and may return before its last DMA has landed (the first step then read stale
        // images). The pageable source is staged before the call returns.
        if (!d.images.empty())
            CUDA_CHECK(cudaMemcpyAsync(images_.get(), d.images.data(), d.images.size(), cudaMemcpyHostToDevice,
                                       ctx_.stream()));
        cached_ = &d;
    }
    labels_.resize(n);
    for (int i = 0; i < n; ++i) labels_[i] = d.labels[idx[i]];
    int* di = static_cast<int*>(idx_dev_.reserve(sizeof(int) * std::max(1, n)));
    // through a pinned staging buffer, so that the copy is asynchronous; the previous copy
    // out of it has finished, since every step waits for its loss before returning
    if (static_cast<size_t>(n) > idx_pinned_n_) {
        if (idx_pinned_) CUDA_CHECK(cudaFreeHost(idx_pinned_));
        idx_pinned_ = nullptr;
        idx_pinned_n_ = 0;
        CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&idx_pinned_), sizeof(int) * n));
        idx_pinned_n_ = n;
    }
    std::copy(idx, idx + n, idx_pinned_);
    CUDA_CHECK(cudaMemcpyAsync(di, idx_pinned_, sizeof(int) * n, cudaMemcpyHostToDevice, ctx_.stream()));
    x_.resize(n, d.channels, d.rows, d.cols);
    gather_normalize(ctx_.stream(), static_cast<const uint8_t*>(images_.get()), di, n, px, d.mean, d.std,
                     x_.ptr());
}

GpuTrainer::~GpuTrainer() {
    if (idx_pinned_) cudaFreeHost(idx_pinned_);
}

double GpuTrainer::grad_norm2() {
    const int ns = static_cast<int>(norms_.size());
    if (ns == 0) return 0;
    const size_t* m = static_cast<const size_t*>(seg_meta_.get());
    segment_sq_norms(ctx_.stream(), g_->grads(), m, m + ns, ns, static_cast<double*>(seg_out_.get()));
    CUDA_CHECK(cudaMemcpyAsync(norms_.data(), seg_out_.get(), sizeof(double) * ns, cudaMemcpyDeviceToHost,
                               ctx_.stream()));
    ctx_.sync();
    return std::accumulate(norms_.begin(), norms_.end(), 0.0);
}

double GpuTrainer::step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                        StepStats* stats, bool measure_noise) {
    const size_t np = g_->num_params();
    const bool many = sync && comm_.size() > 1;
    const bool split = stats && measure_noise && !many && n >= 2;
    double loss = 0, local_g2 = 0;
    if (split) {
        // two micro-batches, as Trainer::step: g = (h g1 + (n - h) g2) / n, both being means
        const int h = n / 2;
        double g2s = 0;
        float* gacc = static_cast<float*>(gacc_.reserve(sizeof(float) * std::max<size_t>(1, np)));
        // the half-batch passes must not move the BN running statistics (as Trainer::step)
        const size_t nst = g_->state_size();
        float* saved = static_cast<float*>(bn_saved_.reserve(sizeof(float) * std::max<size_t>(1, nst)));
        if (nst > 0)
            CUDA_CHECK(cudaMemcpyAsync(saved, g_->state(), sizeof(float) * nst, cudaMemcpyDeviceToDevice, ctx_.stream()));
        for (int part = 0; part < 2; ++part) {
            const int lo = part == 0 ? 0 : h, cnt = part == 0 ? h : n - h;
            gather(d, idx + lo, cnt);
            g_->zero_grad();
            const DevTensor& z = g_->forward(x_, true);
            loss += ce_.forward(z, labels_.data(), cnt, correct) * cnt / n;
            g_->backward(ce_.backward());
            g2s += 0.5 * grad_norm2();
            const float wgt = static_cast<float>(cnt) / static_cast<float>(n);
            if (part == 0) axpby(ctx_.stream(), g_->grads(), wgt, gacc, 0.0f, np);  // gacc = w1 g1
            else axpby(ctx_.stream(), gacc, 1.0f, g_->grads(), wgt, np);             // g = gacc + w2 g2
        }
        if (nst > 0)
            CUDA_CHECK(cudaMemcpyAsync(g_->state(), saved, sizeof(float) * nst, cudaMemcpyDeviceToDevice, ctx_.stream()));
        stats->noise = true;
        stats->b_small = 0.5 * n;
        stats->g2_small = g2s;
        stats->b_big = n;
    } else {
        gather(d, idx, n);
        g_->zero_grad();
        const DevTensor& z = g_->forward(x_, true);
        loss = ce_.forward(z, labels_.data(), n, correct);
        g_->backward(ce_.backward());
        if (stats && measure_noise && many) local_g2 = grad_norm2();
    }
    if (many || (sync && force_allreduce_)) allreduce_grads();
    if (many && stats && measure_noise) stats->observe_noise(comm_, local_g2, n);
    if (stats) {
        stats->grad_norm2 = grad_norm2();
        if (stats->noise) stats->g2_big = stats->grad_norm2;
    }
    if (sgd_) {
        sgd_->step(lr);
    } else if (trust_) {
        trust_ratio_step(lr);
    } else {  // LAMB: the CPU rule on host copies
        g_->download(&hp_, &hg_, nullptr);
        host_opt_->step(hp_.data(), hg_.data(), lr);
        // on the stream (non-blocking: a plain cudaMemcpy would not order with its kernels); a
        // pageable source is staged before the call returns
        CUDA_CHECK(cudaMemcpyAsync(g_->params(), hp_.data(), sizeof(float) * np, cudaMemcpyHostToDevice, ctx_.stream()));
    }
    return loss;
}

void GpuTrainer::trust_ratio_step(double lr) {
    const int ns = static_cast<int>(norms_.size());
    if (ns == 0) return;
    const size_t* m = static_cast<const size_t*>(seg_meta_.get());
    segment_sq_norms(ctx_.stream(), g_->params(), m, m + ns, ns, static_cast<double*>(wnorm_out_.get()));
    segment_sq_norms(ctx_.stream(), g_->grads(), m, m + ns, ns, static_cast<double*>(seg_out_.get()));
    CUDA_CHECK(cudaMemcpyAsync(wnorms_.data(), wnorm_out_.get(), sizeof(double) * ns, cudaMemcpyDeviceToHost,
                               ctx_.stream()));
    CUDA_CHECK(cudaMemcpyAsync(norms_.data(), seg_out_.get(), sizeof(double) * ns, cudaMemcpyDeviceToHost,
                               ctx_.stream()));
    ctx_.sync();
    const auto& segs = g_->segments();
    for (int k = 0; k < ns; ++k) {  // the CPU rule's factors (optim.hpp), one per segment
        const double wn = std::sqrt(wnorms_[k]), gn = std::sqrt(norms_[k]);
        const double wd = segs[k].decay ? oc_.weight_decay : 0.0;
        // segments without weight decay are excluded from trust scaling, as in Optimizer::step
        scale_[k] = !segs[k].decay ? 1.0f
                                   : static_cast<float>(oc_.kind == OptimKind::Ags
                                                            ? ags_factor(wn, gn, oc_.eta_trust, oc_.ags_lambda,
                                                                         oc_.s_min, oc_.s_max)
                                                            : lars_factor(wn, gn, oc_.eta_trust, wd));
    }
    CUDA_CHECK(cudaMemcpyAsync(seg_scale_.get(), scale_.data(), sizeof(float) * ns, cudaMemcpyHostToDevice, ctx_.stream()));
    scaled_momentum_update(ctx_.stream(), g_->params(), g_->grads(), static_cast<float*>(vel_.get()),
                           static_cast<const int*>(blk_seg_.get()), static_cast<const size_t*>(blk_beg_.get()),
                           static_cast<const size_t*>(blk_end_.get()), nblocks_,
                           static_cast<const float*>(seg_scale_.get()), static_cast<const float*>(seg_wd_.get()),
                           static_cast<float>(lr), static_cast<float>(oc_.momentum));
}

EvalResult GpuTrainer::evaluate(const Dataset& d, int batch) {
    if (comm_.size() > 1 && g_->state_size() > 0) {  // rank 0's BN statistics everywhere
        std::vector<float> st;
        g_->download(nullptr, nullptr, &st);
        comm_.broadcast(st.data(), st.size(), 0);
        CUDA_CHECK(cudaMemcpyAsync(g_->state(), st.data(), sizeof(float) * st.size(), cudaMemcpyHostToDevice, ctx_.stream()));
        ctx_.sync();  // st is a local
    }
    return evaluate_sharded(d, batch, comm_, [&](const int* idx, int n, int64_t* right) {
        gather(d, idx, n);
        return ce_.forward(g_->forward(x_, false), labels_.data(), n, right);
    });
}

double time_compute_step_gpu(GpuContext& ctx, Model& model, const Dataset& d, int batch, int warmup, int iters) {
    if (batch <= 0 || iters <= 0 || d.count <= 0)
        throw TrainError("time_compute_step_gpu: empty batch, data or iterations");
    Comm serial;
    OptimConfig oc;  // SGD, momentum 0.9, weight decay 5e-4
    GpuTrainer tr(ctx, model, serial, oc);
    tr.begin();
    std::vector<int> idx(batch);
    int64_t pos = 0;
    auto next = [&]() {
        for (int i = 0; i < batch; ++i) idx[i] = static_cast<int>((pos + i) % d.count);
        pos = (pos + batch) % d.count;
    };
    const double lr = 1e-3;
    for (int i = 0; i < warmup; ++i) {
        next();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
    }
    ctx.sync();
    const char* lt = std::getenv("TULA_GPU_LAYER_TIMES");
    const bool layer_times = lt && *lt && std::string(lt) != "0";
    if (layer_times) tr.gpu_model().set_layer_timing(true);
    double total = 0;
    for (int i = 0; i < iters; ++i) {
        next();
        const double t0 = now_seconds();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
        ctx.sync();
        total += now_seconds() - t0;
    }
    if (layer_times) {  // mean ms per step of each top-level layer, to stderr
        const GpuModel& g = tr.gpu_model();
        double f = 0, b = 0;
        for (size_t i = 0; i < g.layers().size(); ++i) {
            const auto& ms = g.layer_ms()[i];
            f += ms.first / iters;
            b += ms.second / iters;
            std::fprintf(stderr, "tula-train: layer %2zu %-60.60s forward %7.3f ms  backward %7.3f ms\n", i,
                         g.layers()[i]->describe().c_str(), ms.first / iters, ms.second / iters);
        }
        std::fprintf(stderr, "tula-train: layers at local batch %d: forward %.3f ms, backward %.3f ms, whole step %.3f ms\n",
                     batch, f, b, 1e3 * total / iters);
        tr.gpu_model().set_layer_timing(false);
    }
    return total / iters;
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
