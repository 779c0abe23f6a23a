// tula-train: IDX reader and dataset. See data.hpp.
#include "data/data.hpp"
#include "core/rng.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tula {
namespace train {
namespace {

struct GzCloser {
    void operator()(gzFile_s* f) const {
        if (f) gzclose(f);
    }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes; false at a clean or unclean end of stream before n bytes.
// Errors: DataError on a zlib error (corrupt stream).
bool read_exact(gzFile f, const std::string& path, void* buf, size_t n) {
    auto* p = static_cast<unsigned char*>(buf);
    while (n > 0) {
        const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
        const int got = gzread(f, p, chunk);
        if (got < 0) {
            int err = 0;
            const char* msg = gzerror(f, &err);
            throw DataError(path + ": cannot decompress (" + (msg ? msg : "zlib error") +
                            "); the file is corrupt or truncated, reinstall it (apt-get install --reinstall "
                            "dataset-fashion-mnist)");
        }
        if (got == 0) return false;
        p += got;
        n -= static_cast<size_t>(got);
    }
    return true;
}

uint32_t be32(const unsigned char* b) {
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

const char* kTruncated = "; the file is truncated or corrupt, reinstall it (apt-get install --reinstall dataset-fashion-mnist)";

}  // namespace

std::vector<uint32_t> read_idx_dims(const std::string& path) { return read_idx_gz(path, -1).dims; }

int64_t fashion_mnist_count(const std::string& dir, bool train) {
    const std::string base = dir.empty() ? "." : dir;
    const auto dims = read_idx_dims(base + "/" + (train ? "train" : "t10k") + "-labels-idx1-ubyte.gz");
    return dims.empty() ? 0 : dims[0];
}

// max_items < 0: header only (dims), no values.
IdxArray read_idx_gz(const std::string& path, int64_t max_items) {
    errno = 0;
    GzPtr f(gzopen(path.c_str(), "rb"));
    if (!f) {
        const int e = errno;
        throw DataError(path + ": cannot open (" + (e ? std::strerror(e) : "out of memory") +
                        "); check --data-dir (apt-get install dataset-fashion-mnist provides "
                        "/usr/share/datasets/fashion-mnist)");
    }
    gzbuffer(f.get(), 1 << 17);
    unsigned char head[4];
    if (!read_exact(f.get(), path, head, 4)) throw DataError(path + ": shorter than an IDX header" + kTruncated);
    const uint32_t magic = be32(head);
    const uint32_t ndim = magic & 0xff;
    if ((magic >> 8) != 0x08 || ndim < 1 || ndim > 4) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", magic);
        throw DataError(path + ": bad magic number " + hex +
                        " (expected an unsigned-byte IDX file, 0x00000801 to 0x00000804); not an IDX file");
    }
    IdxArray a;
    uint64_t total = 1;
    for (uint32_t i = 0; i < ndim; ++i) {
        if (!read_exact(f.get(), path, head, 4)) throw DataError(path + ": header ends early" + kTruncated);
        const uint32_t d = be32(head);
        if (d == 0) throw DataError(path + ": dimension " + std::to_string(i) + " is 0; not a usable IDX file");
        a.dims.push_back(d);
        total *= d;
        if (total > (uint64_t{1} << 34)) throw DataError(path + ": dimensions too large for an IDX file");
    }
    if (max_items < 0) return a;  // header only
    uint64_t want = total;
    if (max_items > 0 && static_cast<uint64_t>(max_items) < a.dims[0]) {
        want = total / a.dims[0] * static_cast<uint64_t>(max_items);
        a.dims[0] = static_cast<uint32_t>(max_items);
    }
    a.values.resize(want);
    if (!read_exact(f.get(), path, a.values.data(), want))
        throw DataError(path + ": holds fewer values than its header says (" + std::to_string(total) + ")" + kTruncated);
    if (want == total) {
        unsigned char extra;
        if (read_exact(f.get(), path, &extra, 1))
            throw DataError(path + ": has data after the " + std::to_string(total) +
                            " values its header announces; not a valid IDX file");
    }
    return a;
}

Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path, int64_t limit, int classes) {
    IdxArray im = read_idx_gz(images_path, limit);
    IdxArray lb = read_idx_gz(labels_path, limit);
    if (im.dims.size() != 3)
        throw DataError(images_path + ": expected 3 dimensions (images, rows, columns), found " +
                        std::to_string(im.dims.size()));
    if (lb.dims.size() != 1)
        throw DataError(labels_path + ": expected 1 dimension (labels), found " + std::to_string(lb.dims.size()));
    if (im.dims[0] != lb.dims[0])
        throw DataError(images_path + " holds " + std::to_string(im.dims[0]) + " images but " + labels_path +
                        " holds " + std::to_string(lb.dims[0]) + " labels");
    if (im.dims[0] > 0x7fffffffu) throw DataError(images_path + ": too many images");
    Dataset d;
    d.count = static_cast<int>(im.dims[0]);
    d.rows = static_cast<int>(im.dims[1]);
    d.cols = static_cast<int>(im.dims[2]);
    d.classes = classes;
    for (size_t i = 0; i < lb.values.size(); ++i)
        if (lb.values[i] >= classes)
            throw DataError(labels_path + ": label " + std::to_string(lb.values[i]) + " of example " +
                            std::to_string(i) + " is not below " + std::to_string(classes));
    d.images = std::move(im.values);
    d.labels = std::move(lb.values);
    return d;
}

Dataset load_fashion_mnist(const std::string& dir, bool train, int64_t limit) {
    const std::string base = dir.empty() ? "." : dir;
    const std::string pre = base + "/" + (train ? "train" : "t10k");
    Dataset d = load_idx_pair(pre + "-images-idx3-ubyte.gz", pre + "-labels-idx1-ubyte.gz", limit, 10);
    if (d.rows != 28 || d.cols != 28)
        throw DataError(pre + "-images-idx3-ubyte.gz: images are " + std::to_string(d.rows) + "x" +
                        std::to_string(d.cols) + ", Fashion-MNIST images are 28x28");
    return d;
}

void check_example_index(const Dataset& d, int i) {
    if (i < 0 || i >= d.count)
        throw DataError("example index " + std::to_string(i) + " is outside the data set's examples 0.." +
                        std::to_string(d.count - 1));
}

void gather_batch(const Dataset& d, const int* idx, int n, Tensor& x, int* labels, float mean, float std_) {
    x.resize(n, d.channels, d.rows, d.cols);
    const size_t px = static_cast<size_t>(d.channels) * d.rows * d.cols;
    // (v/255 - mean)/std = v*a + b
    const float a = 1.0f / (255.0f * std_), b = -mean / std_;
    for (int i = 0; i < n; ++i) {
        check_example_index(d, idx[i]);
        const uint8_t* src = d.images.data() + static_cast<size_t>(idx[i]) * px;
        float* dst = x.sample(i);
        for (size_t j = 0; j < px; ++j) dst[j] = src[j] * a + b;
        labels[i] = d.labels[idx[i]];
    }
}

bool is_synthetic(const std::string& name) { return name.rfind("synthetic:", 0) == 0; }

SyntheticSpec parse_synthetic(const std::string& name) {
    const std::string form = " (expected synthetic:CxHxW:K, e.g. synthetic:3x32x32:10)";
    if (!is_synthetic(name)) throw DataError("'" + name + "' is not a synthetic data source" + form);
    const std::string rest = name.substr(10);
    int c = 0, h = 0, w = 0, k = 0, used = 0;
    if (std::sscanf(rest.c_str(), "%dx%dx%d:%d%n", &c, &h, &w, &k, &used) != 4 ||
        used != static_cast<int>(rest.size()))
        throw DataError("cannot parse data source '" + name + "'" + form);
    if (c < 1 || c > 64 || h < 1 || h > 4096 || w < 1 || w > 4096)
        throw DataError("image shape " + std::to_string(c) + "x" + std::to_string(h) + "x" +
                        std::to_string(w) + " in '" + name + "' is out of range (C 1..64, H and W 1..4096)");
    if (k < 2 || k > 256)
        throw DataError("class count " + std::to_string(k) + " in '" + name + "' is out of range (2..256)");
    return SyntheticSpec{Shape{c, h, w}, k};
}

Dataset make_synthetic(const SyntheticSpec& spec, int count, uint64_t seed) {
    if (count < 0) throw DataError("negative synthetic example count");
    const size_t px = spec.shape.size();
    if (static_cast<double>(px) * count > 8.0 * (1ull << 30))
        throw DataError("synthetic data set of " + std::to_string(count) + " images of " +
                        spec.shape.str() + " would exceed 8 GiB; use --limit-train / --limit-test");
    Dataset d;
    d.count = count;
    d.channels = spec.shape.c;
    d.rows = spec.shape.h;
    d.cols = spec.shape.w;
    d.classes = spec.classes;
    d.images.resize(px * count);
    d.labels.resize(count);
    Rng rng(seed);
    for (auto& v : d.images) v = static_cast<uint8_t>(rng.uniform() * 256.0);
    for (int i = 0; i < count; ++i) d.labels[i] = static_cast<uint8_t>(i % spec.classes);
    return d;
}

void split_validation(Dataset& train, int64_t n, Dataset& val) {
    if (n < 0 || n >= train.count)
        throw DataError("a validation split of " + std::to_string(n) + " examples needs 0 <= N < the " +
                        std::to_string(train.count) + " training examples (after --limit-train)");
    const size_t per = static_cast<size_t>(train.channels) * train.rows * train.cols;
    const int keep = train.count - static_cast<int>(n);
    val = train;  // shape, classes and normalisation; then only the last n examples
    val.count = static_cast<int>(n);
    val.images.erase(val.images.begin(), val.images.begin() + keep * per);
    val.labels.erase(val.labels.begin(), val.labels.begin() + keep);
    train.images.resize(keep * per);
    train.labels.resize(keep);
    train.count = keep;
}

}  // namespace train
}  // namespace tula
