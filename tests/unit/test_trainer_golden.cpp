// Golden tests: tula-train's CPU layers and lenet5 against PyTorch (an independent
// implementation). tests/golden/make_golden.py (run by hand with Debian's python3-torch
// 1.13.1) wrote tests/golden/*.tg: inputs, weights, outputs, an upstream gradient and the
// input / weight gradients; here the same inputs and weights go through our layers and
// every value must satisfy |ours - torch| <= abs_tol + rel_tol * |torch|.
// The files are looked for in $TULA_GOLDEN_DIR, else tests/golden (the tests run from the
// repository root).
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/layers.hpp"
#include "core/model.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

using namespace tula::train;

namespace {

struct GTensor {
    std::vector<uint32_t> dims;
    std::vector<float> data;
};

// Reads one golden file (format in make_golden.py). Fails the test with the reason.
std::map<std::string, GTensor> load_golden(const std::string& name) {
    const char* env = std::getenv("TULA_GOLDEN_DIR");
    const std::string path = std::string(env && *env ? env : "tests/golden") + "/" + name;
    std::ifstream f(path, std::ios::binary);
    if (!f) CPPUNIT_FAIL("cannot open golden file " + path + " (run the tests from the repository root or set TULA_GOLDEN_DIR)");
    auto u32 = [&]() {
        uint32_t v = 0;
        if (!f.read(reinterpret_cast<char*>(&v), 4)) CPPUNIT_FAIL(path + ": truncated");
        return v;
    };
    if (u32() != 0x474C5554u) CPPUNIT_FAIL(path + ": bad magic number");
    if (u32() != 1u) CPPUNIT_FAIL(path + ": unsupported version");
    const uint32_t count = u32();
    std::map<std::string, GTensor> out;
    for (uint32_t i = 0; i < count; ++i) {
        std::string nm(u32(), '\0');
        if (!f.read(&nm[0], nm.size())) CPPUNIT_FAIL(path + ": truncated name");
        GTensor t;
        const uint32_t nd = u32();
        size_t n = 1;
        for (uint32_t d = 0; d < nd; ++d) {
            t.dims.push_back(u32());
            n *= t.dims.back();
        }
        t.data.resize(n);
        if (!f.read(reinterpret_cast<char*>(t.data.data()), n * 4)) CPPUNIT_FAIL(path + ": truncated data of " + nm);
        out[nm] = std::move(t);
    }
    return out;
}

const GTensor& get(const std::map<std::string, GTensor>& g, const std::string& n) {
    auto it = g.find(n);
    if (it == g.end()) CPPUNIT_FAIL("golden file lacks tensor " + n);
    return it->second;
}

Tensor to_tensor(const GTensor& t) {
    int d[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < t.dims.size() && i < 4; ++i) d[i] = static_cast<int>(t.dims[i]);
    Tensor x(d[0], d[1], d[2], d[3]);
    x.data = t.data;
    return x;
}

void compare(const std::string& what, const GTensor& ref, const float* got, size_t n, double atol, double rtol) {
    CPPUNIT_ASSERT_EQUAL_MESSAGE(what + ": size", ref.data.size(), n);
    for (size_t i = 0; i < n; ++i) {
        const double r = ref.data[i];
        if (!(std::fabs(got[i] - r) <= atol + rtol * std::fabs(r)))
            CPPUNIT_FAIL(what + ": element " + std::to_string(i) + ": torch " + std::to_string(r) + ", ours " +
                         std::to_string(got[i]));
    }
}

// Runs a layer on the file's x with the file's parameters (in `pnames` order) and checks
// y, dx and every parameter gradient. Returns the state buffer after the step.
std::vector<float> run_layer_case(const std::string& file, std::unique_ptr<Layer> layer,
                                  const std::vector<std::string>& pnames, double atol, double rtol) {
    const auto g = load_golden(file);
    const Tensor x = to_tensor(get(g, "x"));
    layer->configure(x.shape());
    std::vector<float> params, grads, state(layer->state_size());
    for (const auto& n : pnames) {
        const auto& p = get(g, n).data;
        params.insert(params.end(), p.begin(), p.end());
    }
    size_t np = 0;
    for (const auto& p : layer->param_info()) np += p.size;
    CPPUNIT_ASSERT_EQUAL_MESSAGE(file + ": parameter count", np, params.size());
    grads.assign(np, 0.0f);
    layer->bind(params.data(), grads.data(), state.data());
    Rng rng(1);
    std::vector<float> keep = params;
    layer->init(rng);  // sets BN running statistics; parameters restored below
    std::copy(keep.begin(), keep.end(), params.begin());
    layer->set_need_input_grad(true);
    const Tensor& y = layer->forward(x, true);
    compare(file + " y", get(g, "y"), y.ptr(), y.size(), atol, rtol);
    const Tensor dy = to_tensor(get(g, "dy"));
    const Tensor& dx = layer->backward(dy);
    compare(file + " dx", get(g, "dx"), dx.ptr(), dx.size(), atol, rtol);
    size_t off = 0;
    for (const auto& n : pnames) {
        const std::string key = "d" + n;
        const auto& ref = get(g, key);
        compare(file + " " + key, ref, grads.data() + off, ref.data.size(), atol, rtol);
        off += ref.data.size();
    }
    return state;
}

}  // namespace

class TrainerGoldenTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerGoldenTest);
    CPPUNIT_TEST(test_conv_against_torch);
    CPPUNIT_TEST(test_batchnorm_train_against_torch);
    CPPUNIT_TEST(test_linear_and_maxpool_against_torch);
    CPPUNIT_TEST(test_lenet5_step_against_torch);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_conv_against_torch() {
        const double atol = 1e-5, rtol = 1e-4;
        run_layer_case("conv_basic.tg", make_conv2d(3, 4, 3, 1, 1, true), {"weight", "bias"}, atol, rtol);
        run_layer_case("conv_strided.tg", make_conv2d(2, 3, 3, 2, 1, false), {"weight"}, atol, rtol);
        run_layer_case("conv_grouped.tg", make_conv2d(4, 6, 3, 1, 1, true, 2), {"weight", "bias"}, atol,
                       rtol);
        run_layer_case("conv_depthwise.tg", make_conv2d(4, 4, 5, 2, 2, false, 4), {"weight"}, atol, rtol);
    }

    void test_batchnorm_train_against_torch() {
        const auto st = run_layer_case("batchnorm_train.tg", make_batchnorm2d(3), {"weight", "bias"},
                                       1e-5, 1e-4);
        const auto g = load_golden("batchnorm_train.tg");
        compare("running_mean", get(g, "running_mean"), st.data(), 3, 1e-6, 1e-5);
        compare("running_var", get(g, "running_var"), st.data() + 3, 3, 1e-6, 1e-5);
    }

    void test_linear_and_maxpool_against_torch() {
        run_layer_case("linear.tg", make_linear(7, 5), {"weight", "bias"}, 1e-5, 1e-4);
        run_layer_case("maxpool.tg", make_maxpool2d(2), {}, 0, 0);
    }

    void test_lenet5_step_against_torch() {
        const auto g = load_golden("lenet5.tg");
        const Tensor x = to_tensor(get(g, "x"));
        auto m = build_model("lenet5", x.shape(), 10);
        const auto& p = get(g, "params").data;
        CPPUNIT_ASSERT_EQUAL(m->num_params(), p.size());
        std::copy(p.begin(), p.end(), m->params());
        std::vector<int> labels;
        for (float v : get(g, "labels").data) labels.push_back(static_cast<int>(v));
        SoftmaxCrossEntropy ce;
        m->zero_grad();
        const Tensor& logits = m->forward(x, true);
        compare("lenet5 logits", get(g, "logits"), logits.ptr(), logits.size(), 1e-5, 1e-4);
        const double loss = ce.forward(logits, labels.data(), x.n, nullptr);
        const float lf = static_cast<float>(loss);
        compare("lenet5 loss", get(g, "loss"), &lf, 1, 1e-6, 1e-5);
        m->backward(ce.backward());
        compare("lenet5 grads", get(g, "grads"), m->grads(), m->num_params(), 1e-6, 1e-3);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerGoldenTest);
