// tula-train: the prefetching loader of the CPU training path: one background
// thread gathers (normalizes, augments) the next training batch into a second buffer while
// the compute works on the current one (double buffering).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/data.hpp"
#include "core/tensor.hpp"

namespace tula {
namespace train {

/// One gathered training batch.
struct Batch {
    Tensor x;                 ///< (n, C, H, W): (pixel/255 - mean)/std, cropped / flipped by the Augment
    std::vector<int> labels;  ///< (n,)
};

/// What a batch is made of: the data set, the examples (a copy of their indices, so that
/// the caller's index array may change or go away), the augmentation and the seed of the
/// Rng its random crops and flips are drawn from. Two equal keys give bit-identical batches.
struct BatchKey {
    const Dataset* data = nullptr;
    std::vector<int> idx;
    Augment aug;
    uint64_t rng_seed = 0;
    /// Whether this key describes examples idx[0..n) of `d` with `aug` drawn from Rng(seed).
    bool same(const Dataset& d, const int* idx_, int n, const Augment& a, uint64_t seed) const;
};

/// gather_batch_augmented(*k.data, k.idx, ..., k.aug, Rng(k.rng_seed)) into b. Errors:
/// DataError when an index is outside [0, count) of the data set ("example index I is
/// outside the training set of N examples"), std::bad_alloc.
void gather_key(const BatchKey& k, Batch& b);

/// Double-buffered batch loader. take() hands out one buffer, which the caller may use
/// until its next take(); meanwhile submit() has the loader thread (one std::thread, started
/// by the constructor, idle on a condition variable between jobs) gather the next batch
/// into the other buffer. take() returns that prefetched batch only when its key matches the
/// batch asked for; otherwise (nothing submitted, another batch, e.g. after the batch size
/// changed) it waits for the job in flight, drops it, and gathers the asked-for batch on the
/// calling thread, so the result never depends on whether or what was prefetched.
/// With threaded = false (or when no thread can be started) nothing is prefetched: submit()
/// is ignored and take() gathers on the calling thread (the synchronous path). Not
/// thread-safe itself: one caller thread. The Dataset of a submitted key must outlive the
/// loader or the next take().
class BatchLoader {
public:
    explicit BatchLoader(bool threaded);
    /// Waits for the job in flight (a gather runs to its end) and joins the thread.
    ~BatchLoader();
    BatchLoader(const BatchLoader&) = delete;
    BatchLoader& operator=(const BatchLoader&) = delete;

    /// Whether a loader thread runs.
    bool threaded() const { return th_.joinable(); }
    /// Starts gathering `k` on the loader thread into the buffer not handed out by the last
    /// take(). A job still in flight is waited for and dropped first. No-op without a thread.
    void submit(BatchKey k);
    /// The batch of examples idx[0..n) of `d`, augmented with `aug` drawn from Rng(seed):
    /// the prefetched one when the submitted key matches (waiting for it; an exception the
    /// loader thread caught while gathering it is rethrown here, the same type and message),
    /// else gathered now. Valid until the next take(). *wait_seconds (if given) gets the
    /// seconds spent waiting or gathering. Errors: as gather_key.
    Batch& take(const Dataset& d, const int* idx, int n, const Augment& aug, uint64_t seed,
                double* wait_seconds = nullptr);
    /// Batches take() returned prefetched / gathered on the calling thread so far.
    int64_t hits() const { return hits_; }
    int64_t misses() const { return misses_; }

private:
    void run();          // the loader thread
    void wait_idle(std::unique_lock<std::mutex>& lk);  // until no job is in flight

    Batch buf_[2];
    int cur_ = 1;        // buffer handed out by the last take(); the loader fills 1 - cur_
    std::mutex mu_;
    std::condition_variable cv_;
    bool pending_ = false;  // a submitted job not finished yet
    bool ready_ = false;    // the last submitted job finished (maybe with err_)
    bool stop_ = false;
    BatchKey job_;
    std::exception_ptr err_;
    int64_t hits_ = 0, misses_ = 0;
    std::thread th_;     // last member: started when the rest is constructed
};

}  // namespace train
}  // namespace tula
