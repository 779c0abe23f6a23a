// tula-train: CIFAR-10/100 binary files, pixel statistics, augmented batches. See data.hpp.
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "data/data.hpp"

namespace tula {
namespace train {

namespace {
constexpr size_t kPixels = 3 * 32 * 32;

bool is_dir(const std::string& p) {
    struct stat sb;
    return ::stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

// Appends the records of one binary file to d (label at byte `label_at` of each record of
// `label_bytes` + 3072 bytes), stopping at `limit` examples (> 0). Errors: DataError.
void read_records(const std::string& path, int label_bytes, int label_at, int classes, int64_t limit, Dataset& d) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw DataError(path + ": cannot open (" + std::strerror(errno) +
                        "); --data cifar10:DIR / cifar100:DIR needs the binary version of the data set in DIR");
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    const size_t rec = static_cast<size_t>(label_bytes) + kPixels;
    if (size <= 0 || static_cast<size_t>(size) % rec != 0) {
        std::fclose(f);
        throw DataError(path + ": " + std::to_string(size) + " bytes is not a whole number of " + std::to_string(rec) +
                        "-byte records (truncated or not a CIFAR binary file)");
    }
    int64_t n = static_cast<int64_t>(static_cast<size_t>(size) / rec);
    if (limit > 0) n = std::min<int64_t>(n, limit - d.count);
    std::vector<uint8_t> buf(rec);
    for (int64_t i = 0; i < n; ++i) {
        if (std::fread(buf.data(), 1, rec, f) != rec) {
            std::fclose(f);
            throw DataError(path + ": read error at record " + std::to_string(i));
        }
        const int label = buf[static_cast<size_t>(label_at)];
        if (label >= classes) {
            std::fclose(f);
            throw DataError(path + ": record " + std::to_string(i) + " has label " + std::to_string(label) +
                            ", outside 0.." + std::to_string(classes - 1) + " (is it the other CIFAR?)");
        }
        d.labels.push_back(static_cast<uint8_t>(label));
        d.images.insert(d.images.end(), buf.begin() + label_bytes, buf.end());
        ++d.count;
    }
    std::fclose(f);
}
}  // namespace

bool is_cifar(const std::string& name) { return name.rfind("cifar10:", 0) == 0 || name.rfind("cifar100:", 0) == 0; }

CifarSpec parse_cifar(const std::string& name) {
    CifarSpec s;
    if (name.rfind("cifar10:", 0) == 0) {
        s.classes = 10;
        s.dir = name.substr(8);
    } else if (name.rfind("cifar100:", 0) == 0) {
        s.classes = 100;
        s.dir = name.substr(9);
    } else {
        throw DataError("'" + name + "' is not a CIFAR data source (expected cifar10:DIR or cifar100:DIR)");
    }
    if (s.dir.empty()) throw DataError("'" + name + "' names no directory (expected e.g. cifar10:/data/cifar-10-batches-bin)");
    return s;
}

Dataset load_cifar(const CifarSpec& spec, bool train, int64_t limit) {
    std::string dir = spec.dir;
    const std::string sub = dir + (spec.classes == 10 ? "/cifar-10-batches-bin" : "/cifar-100-binary");
    if (is_dir(sub)) dir = sub;
    Dataset d;
    d.channels = 3;
    d.rows = d.cols = 32;
    d.classes = spec.classes;
    std::vector<std::string> files;
    if (spec.classes == 10) {
        if (train)
            for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
        else
            files.push_back(dir + "/test_batch.bin");
    } else {
        files.push_back(dir + (train ? "/train.bin" : "/test.bin"));
    }
    for (const auto& f : files) {
        if (limit > 0 && d.count >= limit) break;
        if (spec.classes == 10) read_records(f, 1, 0, 10, limit, d);
        else read_records(f, 2, 1, 100, limit, d);
    }
    return d;
}

void pixel_stats(const Dataset& d, double* mean, double* std) {
    double s = 0, s2 = 0;
    for (uint8_t v : d.images) {
        s += v;
        s2 += static_cast<double>(v) * v;
    }
    const double n = static_cast<double>(d.images.size());
    const double m = n > 0 ? s / n : 0, var = n > 0 ? std::max(0.0, s2 / n - m * m) : 0;
    *mean = m / 255.0;
    *std = std::sqrt(var) / 255.0;
}

void gather_batch_augmented(const Dataset& d, const int* idx, int n, Tensor& x, int* labels, const Augment& aug,
                            Rng& rng) {
    if (!aug.any()) {
        gather_batch(d, idx, n, x, labels, d.mean, d.std);
        return;
    }
    x.resize(n, d.channels, d.rows, d.cols);
    const int H = d.rows, W = d.cols, C = d.channels, p = aug.crop_pad;
    const size_t px = static_cast<size_t>(C) * H * W;
    const float a = 1.0f / (255.0f * d.std), b = -d.mean / d.std;
    for (int i = 0; i < n; ++i) {
        check_example_index(d, idx[i]);
        // the output pixel (y, x) shows input pixel (y + dy, x + dx), or the padding (0)
        const int dy = p > 0 ? static_cast<int>(rng.below(2 * p + 1)) - p : 0;
        const int dx = p > 0 ? static_cast<int>(rng.below(2 * p + 1)) - p : 0;
        const bool mirror = aug.flip && rng.below(2) == 1;
        const uint8_t* src = d.images.data() + static_cast<size_t>(idx[i]) * px;
        float* dst = x.sample(i);
        for (int c = 0; c < C; ++c)
            for (int yy = 0; yy < H; ++yy) {
                const int sy = yy + dy;
                float* row = dst + (static_cast<size_t>(c) * H + yy) * W;
                for (int xx = 0; xx < W; ++xx) {
                    const int sx = (mirror ? W - 1 - xx : xx) + dx;
                    row[xx] = (sy < 0 || sy >= H || sx < 0 || sx >= W)
                                  ? 0.0f
                                  : src[(static_cast<size_t>(c) * H + sy) * W + sx] * a + b;
                }
            }
        labels[i] = d.labels[idx[i]];
    }
}

}  // namespace train
}  // namespace tula
