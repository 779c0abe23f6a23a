// tula-train: the IDX reader (gzip-compressed, via zlib) and the Fashion-MNIST dataset.
//
// IDX format (LeCun et al., the MNIST distribution): big-endian 32-bit magic
// 0x000008TD with T the element type (0x08 = unsigned byte) and D the number of
// dimensions, then D big-endian 32-bit sizes, then the elements, row-major.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace tula {
namespace train {

/// What the data functions throw. what() names the file and says what was wrong.
struct DataError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// An unsigned-byte IDX array: dims (e.g. {60000, 28, 28}) and the values, row-major.
struct IdxArray {
    std::vector<uint32_t> dims;
    std::vector<uint8_t> values;
};

/// Reads a gzip-compressed (or plain: zlib reads both) IDX file of unsigned bytes.
/// `max_items` > 0 reads only the first max_items entries of dimension 0 (the file's
/// header and the sizes are still checked against each other); max_items < 0 reads only
/// the header (dims, no values).
/// Errors (DataError): missing / unreadable file, a magic number that is not an
/// unsigned-byte IDX magic (0x00000801..0x00000804), a zero dimension, a file shorter than
/// its header says (truncated), or longer (trailing data), a gzip stream error.
IdxArray read_idx_gz(const std::string& path, int64_t max_items = 0);

/// The dimensions of an IDX file (header only; the values are not read or checked).
/// Errors: DataError as read_idx_gz for the header.
std::vector<uint32_t> read_idx_dims(const std::string& path);

/// Number of training (train = true) or test examples of the Fashion-MNIST copy in `dir`,
/// from the label file's header. Errors: DataError.
int64_t fashion_mnist_count(const std::string& dir, bool train);

/// A labelled image set kept as bytes (normalized when a batch is gathered).
struct Dataset {
    int count = 0;     ///< examples
    int rows = 0;      ///< image height, pixels
    int cols = 0;      ///< image width, pixels
    int classes = 10;  ///< labels are in [0, classes)
    int channels = 1;  ///< colour planes per image
    std::vector<uint8_t> images;  ///< (count, channels, rows, cols), pixel values 0..255
    std::vector<uint8_t> labels;  ///< (count,)
    /// Normalization of gather_batch: x = (pixel/255 - mean) / std. Fashion-MNIST's
    /// constants by default; CIFAR sets the training set's own (pixel_stats).
    float mean = 0.2860f;
    float std = 0.3530f;
};

/// A parsed `cifar10:DIR` / `cifar100:DIR` data-source name.
struct CifarSpec {
    int classes = 0;   ///< 10 or 100
    std::string dir;   ///< directory of the binary files
};

/// True when `name` starts with "cifar10:" or "cifar100:".
bool is_cifar(const std::string& name);
/// Parses "cifar10:DIR" or "cifar100:DIR". Errors: DataError (empty DIR, other prefix).
CifarSpec parse_cifar(const std::string& name);

/// CIFAR-10 / CIFAR-100 in the "binary version" of Krizhevsky (2009), from spec.dir or its
/// subdirectory cifar-10-batches-bin / cifar-100-binary: CIFAR-10 records are 1 label byte
/// + 3072 pixel bytes (3 planes R, G, B of 32x32) in data_batch_1..5.bin (training, 50,000)
/// and test_batch.bin (10,000); CIFAR-100 records are a coarse and a fine label byte + 3072
/// pixel bytes in train.bin / test.bin, of which the fine label (100 classes) is used.
/// `limit` > 0 keeps the first `limit` examples. Errors: DataError for a missing file, a
/// size that is not a whole number of records (truncated), a label out of range.
Dataset load_cifar(const CifarSpec& spec, bool train, int64_t limit = 0);

/// Mean and standard deviation of all of d's pixels scaled to [0, 1] (all channels
/// together, population formula), in double precision: the normalization of a data set
/// without published constants (CIFAR: about 0.473 and 0.252 for CIFAR-10).
void pixel_stats(const Dataset& d, double* mean, double* std);

/// Training-time augmentation of gather_batch_augmented.
struct Augment {
    int crop_pad = 0;  ///< random crop: zero-pad by this many pixels, crop back to H x W at a
                       ///< uniform offset in [0, 2*pad]^2 (Krizhevsky et al. 2012; He et al. 2016, sec. 4.2)
    bool flip = false; ///< mirror left-right with probability 1/2
    bool any() const { return crop_pad > 0 || flip; }
};

/// Loads an IDX image file (3 dimensions) and its label file (1 dimension) and checks
/// they agree (same count) and every label is < classes. `limit` > 0 keeps the first
/// `limit` examples. Errors: DataError (see read_idx_gz; also a dimension mismatch).
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path, int64_t limit = 0,
                      int classes = 10);

/// Fashion-MNIST (Xiao et al. 2017) from `dir`: train-images-idx3-ubyte.gz and
/// train-labels-idx1-ubyte.gz (train = true, 60,000 examples) or t10k-* (10,000).
/// Also checks that the images are 28x28. Errors: DataError.
Dataset load_fashion_mnist(const std::string& dir, bool train, int64_t limit = 0);

/// Fashion-MNIST normalization constants (mean and standard deviation of the training
/// pixels scaled to [0, 1]).
constexpr float kFashionMean = 0.2860f;
constexpr float kFashionStd = 0.3530f;

/// A parsed `synthetic:CxHxW:K` data-source name.
struct SyntheticSpec {
    Shape shape;      ///< C x H x W of one image
    int classes = 0;  ///< K
};

/// True when `name` starts with "synthetic:" (then parse_synthetic() applies).
bool is_synthetic(const std::string& name);

/// Parses "synthetic:CxHxW:K" (e.g. "synthetic:3x32x32:10"): C in [1, 64], H and W in
/// [1, 4096], K in [2, 256] (labels are bytes). Errors: DataError saying what is wrong and showing the form.
SyntheticSpec parse_synthetic(const std::string& name);

/// `count` random images of spec.shape (pixels uniform in 0..255) with labels i mod K,
/// from a generator seeded with `seed` (same seed, same data). For profiling: the values
/// carry no signal. Errors: DataError when count < 0 or the set would exceed 8 GiB.
Dataset make_synthetic(const SyntheticSpec& spec, int count, uint64_t seed);

/// Moves the last n examples of `train` into `val` (same shape, classes and normalization),
/// leaving train with the first train.count - n: a validation split held out of training.
/// Apply it after any limit on the training set. Errors: DataError (train unchanged) unless
/// 0 <= n < train.count.
void split_validation(Dataset& train, int64_t n, Dataset& val);

/// Errors: DataError "example index I is outside the data set's examples 0..count-1" unless
/// 0 <= i < d.count (what gather_batch checks for every index).
void check_example_index(const Dataset& d, int i);

/// x (n, channels, rows, cols) <- (pixel/255 - mean)/std of examples idx[0..n), and
/// labels[i] <- label of idx[i]. Reuses x's allocation. Errors: DataError for an index
/// outside the data set (check_example_index).
void gather_batch(const Dataset& d, const int* idx, int n, Tensor& x, int* labels, float mean = kFashionMean,
                  float std_ = kFashionStd);

/// gather_batch with d.mean / d.std and, per example, the random crop and flip of `aug`
/// drawn from `rng` (padding pixels are 0 after normalization, i.e. the mean). Without
/// aug.any() it equals gather_batch(d, idx, n, x, labels, d.mean, d.std). Errors: as
/// gather_batch.
void gather_batch_augmented(const Dataset& d, const int* idx, int n, Tensor& x, int* labels, const Augment& aug,
                            Rng& rng);

}  // namespace train
}  // namespace tula
