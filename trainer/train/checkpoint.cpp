// tula-train: checkpoint files and stop signals. See checkpoint.hpp.
#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace tula {
namespace train {

namespace {

constexpr char kMagic[8] = {'T', 'U', 'L', 'A', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304u;
constexpr size_t kHeader = 8 + 4 + 4 + 8 + 4 + 8;

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

class Writer {
public:
    template <class T>
    void put(const T& v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        buf.insert(buf.end(), p, p + sizeof(T));
    }
    template <class T>
    void put_vec(const std::vector<T>& v) {
        put<uint64_t>(v.size());
        const auto* p = reinterpret_cast<const uint8_t*>(v.data());
        buf.insert(buf.end(), p, p + v.size() * sizeof(T));
    }
    void put_str(const std::string& s) {
        put<uint64_t>(s.size());
        buf.insert(buf.end(), s.begin(), s.end());
    }
    std::vector<uint8_t> buf;
};

class Reader {
public:
    Reader(const uint8_t* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
    template <class T>
    T get() {
        T v;
        need(sizeof(T));
        std::memcpy(&v, p_ + o_, sizeof(T));
        o_ += sizeof(T);
        return v;
    }
    template <class T>
    std::vector<T> get_vec() {
        const uint64_t n = get<uint64_t>();
        if (n > (n_ - o_) / sizeof(T)) bad();
        std::vector<T> v(n);
        if (n) std::memcpy(v.data(), p_ + o_, n * sizeof(T));
        o_ += n * sizeof(T);
        return v;
    }
    std::string get_str() {
        const std::vector<char> v = get_vec<char>();
        return std::string(v.begin(), v.end());
    }
    bool at_end() const { return o_ == n_; }

private:
    void need(size_t k) {
        if (k > n_ - o_) bad();
    }
    [[noreturn]] void bad() const {
        throw CheckpointError(path_ + ": checkpoint payload is malformed (a field runs past its end) although its "
                                      "checksum matches; it was not written by this version of tula-train: delete it "
                                      "and start without --resume");
    }
    const uint8_t* p_;
    size_t n_, o_ = 0;
    std::string path_;
};

std::string errno_text() { return std::strerror(errno); }

// Writes all of buf to fd. Returns false on error (errno set).
bool write_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

std::string dir_of(const std::string& path) {
    const size_t s = path.rfind('/');
    if (s == std::string::npos) return ".";
    return s == 0 ? "/" : path.substr(0, s);
}

}  // namespace

uint64_t fnv1a64(const std::string& s) {
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ULL;
    }
    return h;
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
    Writer pl;
    pl.put_str(c.config);
    pl.put(c.ranks);
    pl.put(c.epoch);
    pl.put(c.step_in_epoch);
    pl.put(c.global_step);
    pl.put(c.epoch_seconds);
    pl.put(c.lr);
    pl.put(c.noise_scale);
    pl.put_vec(c.rank_sums);
    pl.put_vec(c.noise_estimator);
    pl.put_vec(c.warmup);
    pl.put_vec(c.epochs_done);
    pl.put_vec(c.params);
    pl.put_vec(c.state);
    pl.put_vec(c.opt_m1);
    pl.put_vec(c.opt_m2);
    pl.put(c.opt_t);
    pl.put<uint64_t>(c.layer_rng.size());
    for (const auto& r : c.layer_rng) pl.put_str(r);
    Writer hd;
    for (char ch : kMagic) hd.put(ch);
    hd.put(kVersion);
    hd.put(kByteOrder);
    hd.put<uint64_t>(pl.buf.size());
    hd.put<uint32_t>(static_cast<uint32_t>(crc32_z(0L, pl.buf.data(), pl.buf.size())));
    hd.put(fnv1a64(c.config));

    std::string tmpl = path + ".tmp.XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0)
        throw CheckpointError("cannot create a temporary file next to " + path + " (" + errno_text() +
                              "); choose a writable directory for --checkpoint");
    const std::string tmp = name.data();
    const bool ok = write_all(fd, hd.buf.data(), hd.buf.size()) && write_all(fd, pl.buf.data(), pl.buf.size()) &&
                    ::fsync(fd) == 0;
    const std::string why = ok ? "" : errno_text();
    ::close(fd);
    if (!ok) {
        ::unlink(tmp.c_str());
        throw CheckpointError("cannot write the checkpoint " + path + " (" + why + "); the previous one, if any, is kept");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string w = errno_text();
        ::unlink(tmp.c_str());
        throw CheckpointError("cannot rename " + tmp + " to " + path + " (" + w + "); the previous one, if any, is kept");
    }
    const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {  // make the rename durable; not fatal where directories cannot be synced
        (void)::fsync(dfd);
        ::close(dfd);
    }
}

Checkpoint read_checkpoint(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw CheckpointError("cannot open the checkpoint " + path + " (" + errno_text() + ")");
    std::vector<uint8_t> all;
    uint8_t chunk[65536];
    size_t k;
    while ((k = std::fread(chunk, 1, sizeof chunk, f)) > 0) all.insert(all.end(), chunk, chunk + k);
    const bool err = std::ferror(f);
    std::fclose(f);
    if (err) throw CheckpointError("cannot read the checkpoint " + path);
    const std::string not_ckpt = path + " is not a tula-train checkpoint";
    if (all.size() < 8 || std::memcmp(all.data(), kMagic, 8) != 0)
        throw CheckpointError(not_ckpt + " (no TULACKPT header); give the file written by --checkpoint");
    if (all.size() < kHeader)
        throw CheckpointError(path + ": checkpoint truncated inside its header (" + std::to_string(all.size()) +
                              " bytes); it cannot be used: delete it and start without --resume");
    Reader h(all.data(), kHeader, path);
    for (int i = 0; i < 8; ++i) (void)h.get<char>();
    const uint32_t version = h.get<uint32_t>(), order = h.get<uint32_t>();
    const uint64_t len = h.get<uint64_t>();
    const uint32_t crc = h.get<uint32_t>();
    const uint64_t hash = h.get<uint64_t>();
    if (order != kByteOrder)
        throw CheckpointError(path + ": checkpoint written on a machine of another byte order; resume on the same kind of machine");
    if (version != kVersion)
        throw CheckpointError(path + ": checkpoint format version " + std::to_string(version) + ", this tula-train reads version " +
                              std::to_string(kVersion) + "; resume with the tula-train that wrote it");
    if (all.size() - kHeader != len)
        throw CheckpointError(path + ": checkpoint truncated or extended (" + std::to_string(all.size() - kHeader) + " of " +
                              std::to_string(len) + " payload bytes); it cannot be used: delete it and start without --resume");
    const uint8_t* pl = all.data() + kHeader;
    if (static_cast<uint32_t>(crc32_z(0L, pl, static_cast<size_t>(len))) != crc)
        throw CheckpointError(path + ": checkpoint corrupt (CRC-32 mismatch); it cannot be used: delete it and start without --resume");
    Reader r(pl, len, path);
    Checkpoint c;
    c.config = r.get_str();
    c.ranks = r.get<int32_t>();
    c.epoch = r.get<int32_t>();
    c.step_in_epoch = r.get<int64_t>();
    c.global_step = r.get<int64_t>();
    c.epoch_seconds = r.get<double>();
    c.lr = r.get<double>();
    c.noise_scale = r.get<double>();
    c.rank_sums = r.get_vec<double>();
    c.noise_estimator = r.get_vec<uint8_t>();
    c.warmup = r.get_vec<uint8_t>();
    c.epochs_done = r.get_vec<uint8_t>();
    c.params = r.get_vec<float>();
    c.state = r.get_vec<float>();
    c.opt_m1 = r.get_vec<float>();
    c.opt_m2 = r.get_vec<float>();
    c.opt_t = r.get<int64_t>();
    const uint64_t nrng = r.get<uint64_t>();
    for (uint64_t i = 0; i < nrng; ++i) c.layer_rng.push_back(r.get_str());
    if (!r.at_end() || fnv1a64(c.config) != hash || c.ranks < 1 || c.epoch < 1 || c.step_in_epoch < 0 ||
        c.rank_sums.size() != 2 * static_cast<size_t>(c.ranks))
        throw CheckpointError(path + ": checkpoint fields are inconsistent; it cannot be used: delete it and start without --resume");
    return c;
}

void install_stop_signals() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_requested() { return g_stop != 0; }

void set_stop_requested(bool on) { g_stop = on ? 1 : 0; }

}  // namespace train
}  // namespace tula
