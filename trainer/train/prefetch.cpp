// tula-train: the prefetching batch loader. See prefetch.hpp.
#include "train/prefetch.hpp"

#include <chrono>
#include <string>
#include <system_error>
#include <utility>

#include "core/rng.hpp"

namespace tula {
namespace train {
namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// gather_batch_augmented of idx[0..n) of d into b, after checking the indices.
void gather_into(const Dataset& d, const int* idx, int n, const Augment& aug, uint64_t seed, Batch& b) {
    for (int i = 0; i < n; ++i)
        if (idx[i] < 0 || idx[i] >= d.count)
            throw DataError("example index " + std::to_string(idx[i]) + " is outside the data set of " +
                            std::to_string(d.count) + " examples");
    b.labels.resize(static_cast<size_t>(n));
    Rng rng(seed);
    gather_batch_augmented(d, idx, n, b.x, b.labels.data(), aug, rng);
}

}  // namespace

bool BatchKey::same(const Dataset& d, const int* idx_, int n, const Augment& a, uint64_t seed) const {
    if (data != &d || idx.size() != static_cast<size_t>(n) || rng_seed != seed || aug.crop_pad != a.crop_pad ||
        aug.flip != a.flip)
        return false;
    for (int i = 0; i < n; ++i)
        if (idx[i] != idx_[i]) return false;
    return true;
}

void gather_key(const BatchKey& k, Batch& b) {
    gather_into(*k.data, k.idx.data(), static_cast<int>(k.idx.size()), k.aug, k.rng_seed, b);
}

BatchLoader::BatchLoader(bool threaded) {
    if (!threaded) return;
    try {
        th_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {
        // no thread to be had (resource limits): the synchronous path, same batches
    }
}

BatchLoader::~BatchLoader() {
    if (!th_.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    th_.join();
}

void BatchLoader::run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        cv_.wait(lk, [this] { return stop_ || pending_; });
        if (stop_) return;  // a job not started yet is dropped
        Batch& b = buf_[1 - cur_];
        lk.unlock();
        std::exception_ptr err;
        try {
            gather_key(job_, b);
        } catch (...) {
            err = std::current_exception();  // handed to take(), never std::terminate
        }
        lk.lock();
        err_ = err;
        pending_ = false;
        ready_ = true;
        cv_.notify_all();
    }
}

void BatchLoader::wait_idle(std::unique_lock<std::mutex>& lk) {
    cv_.wait(lk, [this] { return !pending_; });
}

void BatchLoader::submit(BatchKey k) {
    if (!th_.joinable()) return;
    {
        std::unique_lock<std::mutex> lk(mu_);
        wait_idle(lk);
        job_ = std::move(k);
        err_ = nullptr;
        ready_ = false;
        pending_ = true;
    }
    cv_.notify_all();
}

Batch& BatchLoader::take(const Dataset& d, const int* idx, int n, const Augment& aug, uint64_t seed,
                         double* wait_seconds) {
    const double t0 = now_seconds();
    bool hit = false;
    std::exception_ptr err;
    if (th_.joinable()) {
        std::unique_lock<std::mutex> lk(mu_);
        wait_idle(lk);
        hit = ready_ && job_.same(d, idx, n, aug, seed);
        if (hit) err = err_;
        ready_ = false;
        err_ = nullptr;
    }
    // no job in flight now: both buffers are the caller's until the next submit()
    cur_ = 1 - cur_;
    if (hit) {
        ++hits_;
        if (wait_seconds) *wait_seconds = now_seconds() - t0;
        if (err) std::rethrow_exception(err);
        return buf_[cur_];
    }
    ++misses_;
    gather_into(d, idx, n, aug, seed, buf_[cur_]);
    if (wait_seconds) *wait_seconds = now_seconds() - t0;
    return buf_[cur_];
}

}  // namespace train
}  // namespace tula
