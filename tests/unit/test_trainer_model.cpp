// Unit tests of tula-train's models, optimizer, learning-rate schedule and training step:
// parameter counts from the layer shapes, the fused buffer layout, whole-model gradients by
// finite differences, determinism, SGD against its formula, the schedule's defining
// properties, and that training lowers the loss on a learnable synthetic task.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "core/model.hpp"
#include "optim/optim.hpp"
#include "core/rng.hpp"
#include "train/train.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

// Parameters of a convolution (weight Cout*Cin*k*k, optional bias Cout), a BN layer
// (gamma, beta) and a fully connected layer (weight out*in, bias out).
int64_t conv_params(int64_t cin, int64_t cout, int64_t k, bool bias) { return cout * cin * k * k + (bias ? cout : 0); }
int64_t bn_params(int64_t c) { return 2 * c; }
int64_t fc_params(int64_t in, int64_t out) { return in * out + out; }

// A synthetic labelled image set: `count` 28x28 images whose label is decided by which
// quadrant is brightest (learnable by both models), pixels in 0..255.
Dataset synthetic(int count, uint64_t seed) { return tula::train::testing::quadrant_images(count, seed); }

std::vector<int> iota_vec(int n, int start = 0) {
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), start);
    return v;
}

// The directional derivative of the loss along the unit gradient is |g|: fails `what` unless the
// central difference (loss_at(t) - loss_at(-t)) / 2t is within rtol of `norm` for one of the
// steps h, h/3, h/10 (a ReLU or max-pool kink crossed within a step biases that step size, so
// the best of three is taken).
template <class F>
void check_along_unit_gradient(const std::string& what, F loss_at, double norm, double h, double rtol) {
    std::string seen;
    bool ok = false;
    for (double step : {h, h / 3, h / 10}) {
        const double fd = (loss_at(step) - loss_at(-step)) / (2 * step);
        ok = ok || std::fabs(fd - norm) <= rtol * norm;
        seen += " " + std::to_string(fd);
    }
    if (!ok) CPPUNIT_FAIL(what + ": finite differences along the gradient" + seen + ", |g| " + std::to_string(norm));
}

}  // namespace

class TrainerModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerModelTest);
    CPPUNIT_TEST(test_lenet5_parameter_count);
    CPPUNIT_TEST(test_fmnist_cnn_parameter_count);
    CPPUNIT_TEST(test_zoo_parameter_counts_match_torchvision);
    CPPUNIT_TEST(test_zoo_rejects_bad_shapes);
    CPPUNIT_TEST(test_activation_floats_per_example);
    CPPUNIT_TEST(test_resnet18_gradient_along_gradient);
    CPPUNIT_TEST(test_mobilenetv3_gradient_along_gradient);
    CPPUNIT_TEST(test_unknown_model_lists_valid_names);
    CPPUNIT_TEST(test_fused_buffer_layout);
    CPPUNIT_TEST(test_lenet5_gradient_finite_differences);
    CPPUNIT_TEST(test_fmnist_cnn_gradient_finite_differences);
    CPPUNIT_TEST(test_same_seed_same_training);
    CPPUNIT_TEST(test_sgd_matches_formula);
    CPPUNIT_TEST(test_lr_schedule_properties);
    CPPUNIT_TEST(test_training_learns_synthetic_task);
    CPPUNIT_TEST(test_train_rejects_bad_batch);
    CPPUNIT_TEST(test_serial_comm);
    CPPUNIT_TEST(test_time_compute_step_min_time);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_lenet5_parameter_count() {
        // conv5x5(1->6, pad 2) 28x28 -> pool 14x14 -> conv5x5(6->16) 10x10 -> pool 5x5 = 400 features
        const int64_t want = conv_params(1, 6, 5, true) + conv_params(6, 16, 5, true) + fc_params(16 * 5 * 5, 120) +
                             fc_params(120, 84) + fc_params(84, 10);
        auto m = build_model("lenet5");
        CPPUNIT_ASSERT_EQUAL(want, static_cast<int64_t>(m->num_params()));
        CPPUNIT_ASSERT_EQUAL(10, m->output_shape().c);
    }

    void test_fmnist_cnn_parameter_count() {
        // four 3x3 convolutions without bias, each followed by BN; 28 -> 14 -> 7 after the pools
        const int64_t want = conv_params(1, 32, 3, false) + bn_params(32) + conv_params(32, 32, 3, false) +
                             bn_params(32) + conv_params(32, 64, 3, false) + bn_params(64) +
                             conv_params(64, 64, 3, false) + bn_params(64) + fc_params(64 * 7 * 7, 256) +
                             fc_params(256, 10);
        auto m = build_model("fmnist-cnn");
        CPPUNIT_ASSERT_EQUAL(want, static_cast<int64_t>(m->num_params()));
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(4 * 2 * 64 - 2 * 64), m->state_size());  // 2*(32+32+64+64)
    }

    void test_unknown_model_lists_valid_names() {
        try {
            build_model("resnet1000");
            CPPUNIT_FAIL("no exception for an unknown model");
        } catch (const std::invalid_argument& e) {
            const std::string w = e.what();
            CPPUNIT_ASSERT(w.find("resnet1000") != std::string::npos);
            for (const auto& n : model_names()) CPPUNIT_ASSERT(w.find(n) != std::string::npos);
        }
    }

    void test_fused_buffer_layout() {
        auto m = build_model("fmnist-cnn");
        size_t next = 0;
        for (const auto& s : m->segments()) {
            CPPUNIT_ASSERT_EQUAL(next, s.offset);  // contiguous, in order, no gaps
            next += s.size;
            const bool is_weight = s.name.size() >= 7 && s.name.compare(s.name.size() - 7, 7, ".weight") == 0;
            CPPUNIT_ASSERT_EQUAL_MESSAGE(s.name, is_weight, s.decay);  // decay on weights only
        }
        CPPUNIT_ASSERT_EQUAL(m->num_params(), next);
        // each layer's views point into the one buffer
        for (const auto& l : m->layers()) {
            const FloatSpan p = l->params(), g = l->grads();
            if (p.size == 0) continue;
            CPPUNIT_ASSERT(p.data >= m->params() && p.data + p.size <= m->params() + m->num_params());
            CPPUNIT_ASSERT_EQUAL(p.data - m->params(), g.data - m->grads());
        }
    }

    // Whole-network check, one parameter tensor at a time: along u = g_s / |g_s| (g_s the
    // backward gradient of segment s), the directional derivative of the loss must be
    // g . u = |g_s|; measured by central differences of the softmax cross-entropy on a
    // 2-image batch. (Single coordinates are too close to ReLU / max-pool kinks for a
    // tight check; along u the kinks average out.) A wrong scale, slice or sign of any
    // segment's gradient changes the measured value.
    void check_model_gradients(const std::string& name, double h, double rtol) {
        auto m = build_model(name);
        m->init(5);
        Dataset d = synthetic(2, 6);
        Tensor x;
        int labels[2];
        const std::vector<int> idx = iota_vec(2);
        gather_batch(d, idx.data(), 2, x, labels);
        SoftmaxCrossEntropy ce;
        m->zero_grad();
        ce.forward(m->forward(x, true), labels, 2, nullptr);
        m->backward(ce.backward());
        const std::vector<float> g(m->grads(), m->grads() + m->num_params());
        const std::vector<float> w0(m->params(), m->params() + m->num_params());
        const std::vector<float> state0(m->state(), m->state() + m->state_size());
        for (const auto& s : m->segments()) {
            double n2 = 0;
            for (size_t i = s.offset; i < s.offset + s.size; ++i) n2 += static_cast<double>(g[i]) * g[i];
            const double norm = std::sqrt(n2);
            CPPUNIT_ASSERT_MESSAGE(name + " " + s.name + ": zero gradient", norm > 0);
            auto loss_at = [&](double t) {
                for (size_t i = s.offset; i < s.offset + s.size; ++i)
                    m->params()[i] = static_cast<float>(w0[i] + t * g[i] / norm);
                std::copy(state0.begin(), state0.end(), m->state());
                const double l = ce.forward(m->forward(x, true), labels, 2, nullptr);
                std::copy(w0.begin(), w0.end(), m->params());
                return l;
            };
            check_along_unit_gradient(name + " " + s.name, loss_at, norm, h, rtol);
        }
    }
    // Reference counts computed with Debian's python3-torch 1.13.1 / python3-torchvision
    // 0.14.1 (sum of p.numel() over model.parameters()), the small-image stems swapped in:
    //   resnet18(num_classes=K), conv1 = Conv2d(C, 64, 3, 1, 1, bias=False), maxpool = Identity
//   resnet50(num_classes=K), the same conv1 and maxpool
    //   vgg11_bn(num_classes=K), features[0] = Conv2d(C, 64, 3, padding=1)
    //   alexnet(num_classes=K), features[0] = Conv2d(C, 64, 3, 1, 1)
    //   mobilenet_v3_small(num_classes=K), features[0][0] = Conv2d(C, 16, 3, 1, 1, bias=False)
    // (`/usr/bin/python3 tests/golden/make_golden.py --counts` prints them).
    // The count does not depend on H and W for these (adaptive pooling before the fc).
    void test_zoo_parameter_counts_match_torchvision() {
        struct Ref { const char* name; int c, k; size_t want; };
        const Ref refs[] = {
            {"resnet18", 3, 10, 11173962},  {"resnet18", 1, 10, 11172810},  {"resnet18", 3, 100, 11220132},
            {"resnet50", 3, 10, 23520842},  {"resnet50", 1, 10, 23519690},  {"resnet50", 3, 100, 23705252},
            {"vgg11", 3, 10, 128812810},    {"vgg11", 1, 10, 128811658},    {"vgg11", 3, 100, 129181540},
            {"alexnet", 3, 10, 57023306},   {"alexnet", 1, 10, 57022154},   {"alexnet", 3, 100, 57392036},
            {"mobilenetv3-small", 3, 10, 1528106}, {"mobilenetv3-small", 1, 10, 1527818},
            {"mobilenetv3-small", 3, 100, 1620356}};
        for (const Ref& r : refs)
            for (int hw : {28, 32}) {
                const size_t got = count_model_params(r.name, Shape{r.c, hw, hw}, r.k);
                CPPUNIT_ASSERT_EQUAL_MESSAGE(std::string(r.name) + " C=" + std::to_string(r.c) + " K=" +
                                                 std::to_string(r.k) + " " + std::to_string(hw),
                                             r.want, got);
            }
        // ImageNet-sized inputs take the 7x7 stem: torchvision's resnet18 / resnet50 with 1000
        // classes (the 7x7 conv has 49 / 9 times the 3x3 stem's weights)
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(11689512), count_model_params("resnet18", Shape{3, 224, 224}, 1000));
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(25557032), count_model_params("resnet50", Shape{3, 224, 224}, 1000));
        // the two small models: counts of the brief for 1x28x28, and the built model agrees
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(61706), count_model_params("lenet5", Shape{1, 28, 28}, 10));
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(870826), count_model_params("fmnist-cnn", Shape{1, 28, 28}, 10));
        CPPUNIT_ASSERT_EQUAL(build_model("mobilenetv3-small", Shape{3, 32, 32}, 10)->num_params(),
                             count_model_params("mobilenetv3-small", Shape{3, 32, 32}, 10));
        // lenet5 on 3x32x32: conv 3->6 (5x5), conv 6->16, fc 16*6*6 -> 120 -> 84 -> K
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(conv_params(3, 6, 5, true) + conv_params(6, 16, 5, true) +
                                                 fc_params(576, 120) + fc_params(120, 84) + fc_params(84, 10)),
                             count_model_params("lenet5", Shape{3, 32, 32}, 10));
    }

    // The activation size the planner's memory model takes, against counts by hand from the
    // layer shapes: every layer's output (ReLU and BN included) plus the input.
    void test_activation_floats_per_example() {
        const size_t lenet5 = 784 + 2 * 6 * 28 * 28 + 6 * 14 * 14 + 2 * 16 * 10 * 10 + 16 * 5 * 5 + 2 * 120 + 2 * 84 + 10;
        CPPUNIT_ASSERT_EQUAL(lenet5, build_model("lenet5")->activation_floats_per_example());
        const size_t fmnist = 784 + 2 * 3 * 32 * 28 * 28 + 32 * 14 * 14 + 2 * 3 * 64 * 14 * 14 + 64 * 7 * 7 + 2 * 256 + 10;
        CPPUNIT_ASSERT_EQUAL(fmnist, build_model("fmnist-cnn")->activation_floats_per_example());
        // Composites count their children's outputs and their own: residual(conv + conv 1x1)
        // on 4x6x6 keeps two 8x6x6 paths and their sum; SE(8->2) keeps 8+2+2+8+8 values of its
        // children and the 8x6x6 rescaled output.
        std::vector<std::unique_ptr<Layer>> L;
        L.push_back(make_residual(make_conv2d(4, 8, 3, 1, 1, true), make_conv2d(4, 8, 1, 1, 0, true)));
        L.push_back(make_squeeze_excitation(8, 2));
        Model m("composites", Shape{4, 6, 6}, std::move(L));
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(4 * 36 + 3 * 8 * 36 + (8 + 2 + 2 + 8 + 8) + 8 * 36),
                             m.activation_floats_per_example());
        // Every model of the zoo has one, so the memory bound plans each of them.
        for (const std::string& name : model_names()) {
            auto z = build_model(name, Shape{3, 32, 32}, 10);
            CPPUNIT_ASSERT_MESSAGE(name, z->activation_floats_per_example() > 3 * 32 * 32 + z->output_shape().size());
        }
    }

    void test_zoo_rejects_bad_shapes() {
        CPPUNIT_ASSERT_THROW(build_model("lenet5", Shape{1, 8, 8}, 10), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(build_model("resnet18", Shape{3, 32, 32}, 1), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(build_model("resnet18", Shape{0, 32, 32}, 10), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(build_model("nope", Shape{3, 32, 32}, 10), std::invalid_argument);
    }

    // Whole-model check for the block-structured models: the directional derivative of the
    // loss along the computed gradient g equals |g| (central differences, best of 3 steps).
    void check_along_gradient(const std::string& name, const Shape& in, int K, double h, double rtol) {
        auto m = build_model(name, in, K);
        m->init(7);
        const int n = 4;
        Rng rng(8);
        Tensor x(n, in.c, in.h, in.w);
        for (float& v : x.data) v = static_cast<float>(rng.normal());
        int labels[n] = {0, 1, 2, 3};
        SoftmaxCrossEntropy ce;
        m->zero_grad();
        // Training mode redraws dropout masks on every forward, so mobilenetv3-small (which
        // has dropout) is checked in evaluation mode (BN with running statistics); resnet18
        // has no dropout and is checked in training mode (BN batch statistics).
        const bool train = name == "resnet18";
        ce.forward(m->forward(x, train), labels, n, nullptr);
        m->backward(ce.backward());
        const std::vector<float> g(m->grads(), m->grads() + m->num_params());
        const std::vector<float> w0(m->params(), m->params() + m->num_params());
        const std::vector<float> st(m->state(), m->state() + m->state_size());
        double n2 = 0;
        for (float v : g) n2 += static_cast<double>(v) * v;
        const double norm = std::sqrt(n2);
        CPPUNIT_ASSERT(norm > 0);
        auto loss_at = [&](double t) {
            for (size_t i = 0; i < g.size(); ++i) m->params()[i] = static_cast<float>(w0[i] + t * g[i] / norm);
            std::copy(st.begin(), st.end(), m->state());
            const double l = ce.forward(m->forward(x, train), labels, n, nullptr);
            std::copy(w0.begin(), w0.end(), m->params());
            return l;
        };
        check_along_unit_gradient(name, loss_at, norm, h, rtol);
    }
    void test_resnet18_gradient_along_gradient() { check_along_gradient("resnet18", Shape{3, 16, 16}, 4, 1e-3, 3e-2); }
    void test_mobilenetv3_gradient_along_gradient() {
        check_along_gradient("mobilenetv3-small", Shape{3, 16, 16}, 4, 1e-2, 3e-2);
    }

    void test_lenet5_gradient_finite_differences() { check_model_gradients("lenet5", 1e-3, 3e-2); }
    void test_fmnist_cnn_gradient_finite_differences() { check_model_gradients("fmnist-cnn", 1e-3, 3e-2); }

    void test_same_seed_same_training() {
        Dataset d = synthetic(64, 8);
        auto run = [&](uint64_t seed, std::vector<float>* params) {
            auto m = build_model("fmnist-cnn");
            m->init(seed);
            Comm serial;
            Trainer tr(*m, serial, 0.9, 5e-4);
            double loss = 0;
            for (int s = 0; s < 4; ++s) {
                const std::vector<int> idx = iota_vec(16, 16 * s);
                loss = tr.step(d, idx.data(), 16, 0.05, true, nullptr);
            }
            params->assign(m->params(), m->params() + m->num_params());
            return loss;
        };
        std::vector<float> p1, p2, p3;
        const double l1 = run(3, &p1), l2 = run(3, &p2), l3 = run(4, &p3);
        CPPUNIT_ASSERT_EQUAL(l1, l2);  // bit-identical
        CPPUNIT_ASSERT(std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(float)) == 0);
        CPPUNIT_ASSERT(l1 != l3);      // and the seed matters
    }

    void test_sgd_matches_formula() {
        auto m = build_model("fmnist-cnn");
        m->init(9);
        Rng rng(10);
        const size_t n = m->num_params();
        std::vector<float> w0(m->params(), m->params() + n), g1(n), g2(n);
        for (auto& v : g1) v = static_cast<float>(rng.normal());
        for (auto& v : g2) v = static_cast<float>(rng.normal());
        const double mom = 0.8, wd = 0.01, lr1 = 0.1, lr2 = 0.05;
        OptimConfig oc;
        oc.kind = OptimKind::Sgd;
        oc.momentum = mom;
        oc.weight_decay = wd;
        Optimizer sgd(m->segments(), n, oc);
        std::copy(g1.begin(), g1.end(), m->grads());
        sgd.step(m->params(), m->grads(), lr1);
        std::copy(g2.begin(), g2.end(), m->grads());
        sgd.step(m->params(), m->grads(), lr2);
        for (const auto& s : m->segments())
            for (size_t i = s.offset; i < s.offset + s.size; i += 97) {
                const double d = s.decay ? wd : 0.0;
                const double v1 = g1[i] + d * w0[i];
                const double w1 = w0[i] - lr1 * v1;
                const double v2 = mom * v1 + g2[i] + d * w1;
                const double w2 = w1 - lr2 * v2;
                CPPUNIT_ASSERT_DOUBLES_EQUAL(w2, m->params()[i], 1e-5 * (1 + std::fabs(w2)));
            }
    }

    void test_lr_schedule_properties() {
        LrSchedule s = testing::schedule(0.05, 64, 256, 1, 100, 10);
        s.cosine = true;
        const double peak = 0.05 * 256 / 64;  // linear scaling rule
        CPPUNIT_ASSERT_DOUBLES_EQUAL(peak, s.peak(), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05, s.at(0), 1e-12);                     // warmup starts at the base rate
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05 + (peak - 0.05) / 2, s.at(50), 1e-12);  // linear
        CPPUNIT_ASSERT_DOUBLES_EQUAL(peak, s.at(100), 1e-12);                   // peak after warmup
        CPPUNIT_ASSERT_DOUBLES_EQUAL(peak / 2, s.at(100 + 450), 1e-12);         // cosine midpoint
        for (int64_t t = 101; t < 1000; ++t) CPPUNIT_ASSERT(s.at(t) < s.at(t - 1) && s.at(t) > 0);
        CPPUNIT_ASSERT(s.at(999) < 1e-4 * peak);
        s.cosine = false;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(peak, s.at(700), 1e-12);
        // no warmup when the batch is not larger than the base batch
        s.global_batch = 32;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.025, s.at(0), 1e-12);
        // the cap bounds the scaled peak, and only when the scaled rate exceeds it
        s.global_batch = 1024;
        s.cosine = true;
        s.max_lr = 0.4;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.4, s.peak(), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.4, s.at(100), 1e-12);
        for (int64_t t = 0; t < 1000; ++t) CPPUNIT_ASSERT(s.at(t) <= 0.4 + 1e-12);
        s.global_batch = 256;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(peak, s.peak(), 1e-12);
    }

    void test_training_learns_synthetic_task() {
        Dataset tr = synthetic(512, 11), te = synthetic(256, 12);
        auto m = build_model("lenet5");
        m->init(1);
        Comm serial;
        TrainConfig cfg;
        cfg.epochs = 3;
        cfg.global_batch = 32;
        cfg.lr.lr = 0.05;
        cfg.lr.base_batch = 32;
        std::vector<EpochResult> seen;
        const auto res = train(*m, tr, te, cfg, serial, [&](const EpochResult& r) { seen.push_back(r); });
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(3), res.size());
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(3), seen.size());
        CPPUNIT_ASSERT(res.back().train_loss < 0.5 * res.front().train_loss || res.back().train_loss < 0.1);
        CPPUNIT_ASSERT(res.back().test_accuracy > 0.9);  // 4 classes: chance is 0.25
        CPPUNIT_ASSERT(res.back().seconds > 0 && res.back().images_per_second > 0);
    }

    void test_train_rejects_bad_batch() {
        Dataset tr = synthetic(20, 13);
        auto m = build_model("lenet5");
        m->init(1);
        Comm serial;
        TrainConfig cfg;
        cfg.global_batch = 64;  // more than the 20 examples
        CPPUNIT_ASSERT_THROW(train(*m, tr, tr, cfg, serial, nullptr), TrainError);
        cfg.global_batch = 0;
        CPPUNIT_ASSERT_THROW(train(*m, tr, tr, cfg, serial, nullptr), TrainError);
    }

    void test_serial_comm() {
        Comm c;
        CPPUNIT_ASSERT_EQUAL(0, c.rank());
        CPPUNIT_ASSERT_EQUAL(1, c.size());
        float f[3] = {1, 2, 3};
        double d[2] = {4, 5};
        c.allreduce_sum(f, 3);
        c.allreduce_sum(d, 2);
        c.allreduce_max(d, 2);
        c.broadcast(f, 3, 0);
        c.barrier();
        CPPUNIT_ASSERT_EQUAL(2.0f, f[1]);
        CPPUNIT_ASSERT_EQUAL(5.0, d[1]);
    }

    // time_compute_step: exactly --iters timed steps without a floor; with min_seconds, more
    // steps until their measured sum reaches it (mean x count >= the floor), and never fewer
    // than iters. The floor is ten of this machine's steps, measured in the same run.
    void test_time_compute_step_min_time() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x28x28:10");
        const Dataset d = make_synthetic(spec, 256, 1);
        auto m = build_model("lenet5", Shape{d.channels, d.rows, d.cols}, d.classes);
        m->init(1);
        int timed = -1;
        const double t = time_compute_step(*m, d, 8, 1, 3, 0.0, &timed);
        CPPUNIT_ASSERT_EQUAL(3, timed);
        CPPUNIT_ASSERT(t > 0);
        const double floor_s = 10 * t;
        const double t2 = time_compute_step(*m, d, 8, 1, 3, floor_s, &timed);
        CPPUNIT_ASSERT(timed > 3);  // three steps reach ten only if the steps got 3.3 times slower
        CPPUNIT_ASSERT(t2 * timed >= floor_s);
        CPPUNIT_ASSERT(t2 * (timed - 1) < floor_s + 10 * t2);  // stopped soon after reaching it
        CPPUNIT_ASSERT(time_compute_step(*m, d, 8, 0, 1000, 1e-9, &timed) > 0 && timed == 1000);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerModelTest);
