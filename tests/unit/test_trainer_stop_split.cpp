// Unit tests of tula-train's validation split (split_validation: sizes, disjoint parts that
// together are the training set, refusals) and of the stop at a target test accuracy
// (TrainConfig::target_accuracy): a run with a target stops at the first epoch that an
// identical run without one shows reaching it, and the validation accuracy of each epoch is
// that of an independent evaluation of the same weights.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/model.hpp"
#include "core/rng.hpp"
#include "data/data.hpp"
#include "dist/comm.hpp"
#include "train/train.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

// `count` 28x28 images of 4 classes (testing::quadrant_images, noisier), with the example's
// index in its first two pixels so that examples can be told apart.
Dataset quadrants(int count, uint64_t seed) {
    Dataset d = testing::quadrant_images(count, seed, 4, 170, 70, 50);
    for (int i = 0; i < count; ++i) {
        d.images[static_cast<size_t>(i) * 784] = static_cast<uint8_t>(i % 256);
        d.images[static_cast<size_t>(i) * 784 + 1] = static_cast<uint8_t>(i / 256);
    }
    return d;
}

int index_of(const Dataset& d, int i) { return d.images[static_cast<size_t>(i) * 784] + 256 * d.images[static_cast<size_t>(i) * 784 + 1]; }

// Trains lenet5 (seed 3) on `tr` for `epochs` epochs at batch 32 and rate 0.02, with the
// target and validation set given; leaves the trained model in *out when given.
std::vector<EpochResult> run(const Dataset& tr, const Dataset& te, double target, const Dataset* val, int epochs = 4,
                             std::unique_ptr<Model>* out = nullptr) {
    auto m = build_model("lenet5", Shape{1, 28, 28}, 4);
    m->init(3);
    Comm serial;
    TrainConfig cfg;
    cfg.epochs = epochs;
    cfg.global_batch = 32;
    cfg.lr.lr = 0.02;
    cfg.lr.base_batch = 32;
    cfg.seed = 5;
    cfg.prefetch = false;
    cfg.target_accuracy = target;
    cfg.val_set = val;
    const auto res = train(*m, tr, te, cfg, serial, nullptr);
    if (out) *out = std::move(m);
    return res;
}

}  // namespace

class TrainerStopSplitTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerStopSplitTest);
    CPPUNIT_TEST(test_split_sizes_and_disjoint);
    CPPUNIT_TEST(test_split_refuses_bad_sizes);
    CPPUNIT_TEST(test_reached_target);
    CPPUNIT_TEST(test_stops_at_first_epoch_reaching_target);
    CPPUNIT_TEST(test_validation_accuracy_per_epoch);
    CPPUNIT_TEST_SUITE_END();

public:
    // The last n examples go to the validation set, in order; the first count - n stay.
    void test_split_sizes_and_disjoint() {
        const Dataset all = quadrants(300, 1);
        Dataset tr = all, val;
        tr.mean = 0.3f;
        tr.std = 0.4f;
        split_validation(tr, 70, val);
        CPPUNIT_ASSERT_EQUAL(230, tr.count);
        CPPUNIT_ASSERT_EQUAL(70, val.count);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(230 * 784), tr.images.size());
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(70 * 784), val.images.size());
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(230), tr.labels.size());
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(70), val.labels.size());
        CPPUNIT_ASSERT_EQUAL(4, val.classes);
        CPPUNIT_ASSERT_EQUAL(0.3f, val.mean);
        CPPUNIT_ASSERT_EQUAL(0.4f, val.std);
        std::vector<int> seen(300, 0);
        for (int i = 0; i < tr.count; ++i) {
            CPPUNIT_ASSERT_EQUAL(i, index_of(tr, i));
            ++seen[index_of(tr, i)];
        }
        for (int i = 0; i < val.count; ++i) {
            CPPUNIT_ASSERT_EQUAL(230 + i, index_of(val, i));
            ++seen[index_of(val, i)];
            CPPUNIT_ASSERT_EQUAL(all.labels[230 + i], val.labels[i]);
            CPPUNIT_ASSERT(std::memcmp(&all.images[(230 + i) * 784u], &val.images[i * 784u], 784) == 0);
        }
        for (int c : seen) CPPUNIT_ASSERT_EQUAL(1, c);  // disjoint, and together all of it
        Dataset none;
        Dataset same = all;
        split_validation(same, 0, none);
        CPPUNIT_ASSERT_EQUAL(300, same.count);
        CPPUNIT_ASSERT_EQUAL(0, none.count);
    }

    void test_split_refuses_bad_sizes() {
        for (int64_t n : {int64_t{300}, int64_t{301}, int64_t{-1}}) {
            Dataset tr = quadrants(300, 1), val;
            CPPUNIT_ASSERT_THROW(split_validation(tr, n, val), DataError);
            CPPUNIT_ASSERT_EQUAL(300, tr.count);
            CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(300 * 784), tr.images.size());
        }
    }

    void test_reached_target() {
        CPPUNIT_ASSERT(reached_target(0.9, 0.9));
        CPPUNIT_ASSERT(reached_target(0.95, 0.9));
        CPPUNIT_ASSERT(!reached_target(0.899, 0.9));
        CPPUNIT_ASSERT(!reached_target(1.0, 0.0));  // no target
    }

    // Without a target the run trains all 4 epochs; the target is set to epoch 2's test
    // accuracy, so the run with it must stop at the first epoch at or above that value, with
    // the same epochs up to there.
    void test_stops_at_first_epoch_reaching_target() {
        const Dataset tr = quadrants(512, 2), te = quadrants(200, 3);
        const auto full = run(tr, te, 0, nullptr);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(4), full.size());
        const double target = full[1].test_accuracy;
        size_t first = 0;
        while (full[first].test_accuracy < target) ++first;
        const auto cut = run(tr, te, target, nullptr);
        CPPUNIT_ASSERT_EQUAL(first + 1, cut.size());
        for (size_t e = 0; e < cut.size(); ++e)
            CPPUNIT_ASSERT_DOUBLES_EQUAL(full[e].test_accuracy, cut[e].test_accuracy, 1e-12);
        // a target above every epoch's accuracy: all epochs
        double best = 0;
        for (const auto& r : full) best = std::max(best, r.test_accuracy);
        if (best < 1.0) CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(4), run(tr, te, std::min(1.0, best + 1e-3), nullptr).size());
    }

    // The validation accuracy reported for the last epoch is what the final weights score on
    // the validation set when evaluated on their own; without a set it is -1.
    void test_validation_accuracy_per_epoch() {
        Dataset tr = quadrants(400, 4), val;
        split_validation(tr, 96, val);
        const Dataset te = quadrants(100, 5);
        std::unique_ptr<Model> m;
        const auto res = run(tr, te, 0, &val, 2, &m);
        Comm serial;
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(2), res.size());
        for (const auto& r : res) CPPUNIT_ASSERT(r.val_accuracy >= 0 && r.val_accuracy <= 1);
        for (const auto& r : res) CPPUNIT_ASSERT(r.eval_seconds > 0);  // the test set's evaluation was timed
        Trainer check(*m, serial, 0.9, 5e-4);
        const EvalResult ev = check.evaluate(val, 50);
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(96), ev.count);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ev.accuracy, res.back().val_accuracy, 1e-12);
        CPPUNIT_ASSERT_EQUAL(-1.0, run(tr, te, 0, nullptr).back().val_accuracy);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerStopSplitTest);
