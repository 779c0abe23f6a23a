// Unit tests of tula-train's CIFAR-10/100 binary reader and training augmentation: small
// files written here in the documented record layout read back exactly (labels, pixel
// planes, the fine label of CIFAR-100, --limit); a truncated file, an out-of-range label and
// a missing file raise DataError; pixel_stats against a direct two-pass computation; every
// augmented image equals a naive reference (the image shifted by one of the allowed crop
// offsets, zero padding, optionally mirrored), and both flips and several offsets occur.
#include <cppunit/extensions/HelperMacros.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "data/data.hpp"
#include "test_util.hpp"
#include "core/rng.hpp"

using namespace tula::train;

namespace {


// Record r of file f: label(s) then pixel k = (f * 7 + r * 13 + k) % 256.
void write_file(const std::string& path, int records, int label_bytes, int f, int classes) {
    std::FILE* o = std::fopen(path.c_str(), "wb");
    CPPUNIT_ASSERT(o);
    for (int r = 0; r < records; ++r) {
        if (label_bytes == 2) std::fputc((f + r) % 20, o);  // coarse label
        std::fputc((f + r) % classes, o);
        for (int k = 0; k < 3072; ++k) std::fputc((f * 7 + r * 13 + k) % 256, o);
    }
    std::fclose(o);
}

}  // namespace

class TrainerCifarTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerCifarTest);
    CPPUNIT_TEST(test_cifar10);
    CPPUNIT_TEST(test_cifar100_and_errors);
    CPPUNIT_TEST(test_pixel_stats);
    CPPUNIT_TEST(test_augment);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_cifar10() {
        const tula_test::TempDir d_dir("cifar");
        const std::string d = d_dir.path;
        for (int f = 1; f <= 5; ++f) write_file(d + "/data_batch_" + std::to_string(f) + ".bin", 2, 1, f, 10);
        write_file(d + "/test_batch.bin", 3, 1, 0, 10);
        const CifarSpec spec = parse_cifar("cifar10:" + d);
        CPPUNIT_ASSERT_EQUAL(10, spec.classes);
        const Dataset tr = load_cifar(spec, true);
        CPPUNIT_ASSERT_EQUAL(10, tr.count);
        CPPUNIT_ASSERT_EQUAL(3, tr.channels);
        CPPUNIT_ASSERT_EQUAL(32, tr.rows);
        for (int i = 0; i < 10; ++i) {
            const int f = 1 + i / 2, r = i % 2;
            CPPUNIT_ASSERT_EQUAL((f + r) % 10, static_cast<int>(tr.labels[i]));
            for (int k : {0, 1023, 1024, 3071})
                CPPUNIT_ASSERT_EQUAL((f * 7 + r * 13 + k) % 256, static_cast<int>(tr.images[static_cast<size_t>(i) * 3072 + k]));
        }
        CPPUNIT_ASSERT_EQUAL(3, load_cifar(spec, false).count);
        CPPUNIT_ASSERT_EQUAL(3, load_cifar(spec, true, 3).count);  // --limit-train
    }

    void test_cifar100_and_errors() {
        const tula_test::TempDir d_dir("cifar");
        const std::string d = d_dir.path;
        write_file(d + "/train.bin", 4, 2, 50, 100);
        write_file(d + "/test.bin", 2, 2, 98, 100);
        const Dataset tr = load_cifar(parse_cifar("cifar100:" + d), true);
        CPPUNIT_ASSERT_EQUAL(4, tr.count);
        for (int i = 0; i < 4; ++i) CPPUNIT_ASSERT_EQUAL((50 + i) % 100, static_cast<int>(tr.labels[i]));  // the fine label
        CPPUNIT_ASSERT_EQUAL((50 * 7 + 13 + 5) % 256, static_cast<int>(tr.images[3072 + 5]));
        // truncated
        std::FILE* o = std::fopen((d + "/test.bin").c_str(), "ab");
        std::fputc(1, o);
        std::fclose(o);
        tula_test::assert_throws_with<DataError>([&] { load_cifar(parse_cifar("cifar100:" + d), false); }, "not a whole number");
        // CIFAR-100 files read as CIFAR-10: labels out of range (or sizes) are refused
        const tula_test::TempDir e_dir("cifar");
        const std::string e = e_dir.path;
        for (int f = 1; f <= 5; ++f) write_file(e + "/data_batch_" + std::to_string(f) + ".bin", 1, 1, 20 + f, 100);
        tula_test::assert_throws_with<DataError>([&] { load_cifar(parse_cifar("cifar10:" + e), true); }, "label");
        tula_test::assert_throws_with<DataError>([&] { load_cifar(parse_cifar("cifar10:" + e), false); }, "cannot open");
        tula_test::assert_throws_with<DataError>([&] { parse_cifar("cifar10:"); }, "names no directory");
    }

    void test_pixel_stats() {
        const Dataset d = make_synthetic(SyntheticSpec{Shape{3, 8, 8}, 10}, 50, 4);
        double m = 0, s = 0;
        pixel_stats(d, &m, &s);
        double sum = 0;
        for (uint8_t v : d.images) sum += v / 255.0;
        const double mean = sum / d.images.size();
        double ss = 0;
        for (uint8_t v : d.images) ss += (v / 255.0 - mean) * (v / 255.0 - mean);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(mean, m, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::sqrt(ss / d.images.size()), s, 1e-9);
    }

    void test_augment() {
        Dataset d = make_synthetic(SyntheticSpec{Shape{3, 12, 10}, 10}, 40, 6);
        d.mean = 0.5f;
        d.std = 0.25f;
        std::vector<int> idx(40), labels(40);
        for (int i = 0; i < 40; ++i) idx[i] = (i * 7) % 40;
        Augment aug;
        aug.crop_pad = 3;
        aug.flip = true;
        Rng rng(11);
        Tensor x;
        gather_batch_augmented(d, idx.data(), 40, x, labels.data(), aug, rng);
        const int C = 3, H = 12, W = 10, P = 3;
        std::set<int> flips, offsets;
        for (int i = 0; i < 40; ++i) {
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(d.labels[idx[i]]), labels[i]);
            const uint8_t* src = d.images.data() + static_cast<size_t>(idx[i]) * C * H * W;
            bool found = false;
            for (int mir = 0; mir < 2 && !found; ++mir)
                for (int dy = -P; dy <= P && !found; ++dy)
                    for (int dx = -P; dx <= P && !found; ++dx) {
                        bool same = true;
                        for (int c = 0; c < C && same; ++c)
                            for (int y = 0; y < H && same; ++y)
                                for (int xx = 0; xx < W && same; ++xx) {
                                    const int sy = y + dy, sx = (mir ? W - 1 - xx : xx) + dx;
                                    const float ref = (sy < 0 || sy >= H || sx < 0 || sx >= W)
                                                          ? 0.0f
                                                          : (src[(c * H + sy) * W + sx] / 255.0f - 0.5f) / 0.25f;
                                    same = std::fabs(x.sample(i)[(c * H + y) * W + xx] - ref) <= 1e-5f;
                                }
                        if (same) {
                            found = true;
                            flips.insert(mir);
                            offsets.insert((dy + P) * 7 + dx + P);
                        }
                    }
            CPPUNIT_ASSERT_MESSAGE("image " + std::to_string(i) + " is no allowed crop/flip of its source", found);
        }
        CPPUNIT_ASSERT_EQUAL(size_t{2}, flips.size());
        CPPUNIT_ASSERT(offsets.size() >= 10);
        // no augmentation: the plain gather
        Tensor y, z;
        Rng r2(1);
        gather_batch_augmented(d, idx.data(), 40, y, labels.data(), Augment{}, r2);
        gather_batch(d, idx.data(), 40, z, labels.data(), 0.5f, 0.25f);
        CPPUNIT_ASSERT(y.data == z.data);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerCifarTest);
