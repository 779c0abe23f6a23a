// Unit tests of tula-train's checkpoints, metrics log and the backward callback the gradient
// buckets rely on: a checkpoint reads back field for field; truncated, corrupted, foreign
// and newer-format files raise CheckpointError with a message saying so (never a crash);
// the write leaves no temporary file; train() stopped by the flag and resumed from the
// checkpoint reproduces the uninterrupted run's step losses exactly and counts two parts whose
// training seconds sum to the epochs'; a header without "parts" (an older writer) reads as a
// run not stopped before; MetricsLog lines parse
// as JSON with the fields given; Model::backward's callback reports offsets whose gradient
// tail already equals the final gradient (checked against a plain backward).
#include <cppunit/extensions/HelperMacros.h>

#include <dirent.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/checkpoint.hpp"
#include "dist/comm.hpp"
#include "data/data.hpp"
#include "test_util.hpp"
#include "train/metrics.hpp"
#include "core/model.hpp"
#include "train/train.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

void expect_error(const std::string& path, const std::string& needle) {
    tula_test::assert_throws_with<CheckpointError>([&] { read_checkpoint(path); }, needle);
}

Checkpoint sample() {
    Checkpoint c;
    c.config = {{"model", "lenet5"}, {"batch", 64}};
    c.ranks = 2;
    c.epoch = 3;
    c.step_in_epoch = 17;
    c.global_step = 217;
    c.epoch_seconds = 1.25;
    c.lr = 0.0375;
    c.noise_scale = 812.5;
    c.rank_sums = {1.5, 20, 2.5, 21};
    c.noise_estimator = NoiseScale(0.5).to_json();
    c.warmup = NormWarmup(0.1, 0.9, 5, 50, 4).to_json();
    c.epochs_done = nlohmann::json::array({{{"epoch", 1}, {"test_accuracy", 0.75}}, {{"epoch", 2}, {"test_accuracy", 0.8}}});
    c.params = {0.5f, -1.25f, 3.0f};
    c.state = {0.1f, 0.2f};
    c.opt_m1 = {1, 2, 3};
    c.opt_m2 = {};
    c.opt_t = 217;
    c.parts = {12.5, 0.25};
    return c;
}

// Rewrites the JSON header of the checkpoint file `path` through `edit`, the lengths and the
// CRC-32 made to fit: a checkpoint as another writer of format 2 would have written it.
void edit_header(const std::string& path, const std::function<void(nlohmann::ordered_json&)>& edit) {
    const std::vector<char> all = tula_test::read_bytes(path);
    uint64_t json_len = 0;
    std::memcpy(&json_len, all.data() + 16, 8);
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(all.begin() + 36, all.begin() + 36 + static_cast<long>(json_len));
    edit(h);
    const std::string js = h.dump();
    const std::vector<char> tensors(all.begin() + 36 + static_cast<long>(json_len), all.end());
    uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(js.data()), js.size());
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(tensors.data()), tensors.size());
    std::vector<char> out(all.begin(), all.begin() + 36);
    const uint64_t n = js.size();
    const uint32_t c32 = static_cast<uint32_t>(crc);
    std::memcpy(out.data() + 16, &n, 8);
    std::memcpy(out.data() + 32, &c32, 4);
    out.insert(out.end(), js.begin(), js.end());
    out.insert(out.end(), tensors.begin(), tensors.end());
    tula_test::write_bytes(path, out);
}

// train() of m with cfg on one rank; returns the step losses. With stop_at >= 0 the stop
// flag is raised after that step; with `resume` it resumes; h gets the hooks' outputs.
std::vector<double> train_losses(Model& m, const Dataset& tr, const Dataset& te, const TrainConfig& cfg,
                                 const std::string& ckpt, int64_t stop_at, const Checkpoint* resume, TrainHooks& h,
                                 std::vector<EpochResult>* epochs = nullptr) {
    Comm serial;
    std::vector<double> losses;
    h.config = {{"unit", nullptr}};
    h.checkpoint_path = ckpt;
    h.resume = resume;
    h.on_step = [&](const StepRecord& r) {
        losses.push_back(r.loss);
        if (r.step == stop_at) set_stop_requested(true);
    };
    const std::vector<EpochResult> res = train(m, tr, te, cfg, serial, nullptr, &h);
    if (epochs) *epochs = res;
    set_stop_requested(false);
    return losses;
}

// Runs `epochs` epochs of lenet5 on synthetic data; returns the step losses. With
// stop_at >= 0 the stop flag is raised after that step; with `resume` it resumes.
// With `dropout`, a small network with a dropout layer inside a sequential block instead
// (its generator state must travel in the checkpoint too). With `h_out` it gets the hooks'
// outputs and `epochs` the epoch results.
std::vector<double> run(const std::string& ckpt, int64_t stop_at, const Checkpoint* resume, bool* stopped,
                        bool dropout = false, TrainHooks* h_out = nullptr, std::vector<EpochResult>* epochs = nullptr) {
    const Dataset tr = make_synthetic(SyntheticSpec{Shape{1, 28, 28}, 10}, 256, 7);
    const Dataset te = make_synthetic(SyntheticSpec{Shape{1, 28, 28}, 10}, 32, 8);
    std::unique_ptr<Model> m;
    if (dropout) {
        std::vector<std::unique_ptr<Layer>> inner, L;
        inner.push_back(make_linear(784, 32));
        inner.push_back(make_relu());
        inner.push_back(make_dropout(0.3));
        L.push_back(make_sequential(std::move(inner)));
        L.push_back(make_dropout(0.2));
        L.push_back(make_linear(32, 10));
        m.reset(new Model("tiny-dropout", Shape{1, 28, 28}, std::move(L)));
    } else {
        m = build_model("lenet5");
    }
    m->init(3);
    TrainConfig cfg = testing::train_config(2, 32, 0.05, 32);
    TrainHooks h;
    const std::vector<double> losses = train_losses(*m, tr, te, cfg, ckpt, stop_at, resume, h, epochs);
    *stopped = h.stopped;
    if (h_out) *h_out = h;
    return losses;
}

// A run that exercises every way a batch is gathered: random crops and flips, an odd global
// batch whose noise measurement splits it into micro-batches of 7 and 8 (every 2nd step), a
// training set of 70 = 4 x 15 + 10 (the partial tail is dropped), 3 epochs. Returns the
// step losses and the final weights; *prefetched gets the steps fed by the loader thread.
// With stop_at >= 0 the stop flag is raised after that step; with `resume` it resumes.
std::vector<double> run_gather_mix(bool prefetch, std::vector<float>* weights, int64_t* prefetched,
                                   const std::string& ckpt = "", int64_t stop_at = -1,
                                   const Checkpoint* resume = nullptr) {
    const SyntheticSpec spec{Shape{1, 12, 12}, 4};
    const Dataset tr = make_synthetic(spec, 70, 11), te = make_synthetic(spec, 20, 12);
    auto m = build_model("lenet5", spec.shape, spec.classes);
    m->init(5);
    TrainConfig cfg = testing::train_config(3, 15, 0.05, 20);
    cfg.noise_every = 2;
    cfg.augment.crop_pad = 2;
    cfg.augment.flip = true;
    cfg.prefetch = prefetch;
    TrainHooks h;
    const std::vector<double> losses = train_losses(*m, tr, te, cfg, ckpt, stop_at, resume, h);
    if (weights) weights->assign(m->params(), m->params() + m->num_params());
    if (prefetched) *prefetched = h.prefetched;
    return losses;
}

// One run of the branch test: lenet5 on 70 synthetic 12x12 images, global batch 15 (4 steps
// an epoch), 4 epochs, base rate 0.05 scaled to 0.1 with 1 epoch of warmup, the noise scale
// measured every 2nd step. decay_steps 0: a constant rate after warmup; > 0: warmup-stable-decay
// with that many decay steps. `save` epochs are written to CKPT.eK; `from` is branched off.
// Returns the step losses; *weights the final weights, *epochs the run's epoch results.
std::vector<double> run_branch(int64_t decay_steps, const std::vector<int>& save, const std::string& ckpt,
                               const Checkpoint* from, std::vector<float>* weights, std::vector<EpochResult>* epochs) {
    const SyntheticSpec spec{Shape{1, 12, 12}, 4};
    const Dataset tr = make_synthetic(spec, 70, 11), te = make_synthetic(spec, 20, 12);
    auto m = build_model("lenet5", spec.shape, spec.classes);
    m->init(5);
    TrainConfig cfg = testing::train_config(4, 15, 0.05, 20);
    cfg.lr.base_batch = 8;
    cfg.lr.warmup_epochs = 1;
    cfg.lr.cosine = false;
    cfg.lr.decay_steps = decay_steps;
    cfg.noise_every = 2;
    TrainHooks h;
    h.save_epochs = save;
    Comm serial;
    std::vector<double> losses;
    h.config = {{"unit", nullptr}};
    h.checkpoint_path = ckpt;
    h.resume = from;
    h.on_step = [&](const StepRecord& r) { losses.push_back(r.loss); };
    *epochs = train(*m, tr, te, cfg, serial, nullptr, &h);
    weights->assign(m->params(), m->params() + m->num_params());
    return losses;
}

}  // namespace

class TrainerCheckpointTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerCheckpointTest);
    CPPUNIT_TEST(test_round_trip);
    CPPUNIT_TEST(test_bad_files);
    CPPUNIT_TEST(test_named_fields);
    CPPUNIT_TEST(test_config_text);
    CPPUNIT_TEST(test_parts_field);
    CPPUNIT_TEST(test_stop_and_resume);
    CPPUNIT_TEST(test_stop_and_resume_dropout);
    CPPUNIT_TEST(test_prefetch_same_trajectory);
    CPPUNIT_TEST(test_branch_off_saved_epoch);
    CPPUNIT_TEST(test_metrics_lines);
    CPPUNIT_TEST(test_backward_callback);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_round_trip() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string d = d_dir.path, p = d + "/a.ckpt";
        const Checkpoint c = sample();
        write_checkpoint(p, c);
        write_checkpoint(p, c);  // over an existing file
        const Checkpoint r = read_checkpoint(p);
        tula_test::assert_fields_equal(c, r, &Checkpoint::config, &Checkpoint::ranks, &Checkpoint::epoch,
                                       &Checkpoint::step_in_epoch, &Checkpoint::global_step, &Checkpoint::epoch_seconds,
                                       &Checkpoint::lr, &Checkpoint::noise_scale);
        CPPUNIT_ASSERT(c.rank_sums == r.rank_sums);
        CPPUNIT_ASSERT(c.noise_estimator == r.noise_estimator && c.warmup == r.warmup && c.epochs_done == r.epochs_done);
        CPPUNIT_ASSERT(c.params == r.params && c.state == r.state && c.opt_m1 == r.opt_m1 && c.opt_m2 == r.opt_m2);
        CPPUNIT_ASSERT_EQUAL(c.opt_t, r.opt_t);
        CPPUNIT_ASSERT(c.parts == r.parts);
        // nothing but the checkpoint is left in the directory
        int files = 0;
        DIR* dir = opendir(d.c_str());
        while (dirent* e = readdir(dir)) files += e->d_name[0] != '.';
        closedir(dir);
        CPPUNIT_ASSERT_EQUAL(1, files);
        // unwritable place: CheckpointError
        CPPUNIT_ASSERT_THROW(write_checkpoint(d + "/no/such/dir/x.ckpt", c), CheckpointError);
    }

    void test_bad_files() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string d = d_dir.path, p = d + "/a.ckpt";
        write_checkpoint(p, sample());
        const std::vector<char> good = tula_test::read_bytes(p);
        expect_error(d + "/missing.ckpt", "cannot open");
        tula_test::write_bytes(d + "/empty", {});
        expect_error(d + "/empty", "not a tula-train checkpoint");
        tula_test::write_bytes(d + "/text", {'h', 'e', 'l', 'l', 'o', '\n', 'x', 'y', 'z'});
        expect_error(d + "/text", "not a tula-train checkpoint");
        tula_test::write_bytes(d + "/head", std::vector<char>(good.begin(), good.begin() + 20));
        expect_error(d + "/head", "truncated");
        for (size_t cut : {good.size() - 1, good.size() / 2, size_t{40}}) {
            tula_test::write_bytes(d + "/cut", std::vector<char>(good.begin(), good.begin() + static_cast<long>(cut)));
            expect_error(d + "/cut", "truncated");
        }
        std::vector<char> longer = good;
        longer.push_back('x');
        tula_test::write_bytes(d + "/long", longer);
        expect_error(d + "/long", "truncated or extended");
        for (size_t at : {size_t{44}, good.size() / 2, good.size() - 1}) {
            std::vector<char> flip = good;
            flip[at] = static_cast<char>(flip[at] ^ 0x10);
            tula_test::write_bytes(d + "/flip", flip);
            expect_error(d + "/flip", "corrupt");
        }
        std::vector<char> ver = good;
        ver[8] = 9;  // version field (u32 after the 8-byte magic)
        tula_test::write_bytes(d + "/ver", ver);
        expect_error(d + "/ver", "format version 9");
        // a checkpoint of format 1 (raw structs, of older releases) is refused, saying why
        std::vector<char> v1 = good;
        v1[8] = 1;
        tula_test::write_bytes(d + "/v1", v1);
        expect_error(d + "/v1", "format version 1, this tula-train reads version 2 (an older tula-train wrote it)");
    }

    // The header is JSON with named, versioned fields (read here with nlohmann::json, not by
    // read_checkpoint): the configuration as an object of its keys, the estimators' state and
    // the finished epochs by name, the tensors listed with their element counts; a header
    // without a field is refused.
    void test_named_fields() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string p = d_dir.path + "/a.ckpt";
        const Checkpoint c = sample();
        write_checkpoint(p, c);
        const std::vector<char> all = tula_test::read_bytes(p);
        uint64_t json_len = 0;
        std::memcpy(&json_len, all.data() + 16, 8);
        const auto h = nlohmann::json::parse(all.begin() + 36, all.begin() + 36 + static_cast<long>(json_len));
        CPPUNIT_ASSERT_EQUAL(2, h.at("version").get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5"), h.at("config").at("model").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(64, h.at("config").at("batch").get<int>());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, h.at("noise_estimator").at("beta").get<double>(), 0);
        CPPUNIT_ASSERT_EQUAL(int64_t(50), h.at("warmup").at("cap_steps").get<int64_t>());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, h.at("epochs_done")[1].at("test_accuracy").get<double>(), 0);
        CPPUNIT_ASSERT_EQUAL(std::string("params"), h.at("tensors")[0].at("name").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(size_t(3), h.at("tensors")[0].at("count").get<size_t>());
        // the same estimator back from its fields
        const NoiseScale n = NoiseScale::from_json(c.noise_estimator);
        CPPUNIT_ASSERT_EQUAL(NoiseScale(0.5).to_json().dump(), n.to_json().dump());
        CPPUNIT_ASSERT_THROW(NoiseScale::from_json(nlohmann::json::object()), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(NormWarmup::from_json({{"threshold", 0.1}}), std::invalid_argument);
    }

    // The configuration's canonical text, its hash (FNV-1a against the published test vector of
    // "a") and the difference a refused resume names; a configuration whose numbers are given
    // as text (as older checkpoints stored them) is the same run's.
    void test_config_text() {
        CPPUNIT_ASSERT_EQUAL(uint64_t(0xaf63dc4c8601ec8cULL), fnv1a64("a"));
        RunConfig now = {{"model", "lenet5"}, {"batch", 64}, {"lr", 0.1}, {"seed", uint64_t(7)}, {"unit", nullptr}};
        CPPUNIT_ASSERT_EQUAL(std::string("model=lenet5 batch=64 lr=0.1 seed=7 unit"), config_text(now));
        CPPUNIT_ASSERT_EQUAL(fnv1a64("model=lenet5 batch=64 lr=0.1 seed=7 unit"), config_hash(now));
        const RunConfig as_text = {{"model", "lenet5"}, {"batch", "64"}, {"lr", "0.1"}, {"seed", "7"}, {"unit", nullptr}};
        CPPUNIT_ASSERT_EQUAL(config_hash(now), config_hash(as_text));
        CPPUNIT_ASSERT_EQUAL(std::string(), config_difference(now, as_text));
        RunConfig then = now;
        then["batch"] = 32;
        CPPUNIT_ASSERT_EQUAL(std::string("batch is 64 here but 32 in the checkpoint"), config_difference(now, then));
        then = now;
        then.erase("lr");
        CPPUNIT_ASSERT_EQUAL(std::string("lr is 0.1 here but (absent) in the checkpoint"), config_difference(now, then));
        then = now;
        then["augment"] = "flip";
        CPPUNIT_ASSERT_EQUAL(std::string("the configuration differs"), config_difference(now, then));

        // a checkpoint whose config_hash an earlier release computed (FNV-1a's steps from
        // 1469598103934665603, here by a naive loop) still reads; any other hash is refused
        const tula_test::TempDir d_dir("ckpt");
        const std::string p = d_dir.path + "/old.ckpt";
        const Checkpoint c = sample();
        write_checkpoint(p, c);
        auto with_hash = [&](uint64_t hash) {
            std::vector<char> all = tula_test::read_bytes(p);
            char now_hex[17], old_hex[17];
            std::snprintf(now_hex, sizeof now_hex, "%016llx", static_cast<unsigned long long>(config_hash(c.config)));
            std::snprintf(old_hex, sizeof old_hex, "%016llx", static_cast<unsigned long long>(hash));
            std::string bytes(all.begin(), all.end());
            const size_t at = bytes.find(now_hex);
            CPPUNIT_ASSERT(at != std::string::npos);
            bytes.replace(at, 16, old_hex);
            const uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()) + 36, bytes.size() - 36);
            const uint32_t crc32v = static_cast<uint32_t>(crc);
            std::memcpy(&bytes[32], &crc32v, 4);
            const std::string q = d_dir.path + "/patched.ckpt";
            tula_test::write_bytes(q, std::vector<char>(bytes.begin(), bytes.end()));
            return q;
        };
        uint64_t legacy = 1469598103934665603ULL;
        for (unsigned char ch : config_text(c.config)) legacy = (legacy ^ ch) * 1099511628211ULL;
        CPPUNIT_ASSERT(config_text(read_checkpoint(with_hash(legacy)).config) == config_text(c.config));
        expect_error(with_hash(legacy + 1), "(config_hash)");
    }

    // "parts" is a list of seconds in the header; a header without it (written before the field
    // existed, still format 2) reads as a run never stopped; a negative or null entry is refused.
    void test_parts_field() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string p = d_dir.path + "/a.ckpt";
        write_checkpoint(p, sample());
        const std::vector<char> all = tula_test::read_bytes(p);
        uint64_t json_len = 0;
        std::memcpy(&json_len, all.data() + 16, 8);
        const auto h = nlohmann::json::parse(all.begin() + 36, all.begin() + 36 + static_cast<long>(json_len));
        CPPUNIT_ASSERT(h.at("parts") == nlohmann::json::array({12.5, 0.25}));
        edit_header(p, [](nlohmann::ordered_json& j) { j.erase("parts"); });
        const Checkpoint old = read_checkpoint(p);
        CPPUNIT_ASSERT(old.parts.empty());
        CPPUNIT_ASSERT(sample().params == old.params);
        write_checkpoint(p, Checkpoint(old));
        CPPUNIT_ASSERT(read_checkpoint(p).parts.empty());
        edit_header(p, [](nlohmann::ordered_json& j) { j["parts"] = {3.0, -1.0}; });
        expect_error(p, "inconsistent (parts)");
        edit_header(p, [](nlohmann::ordered_json& j) { j["parts"] = {nullptr}; });
        expect_error(p, "inconsistent");
        edit_header(p, [](nlohmann::ordered_json& j) { j["parts"] = "12"; });
        expect_error(p, "inconsistent");
    }

    void test_stop_and_resume() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string d = d_dir.path, p = d + "/run.ckpt";
        bool stopped = false;
        TrainHooks h_full;
        std::vector<EpochResult> e_full;
        const std::vector<double> full = run(p, -1, nullptr, &stopped, false, &h_full, &e_full);
        CPPUNIT_ASSERT(!stopped);
        CPPUNIT_ASSERT_EQUAL(size_t{1}, h_full.part_seconds.size());  // never stopped: one part
        CPPUNIT_ASSERT_DOUBLES_EQUAL(e_full[0].seconds + e_full[1].seconds, h_full.part_seconds[0], 1e-9);
        CPPUNIT_ASSERT_EQUAL(size_t{16}, full.size());  // 2 epochs x 256/32 steps
        // the flag raised in step 10's callback is seen at the end of step 11 (like a signal
        // arriving during step 11): the checkpoint is taken after 12 steps, in epoch 2
        std::vector<double> part = run(p, 10, nullptr, &stopped);
        CPPUNIT_ASSERT(stopped);
        CPPUNIT_ASSERT_EQUAL(size_t{12}, part.size());
        const Checkpoint c = read_checkpoint(p);
        CPPUNIT_ASSERT_EQUAL(2, c.epoch);
        CPPUNIT_ASSERT_EQUAL(int64_t{4}, c.step_in_epoch);
        // the stopped part: epoch 1 and the first 4 steps of epoch 2
        CPPUNIT_ASSERT_EQUAL(size_t{1}, c.parts.size());
        CPPUNIT_ASSERT_EQUAL(size_t{1}, c.epochs_done.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c.epochs_done[0].at("seconds").get<double>() + c.epoch_seconds, c.parts[0], 1e-9);
        TrainHooks h;
        std::vector<EpochResult> epochs;
        const std::vector<double> rest = run(p, -1, &c, &stopped, false, &h, &epochs);
        CPPUNIT_ASSERT(!stopped);
        // two parts: the first as the checkpoint says, the second the rest of the epochs' seconds
        CPPUNIT_ASSERT_EQUAL(size_t{2}, h.part_seconds.size());
        CPPUNIT_ASSERT_EQUAL(c.parts[0], h.part_seconds[0]);
        CPPUNIT_ASSERT(h.part_seconds[1] > 0);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, epochs.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(epochs[0].seconds + epochs[1].seconds, h.part_seconds[0] + h.part_seconds[1], 1e-9);
        CPPUNIT_ASSERT(epochs[1].seconds >= c.epoch_seconds);  // the split epoch holds both parts' share
        part.insert(part.end(), rest.begin(), rest.end());
        CPPUNIT_ASSERT_EQUAL(full.size(), part.size());
        for (size_t i = 0; i < full.size(); ++i) CPPUNIT_ASSERT_EQUAL(full[i], part[i]);  // bit for bit
    }

    // A decay branched off the state a constant-rate run saved at the end of epoch 2 is the
    // same run, bit for bit, as warmup-stable-decay trained from the start with the same
    // decay steps: the same last 8 step losses and final weights; its epoch results start
    // with the constant run's 2 epochs. The constant run itself ends elsewhere.
    void test_branch_off_saved_epoch() {
        const tula_test::TempDir d_dir("ckpt");
        const std::string p = d_dir / "trunk.ckpt";
        std::vector<float> w_trunk, w_wsd, w_branch;
        std::vector<EpochResult> e_trunk, e_wsd, e_branch;
        run_branch(0, {2}, p, nullptr, &w_trunk, &e_trunk);
        const std::vector<double> wsd = run_branch(6, {}, "", nullptr, &w_wsd, &e_wsd);
        const Checkpoint c = read_checkpoint(saved_epoch_path(p, 2));
        CPPUNIT_ASSERT_EQUAL(3, c.epoch);
        CPPUNIT_ASSERT_EQUAL(int64_t{0}, c.step_in_epoch);
        CPPUNIT_ASSERT_EQUAL(int64_t{8}, c.global_step);
        const std::vector<double> branch = run_branch(6, {}, "", &c, &w_branch, &e_branch);
        CPPUNIT_ASSERT_EQUAL(size_t{16}, wsd.size());
        CPPUNIT_ASSERT_EQUAL(size_t{8}, branch.size());
        for (size_t i = 0; i < 8; ++i) CPPUNIT_ASSERT_EQUAL(wsd[8 + i], branch[i]);
        CPPUNIT_ASSERT(w_branch == w_wsd);
        CPPUNIT_ASSERT(w_trunk != w_wsd);
        CPPUNIT_ASSERT_EQUAL(size_t{4}, e_branch.size());
        for (size_t i = 0; i < 4; ++i) {
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(i + 1), e_branch[i].epoch);
            CPPUNIT_ASSERT_EQUAL(e_wsd[i].test_accuracy, e_branch[i].test_accuracy);
            CPPUNIT_ASSERT_EQUAL(e_wsd[i].train_loss, e_branch[i].train_loss);
        }
        CPPUNIT_ASSERT_EQUAL(e_trunk[1].train_loss, e_branch[1].train_loss);
        // saving needs a checkpoint file
        CPPUNIT_ASSERT_THROW(run_branch(0, {2}, "", nullptr, &w_trunk, &e_trunk), TrainError);
    }

    void test_stop_and_resume_dropout() {
        const tula_test::TempDir p_dir("ckpt");
        const std::string p = p_dir / "drop.ckpt";
        bool stopped = false;
        const std::vector<double> full = run(p, -1, nullptr, &stopped, true);
        std::vector<double> part = run(p, 5, nullptr, &stopped, true);
        CPPUNIT_ASSERT(stopped);
        const Checkpoint c = read_checkpoint(p);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, c.layer_rng.size());  // both dropout layers
        const std::vector<double> rest = run(p, -1, &c, &stopped, true);
        part.insert(part.end(), rest.begin(), rest.end());
        CPPUNIT_ASSERT_EQUAL(full.size(), part.size());
        for (size_t i = 0; i < full.size(); ++i) CPPUNIT_ASSERT_EQUAL(full[i], part[i]);
        // a checkpoint whose dropout states do not fit the model is refused
        Checkpoint bad = c;
        bad.layer_rng.pop_back();
        CPPUNIT_ASSERT_THROW(run(p, -1, &bad, &stopped, true), TrainError);
    }

    // The prefetching loader (a background thread gathering step k+1 during step k) must
    // not change a single bit: same step losses and final weights as the synchronous
    // gather, also across a stop and resume; and it must really have prefetched.
    void test_prefetch_same_trajectory() {
        std::vector<float> w_off, w_on;
        int64_t pf_off = -1, pf_on = -1;
        const std::vector<double> off = run_gather_mix(false, &w_off, &pf_off);
        const std::vector<double> on = run_gather_mix(true, &w_on, &pf_on);
        CPPUNIT_ASSERT_EQUAL(size_t{12}, off.size());  // 3 epochs x floor(70/15) steps
        CPPUNIT_ASSERT_EQUAL(int64_t{0}, pf_off);
        // every step but the first of each epoch had its batch gathered in advance
        CPPUNIT_ASSERT_EQUAL(int64_t{9}, pf_on);
        CPPUNIT_ASSERT_EQUAL(off.size(), on.size());
        for (size_t i = 0; i < off.size(); ++i) CPPUNIT_ASSERT_EQUAL(off[i], on[i]);  // bit for bit
        CPPUNIT_ASSERT(w_off == w_on);
        // stopped in epoch 2 with a batch in flight, resumed with prefetch: the same again
        const tula_test::TempDir p_dir("ckpt");
        const std::string p = p_dir / "pf.ckpt";
        std::vector<double> part = run_gather_mix(true, nullptr, nullptr, p, 5);
        CPPUNIT_ASSERT_EQUAL(size_t{7}, part.size());
        const Checkpoint c = read_checkpoint(p);
        std::vector<float> w_res;
        const std::vector<double> rest = run_gather_mix(true, &w_res, nullptr, p, -1, &c);
        part.insert(part.end(), rest.begin(), rest.end());
        CPPUNIT_ASSERT_EQUAL(off.size(), part.size());
        for (size_t i = 0; i < off.size(); ++i) CPPUNIT_ASSERT_EQUAL(off[i], part[i]);
        CPPUNIT_ASSERT(w_off == w_res);
    }

    void test_metrics_lines() {
        const tula_test::TempDir p_dir("ckpt");
        const std::string p = p_dir / "m.jsonl";
        {
            MetricsLog log(p, false);
            StepRecord s;
            s.step = 5;
            s.epoch = 1;
            s.loss = 0.1 + 0.2;  // not exactly representable: must read back identically
            s.lr = 0.05;
            s.grad_norm = 1.5;
            s.seconds = 0.25;
            s.images_per_second = 256;
            s.gather_seconds = 0.125;
            s.trust_min = 0.25;
            s.trust_max = 4.0;
            log.step(s);
            log.step(StepRecord{});  // an engine that does not report the factors
            EpochResult e;
            e.epoch = 1;
            e.test_accuracy = 0.875;
            e.train_loss = std::nan("");
            log.epoch(e);
        }
        {
            MetricsLog again(p, true);  // append
            again.write({{"type", "run"}});
        }
        std::ifstream in(p);
        std::string l0, l1, l2, l3, l4;
        CPPUNIT_ASSERT(std::getline(in, l1) && std::getline(in, l0) && std::getline(in, l2) && std::getline(in, l3));
        CPPUNIT_ASSERT(!std::getline(in, l4));
        const auto a = nlohmann::json::parse(l1), b = nlohmann::json::parse(l2), c = nlohmann::json::parse(l3);
        CPPUNIT_ASSERT_EQUAL(std::string("step"), a.at("type").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(int64_t{5}, a.at("step").get<int64_t>());
        CPPUNIT_ASSERT_EQUAL(0.1 + 0.2, a.at("loss").get<double>());
        CPPUNIT_ASSERT_EQUAL(256.0, a.at("images_per_second").get<double>());
        CPPUNIT_ASSERT_EQUAL(0.125, a.at("gather_seconds").get<double>());
        CPPUNIT_ASSERT_EQUAL(0.25, a.at("trust_min").get<double>());
        CPPUNIT_ASSERT_EQUAL(4.0, a.at("trust_max").get<double>());
        const auto none = nlohmann::json::parse(l0);
        CPPUNIT_ASSERT(none.at("trust_min").is_null() && none.at("trust_max").is_null());
        CPPUNIT_ASSERT_EQUAL(std::string("epoch"), b.at("type").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(0.875, b.at("test_accuracy").get<double>());
        CPPUNIT_ASSERT(b.at("train_loss").is_null());
        CPPUNIT_ASSERT_EQUAL(std::string("run"), c.at("type").get<std::string>());
        CPPUNIT_ASSERT_THROW(MetricsLog(tula_test::TempDir("ckpt") / "no/dir/m.jsonl", false), std::runtime_error);
    }

    void test_backward_callback() {
        auto m = build_model("fmnist-cnn");
        m->init(5);
        const Dataset d = make_synthetic(SyntheticSpec{Shape{1, 28, 28}, 10}, 8, 9);
        std::vector<int> idx{0, 1, 2, 3, 4, 5, 6, 7}, labels(8);
        Tensor x;
        gather_batch(d, idx.data(), 8, x, labels.data());
        SoftmaxCrossEntropy ce;
        m->zero_grad();
        ce.forward(m->forward(x, true), labels.data(), 8, nullptr);
        m->backward(ce.backward());
        const std::vector<float> ref(m->grads(), m->grads() + m->num_params());

        m->zero_grad();
        ce.forward(m->forward(x, true), labels.data(), 8, nullptr);
        std::vector<std::pair<size_t, std::vector<float>>> seen;
        m->backward(ce.backward(), [&](size_t off) {
            seen.emplace_back(off, std::vector<float>(m->grads() + off, m->grads() + m->num_params()));
        });
        CPPUNIT_ASSERT_EQUAL(m->layers().size(), seen.size());
        CPPUNIT_ASSERT_EQUAL(size_t{0}, seen.back().first);
        for (size_t i = 0; i < seen.size(); ++i) {
            if (i > 0) CPPUNIT_ASSERT(seen[i].first <= seen[i - 1].first);  // from the end towards 0
            for (size_t j = 0; j < seen[i].second.size(); ++j)
                CPPUNIT_ASSERT_EQUAL(ref[seen[i].first + j], seen[i].second[j]);
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerCheckpointTest);
