// Unit tests of tula-train's IDX reader: a small valid gzip IDX pair written to a
// temporary directory reads back exactly; truncated files, a bad magic number, a missing
// file, mismatched counts, out-of-range labels and a broken gzip stream raise DataError.
// Also the batch gather's normalization, and the prefetching loader (BatchLoader): its batches
// equal direct gathers, the two buffers stay apart, and an error met on the loader thread
// reaches the caller as the same DataError the synchronous gather raises.
#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "test_util.hpp"
#include "core/model.hpp"
#include "train/prefetch.hpp"
#include "train/train.hpp"

using namespace tula::train;

namespace {

std::vector<unsigned char> be32(uint32_t v) {
    return {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 8),
            static_cast<unsigned char>(v)};
}

// IDX bytes: magic 0x000008<ndim>, the dims, then `values`.
std::vector<unsigned char> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<unsigned char>& values,
                                     uint32_t magic = 0) {
    std::vector<unsigned char> out = be32(magic ? magic : 0x00000800u | static_cast<uint32_t>(dims.size()));
    for (uint32_t d : dims) {
        auto b = be32(d);
        out.insert(out.end(), b.begin(), b.end());
    }
    out.insert(out.end(), values.begin(), values.end());
    return out;
}

void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    CPPUNIT_ASSERT_MESSAGE("gzopen " + path, f != nullptr);
    if (!bytes.empty()) CPPUNIT_ASSERT(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0);
    CPPUNIT_ASSERT_EQUAL(Z_OK, gzclose(f));
}

}  // namespace

class TrainerDataTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerDataTest);
    CPPUNIT_TEST(test_reads_valid_pair);
    CPPUNIT_TEST(test_limit_reads_prefix);
    CPPUNIT_TEST(test_fashion_mnist_layout);
    CPPUNIT_TEST(test_truncated_values);
    CPPUNIT_TEST(test_truncated_header);
    CPPUNIT_TEST(test_truncated_gzip_stream);
    CPPUNIT_TEST(test_bad_magic);
    CPPUNIT_TEST(test_missing_file);
    CPPUNIT_TEST(test_trailing_data);
    CPPUNIT_TEST(test_count_mismatch_and_bad_label);
    CPPUNIT_TEST(test_gather_normalizes);
    CPPUNIT_TEST(test_synthetic_spec_parsing);
    CPPUNIT_TEST(test_synthetic_data_set);
    CPPUNIT_TEST(test_loader_batches_and_errors);
    CPPUNIT_TEST(test_trainer_prefetch_error);
    CPPUNIT_TEST_SUITE_END();

    std::string dir_;
    std::vector<unsigned char> pixels_, labels_;
    static constexpr uint32_t kN = 5, kR = 4, kC = 3;

public:
    void setUp() override {
        char tmpl[] = "/tmp/tula-test-idx-XXXXXX";
        const char* d = mkdtemp(tmpl);
        CPPUNIT_ASSERT(d != nullptr);
        dir_ = d;
        pixels_.resize(kN * kR * kC);
        for (size_t i = 0; i < pixels_.size(); ++i) pixels_[i] = static_cast<unsigned char>((i * 37 + 11) % 256);
        labels_ = {3, 0, 9, 1, 7};
    }
    void tearDown() override {
        for (const char* f : {"img.gz", "lab.gz", "x.gz", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
            std::remove((dir_ + "/" + f).c_str());
        rmdir(dir_.c_str());
    }
    std::string p(const char* name) const { return dir_ + "/" + name; }
    void write_pair() {
        write_gz(p("img.gz"), idx_bytes({kN, kR, kC}, pixels_));
        write_gz(p("lab.gz"), idx_bytes({kN}, labels_));
    }

    void test_reads_valid_pair() {
        write_pair();
        const Dataset d = load_idx_pair(p("img.gz"), p("lab.gz"));
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kN), d.count);
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kR), d.rows);
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kC), d.cols);
        CPPUNIT_ASSERT(d.images == std::vector<uint8_t>(pixels_.begin(), pixels_.end()));
        CPPUNIT_ASSERT(d.labels == std::vector<uint8_t>(labels_.begin(), labels_.end()));
        const IdxArray a = read_idx_gz(p("img.gz"));
        CPPUNIT_ASSERT(a.dims == std::vector<uint32_t>({kN, kR, kC}));
        CPPUNIT_ASSERT(read_idx_dims(p("img.gz")) == std::vector<uint32_t>({kN, kR, kC}));
    }

    void test_limit_reads_prefix() {
        write_pair();
        const Dataset d = load_idx_pair(p("img.gz"), p("lab.gz"), 2);
        CPPUNIT_ASSERT_EQUAL(2, d.count);
        CPPUNIT_ASSERT(d.images == std::vector<uint8_t>(pixels_.begin(), pixels_.begin() + 2 * kR * kC));
        CPPUNIT_ASSERT_EQUAL(static_cast<uint8_t>(0), d.labels[1]);
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kN), load_idx_pair(p("img.gz"), p("lab.gz"), 99).count);
    }

    void test_fashion_mnist_layout() {
        // the directory layout and the 28x28 check of load_fashion_mnist
        write_gz(p("train-images-idx3-ubyte.gz"), idx_bytes({kN, kR, kC}, pixels_));
        write_gz(p("train-labels-idx1-ubyte.gz"), idx_bytes({kN}, labels_));
        tula_test::assert_throws_with<DataError>([&] { load_fashion_mnist(dir_, true); }, "28x28");
        std::vector<unsigned char> big(2 * 784, 7);
        write_gz(p("train-images-idx3-ubyte.gz"), idx_bytes({2, 28, 28}, big));
        write_gz(p("train-labels-idx1-ubyte.gz"), idx_bytes({2}, {4, 5}));
        const Dataset d = load_fashion_mnist(dir_, true);
        CPPUNIT_ASSERT_EQUAL(2, d.count);
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(2), fashion_mnist_count(dir_, true));
        tula_test::assert_throws_with<DataError>([&] { load_fashion_mnist(dir_, false); }, "t10k-images-idx3-ubyte.gz");  // missing
    }

    void test_truncated_values() {
        std::vector<unsigned char> short_pixels(pixels_.begin(), pixels_.end() - 5);
        write_gz(p("img.gz"), idx_bytes({kN, kR, kC}, short_pixels));
        write_gz(p("lab.gz"), idx_bytes({kN}, labels_));
        tula_test::assert_throws_with<DataError>([&] { load_idx_pair(p("img.gz"), p("lab.gz")); }, "truncated");
    }

    void test_truncated_header() {
        std::vector<unsigned char> b = idx_bytes({kN, kR, kC}, {});
        b.resize(9);  // magic and half the dimensions
        write_gz(p("x.gz"), b);
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("x.gz")); }, "truncated");
        write_gz(p("x.gz"), {});
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("x.gz")); }, "truncated");
    }

    void test_truncated_gzip_stream() {
        write_pair();
        std::vector<char> raw = tula_test::read_bytes(p("img.gz"));
        CPPUNIT_ASSERT(raw.size() > 30);
        raw.resize(raw.size() / 2);  // cut the compressed stream itself
        tula_test::write_bytes(p("img.gz"), raw);
        bool threw = false;
        try {
            read_idx_gz(p("img.gz"));
        } catch (const DataError&) {
            threw = true;
        }
        CPPUNIT_ASSERT(threw);
    }

    void test_bad_magic() {
        write_gz(p("x.gz"), idx_bytes({kN, kR, kC}, pixels_, 0x00000d03u));  // float data, not unsigned bytes
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("x.gz")); }, "bad magic number 0x00000d03");
        write_gz(p("x.gz"), idx_bytes({kN, kR, kC}, pixels_, 0x12345678u));
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("x.gz")); }, "bad magic");
    }

    void test_missing_file() {
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("nope.gz")); }, "cannot open");
    }

    void test_trailing_data() {
        std::vector<unsigned char> more = pixels_;
        more.push_back(1);
        write_gz(p("x.gz"), idx_bytes({kN, kR, kC}, more));
        tula_test::assert_throws_with<DataError>([&] { read_idx_gz(p("x.gz")); }, "after");
    }

    void test_count_mismatch_and_bad_label() {
        write_gz(p("img.gz"), idx_bytes({kN, kR, kC}, pixels_));
        write_gz(p("lab.gz"), idx_bytes({kN - 1}, {1, 2, 3, 4}));
        tula_test::assert_throws_with<DataError>([&] { load_idx_pair(p("img.gz"), p("lab.gz")); }, "labels");
        write_gz(p("lab.gz"), idx_bytes({kN}, {1, 2, 10, 4, 5}));
        tula_test::assert_throws_with<DataError>([&] { load_idx_pair(p("img.gz"), p("lab.gz")); }, "label 10");
        write_gz(p("lab.gz"), idx_bytes({kN, 1}, labels_));  // two dimensions
        tula_test::assert_throws_with<DataError>([&] { load_idx_pair(p("img.gz"), p("lab.gz")); }, "1 dimension");
    }

    void test_gather_normalizes() {
        write_pair();
        const Dataset d = load_idx_pair(p("img.gz"), p("lab.gz"));
        const int idx[3] = {4, 0, 2};
        Tensor x;
        int labels[3];
        gather_batch(d, idx, 3, x, labels);
        CPPUNIT_ASSERT_EQUAL(3, x.n);
        CPPUNIT_ASSERT_EQUAL(1, x.c);
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kR), x.h);
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(kC), x.w);
        for (int i = 0; i < 3; ++i) {
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(labels_[idx[i]]), labels[i]);
            for (uint32_t j = 0; j < kR * kC; ++j) {
                const double v = pixels_[idx[i] * kR * kC + j];
                CPPUNIT_ASSERT_DOUBLES_EQUAL((v / 255.0 - 0.2860) / 0.3530, x.sample(i)[j], 1e-5);
            }
        }
        // an index outside the set is a DataError naming it, never a read out of bounds
        for (int bad : {-1, d.count}) {
            const int idx2[2] = {0, bad};
            std::string what;
            try {
                gather_batch(d, idx2, 2, x, labels);
            } catch (const DataError& e) {
                what = e.what();
            }
            CPPUNIT_ASSERT_MESSAGE(what, what.find("example index " + std::to_string(bad)) != std::string::npos);
            Augment aug;
            aug.flip = true;
            Rng rng(1);
            what.clear();
            try {
                gather_batch_augmented(d, idx2, 2, x, labels, aug, rng);
            } catch (const DataError& e) {
                what = e.what();
            }
            CPPUNIT_ASSERT_MESSAGE(what, what.find("example index " + std::to_string(bad)) != std::string::npos);
        }
    }

    void test_synthetic_spec_parsing() {
        const SyntheticSpec sp = parse_synthetic("synthetic:3x32x30:100");
        CPPUNIT_ASSERT(sp.shape == (Shape{3, 32, 30}));
        CPPUNIT_ASSERT_EQUAL(100, sp.classes);
        CPPUNIT_ASSERT(is_synthetic("synthetic:1x2x2:2"));
        CPPUNIT_ASSERT(!is_synthetic("fashion-mnist"));
        for (const char* bad : {"synthetic:", "synthetic:3x32x32", "synthetic:3x32x32:10x", "synthetic:0x32x32:10",
                                "synthetic:3x32x32:1", "synthetic:3x32x32:257", "synthetic:3x-1x32:10",
                                "synthetic:3x32:10", "cifar"})
            CPPUNIT_ASSERT_THROW_MESSAGE(bad, parse_synthetic(bad), DataError);
    }

    void test_synthetic_data_set() {
        const SyntheticSpec sp = parse_synthetic("synthetic:3x4x5:7");
        const Dataset a = make_synthetic(sp, 20, 9), b = make_synthetic(sp, 20, 9), c = make_synthetic(sp, 20, 10);
        CPPUNIT_ASSERT_EQUAL(20, a.count);
        CPPUNIT_ASSERT_EQUAL(3, a.channels);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(20 * 60), a.images.size());
        CPPUNIT_ASSERT(a.images == b.images);  // same seed, same data
        CPPUNIT_ASSERT(a.images != c.images);
        for (int i = 0; i < 20; ++i) CPPUNIT_ASSERT_EQUAL(i % 7, static_cast<int>(a.labels[i]));
        // gather_batch keeps all channels: x (2, 3, 4, 5) = (pixel/255 - mean)/std
        const int idx[2] = {4, 11};
        int labels[2];
        Tensor x;
        gather_batch(a, idx, 2, x, labels, 0.5f, 0.25f);
        CPPUNIT_ASSERT_EQUAL(std::string("(2, 3, 4, 5)"), x.str());
        for (int n = 0; n < 2; ++n)
            for (int j = 0; j < 60; ++j)
                CPPUNIT_ASSERT_DOUBLES_EQUAL((a.images[idx[n] * 60 + j] / 255.0 - 0.5) / 0.25, x.sample(n)[j], 1e-5);
        CPPUNIT_ASSERT_EQUAL(4 % 7, labels[0]);
        CPPUNIT_ASSERT_THROW(make_synthetic(sp, -1, 1), DataError);
    }

    // The direct gather a BatchLoader batch must equal.
    static Batch direct(const Dataset& d, const std::vector<int>& idx, const Augment& aug, uint64_t seed) {
        Batch b;
        b.labels.resize(idx.size());
        Rng rng(seed);
        gather_batch_augmented(d, idx.data(), static_cast<int>(idx.size()), b.x, b.labels.data(), aug, rng);
        return b;
    }
    static bool same(const Batch& a, const Batch& b) {
        return a.x.n == b.x.n && a.x.data == b.x.data && a.labels == b.labels;
    }
    static std::string error_of(BatchLoader& L, const Dataset& d, const std::vector<int>& idx, const Augment& aug) {
        try {
            L.take(d, idx.data(), static_cast<int>(idx.size()), aug, 1);
        } catch (const DataError& e) {
            return e.what();
        }
        return "";
    }

    void test_loader_batches_and_errors() {
        const Dataset d = make_synthetic(parse_synthetic("synthetic:2x6x5:3"), 20, 4);
        Augment aug;
        aug.crop_pad = 2;
        aug.flip = true;
        const std::vector<int> i1 = {3, 19, 0, 7, 7}, i2 = {5, 1, 12}, bad = {2, 20};
        BatchLoader L(true);
        CPPUNIT_ASSERT(L.threaded());
        // prefetched: the loader thread's batch, equal to the direct gather
        L.submit(BatchKey{&d, i1, aug, 42});
        const Batch& b1 = L.take(d, i1.data(), 5, aug, 42);
        CPPUNIT_ASSERT_EQUAL(int64_t{1}, L.hits());
        CPPUNIT_ASSERT(same(b1, direct(d, i1, aug, 42)));
        // the next one goes to the other buffer: b1 is intact while and after it is gathered
        L.submit(BatchKey{&d, i2, aug, 43});
        const Batch& b2 = L.take(d, i2.data(), 3, aug, 43);
        CPPUNIT_ASSERT_EQUAL(int64_t{2}, L.hits());
        CPPUNIT_ASSERT(&b1 != &b2);
        CPPUNIT_ASSERT(same(b1, direct(d, i1, aug, 42)));
        CPPUNIT_ASSERT(same(b2, direct(d, i2, aug, 43)));
        // another seed (or examples) than prefetched: gathered anew, never the stale batch
        L.submit(BatchKey{&d, i1, aug, 44});
        CPPUNIT_ASSERT(same(L.take(d, i1.data(), 5, aug, 45), direct(d, i1, aug, 45)));
        CPPUNIT_ASSERT_EQUAL(int64_t{1}, L.misses());
        // an index outside the set: the loader thread's DataError, rethrown by take() with
        // the message of the synchronous gather
        BatchLoader sync(false);
        CPPUNIT_ASSERT(!sync.threaded());
        const std::string want = error_of(sync, d, bad, aug);
        CPPUNIT_ASSERT(want.find("example index 20 is outside the data set of 20 examples") != std::string::npos);
        L.submit(BatchKey{&d, bad, aug, 1});
        CPPUNIT_ASSERT_EQUAL(want, error_of(L, d, bad, aug));
        CPPUNIT_ASSERT_EQUAL(int64_t{3}, L.hits());  // it came from the thread
        // still usable afterwards; destroyed with a job in flight: joins, no crash
        L.submit(BatchKey{&d, i2, aug, 7});
        CPPUNIT_ASSERT(same(L.take(d, i2.data(), 3, aug, 7), direct(d, i2, aug, 7)));
        L.submit(BatchKey{&d, i1, aug, 8});
    }

    // Trainer::step with prefetch: an announced batch the loader cannot gather fails the
    // step that takes it, with the synchronous path's DataError, not std::terminate.
    void test_trainer_prefetch_error() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x12x12:4");
        const Dataset d = make_synthetic(spec, 16, 2);
        const std::vector<int> good = {0, 1, 2, 3}, bad = {4, 5, -1, 6};
        std::string msg[2];
        for (int on = 0; on < 2; ++on) {
            auto m = build_model("lenet5", spec.shape, spec.classes);
            m->init(1);
            Comm serial;
            Trainer tr(*m, serial, 0.9, 0.0);
            tr.set_prefetch(on == 1);
            tr.prefetch(d, bad.data(), 4);
            tr.step(d, good.data(), 4, 0.01, true, nullptr);
            try {
                tr.step(d, bad.data(), 4, 0.01, true, nullptr);
                CPPUNIT_FAIL("no DataError for example index -1");
            } catch (const DataError& e) {
                msg[on] = e.what();
            }
            CPPUNIT_ASSERT_EQUAL(int64_t{on}, tr.prefetched());
            tr.step(d, good.data(), 4, 0.01, true, nullptr);  // goes on after the error
        }
        CPPUNIT_ASSERT(msg[0].find("example index -1 is outside the data set of 16 examples") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(msg[0], msg[1]);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerDataTest);
