// tula-train: checkpoint files and stop signals. See checkpoint.hpp.
#include "train/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

namespace tula {
namespace train {

namespace {

constexpr char kMagic[8] = {'T', 'U', 'L', 'A', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kByteOrder = 0x01020304u;
constexpr size_t kHeader = 8 + 4 + 4 + 8 + 8 + 4;

volatile std::sig_atomic_t g_stop = 0;       // a stop was asked for
volatile std::sig_atomic_t g_terminate = 0;  // SIGTERM among the causes
extern "C" void on_stop_signal(int sig) {
    if (sig == SIGTERM) g_terminate = 1;
    g_stop = 1;
}

class Writer {
public:
    template <class T>
    void put(const T& v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        buf.insert(buf.end(), p, p + sizeof(T));
    }
    std::vector<uint8_t> buf;
};

// The text of one value of a configuration (config_text).
std::string value_text(const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

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

// The part of `path` after its last '/'.
std::string base_of(const std::string& path) {
    const size_t s = path.rfind('/');
    return s == std::string::npos ? path : path.substr(s + 1);
}

// Whether the file name `name` is one of mkstemp's "BASE.tmp.XXXXXX" for `base`.
bool is_temporary_of(const std::string& name, const std::string& base) {
    const std::string prefix = base + ".tmp.";
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) return false;
    for (size_t i = prefix.size(); i < name.size(); ++i)
        if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
    return true;
}

}  // namespace

int remove_checkpoint_temporaries(const std::string& path) {
    const std::string dir = dir_of(path), base = base_of(path);
    DIR* d = ::opendir(dir.c_str());
    if (!d) return 0;
    std::vector<std::string> found;
    while (const dirent* e = ::readdir(d))
        if (is_temporary_of(e->d_name, base)) found.push_back(e->d_name);
    ::closedir(d);
    int removed = 0;
    for (const std::string& n : found)
        if (::unlink((dir == "/" ? "/" : dir + "/").append(n).c_str()) == 0) ++removed;
    return removed;
}

namespace {

// FNV-1a's steps over `s` from the offset basis `h`: each byte xored in, then times FNV's
// 64-bit prime.
uint64_t fnv1a_from(uint64_t h, const std::string& s) {
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ULL;
    }
    return h;
}

// The configuration hash of checkpoints written by earlier tula-train releases: FNV-1a's
// steps from 1469598103934665603, the 64-bit offset basis less its last digit. Still accepted
// when reading, so that their checkpoints resume.
std::string legacy_config_hash_hex(const RunConfig& config) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(fnv1a_from(1469598103934665603ULL, config_text(config))));
    return hash;
}

}  // namespace

uint64_t fnv1a64(const std::string& s) { return fnv1a_from(14695981039346656037ULL, s); }

std::string config_text(const RunConfig& config) {
    std::string s;
    for (const auto& [k, v] : config.items()) s += (s.empty() ? "" : " ") + k + (v.is_null() ? "" : "=" + value_text(v));
    return s;
}

uint64_t config_hash(const RunConfig& config) { return fnv1a64(config_text(config)); }

std::string config_difference(const RunConfig& now, const RunConfig& then) {
    if (config_text(now) == config_text(then)) return "";
    for (const auto& [k, v] : now.items()) {
        const auto it = then.find(k);
        const std::string here = value_text(v);
        if (it != then.end() && value_text(*it) == here) continue;
        return k + " is " + here + " here but " + (it == then.end() ? "(absent)" : value_text(*it)) + " in the checkpoint";
    }
    return "the configuration differs";
}

// config_hash of a configuration as 16 hex digits: the header's "config_hash".
static std::string config_hash_hex(const RunConfig& config) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(config_hash(config)));
    return hash;
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
    const std::vector<std::pair<const char*, const std::vector<float>*>> tensors = {
        {"params", &c.params}, {"state", &c.state}, {"opt_m1", &c.opt_m1}, {"opt_m2", &c.opt_m2}};
    nlohmann::ordered_json h;
    h["format"] = "tula-train checkpoint";
    h["version"] = kVersion;
    h["config"] = c.config;
    h["config_hash"] = config_hash_hex(c.config);
    h["ranks"] = c.ranks;
    h["epoch"] = c.epoch;
    h["step_in_epoch"] = c.step_in_epoch;
    h["global_step"] = c.global_step;
    h["epoch_seconds"] = c.epoch_seconds;
    h["lr"] = c.lr;
    h["noise_scale"] = c.noise_scale;
    h["rank_sums"] = c.rank_sums;
    h["noise_estimator"] = c.noise_estimator;
    h["warmup"] = c.warmup;
    h["epochs_done"] = c.epochs_done;
    h["opt_t"] = c.opt_t;
    h["layer_rng"] = c.layer_rng;
    h["parts"] = c.parts;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    Writer pl;
    for (const auto& [name, v] : tensors) {
        list.push_back({{"name", name}, {"dtype", "float32"}, {"count", v->size()}});
        const auto* p = reinterpret_cast<const uint8_t*>(v->data());
        pl.buf.insert(pl.buf.end(), p, p + v->size() * sizeof(float));
    }
    h["tensors"] = std::move(list);
    const std::string json = h.dump();
    uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(json.data()), json.size());
    crc = crc32_z(crc, pl.buf.data(), pl.buf.size());
    Writer hd;
    for (char ch : kMagic) hd.put(ch);
    hd.put(kVersion);
    hd.put(kByteOrder);
    hd.put<uint64_t>(json.size());
    hd.put<uint64_t>(pl.buf.size());
    hd.put<uint32_t>(static_cast<uint32_t>(crc));
    hd.buf.insert(hd.buf.end(), json.begin(), json.end());

    remove_checkpoint_temporaries(path);  // a killed writer's, before this one takes disk space
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
    uint32_t version, order, crc;
    uint64_t json_len, tensor_len;
    std::memcpy(&version, all.data() + 8, 4);
    std::memcpy(&order, all.data() + 12, 4);
    std::memcpy(&json_len, all.data() + 16, 8);
    std::memcpy(&tensor_len, all.data() + 24, 8);
    std::memcpy(&crc, all.data() + 32, 4);
    if (order != kByteOrder)
        throw CheckpointError(path + ": checkpoint written on a machine of another byte order; resume on the same kind of machine");
    if (version != kVersion)
        throw CheckpointError(path + ": checkpoint format version " + std::to_string(version) + ", this tula-train reads version " +
                              std::to_string(kVersion) + (version < kVersion ? " (an older tula-train wrote it)" : "") +
                              "; resume with the tula-train that wrote it, or delete it and start without --resume");
    const uint64_t body = all.size() - kHeader;
    if (json_len > body || tensor_len > body || json_len + tensor_len != body)
        throw CheckpointError(path + ": checkpoint truncated or extended (" + std::to_string(body) + " of " +
                              std::to_string(json_len + tensor_len) +
                              " bytes after the header); it cannot be used: delete it and start without --resume");
    const uint8_t* js = all.data() + kHeader;
    uLong sum = crc32_z(0L, js, static_cast<size_t>(json_len));
    sum = crc32_z(sum, js + json_len, static_cast<size_t>(tensor_len));
    if (static_cast<uint32_t>(sum) != crc)
        throw CheckpointError(path + ": checkpoint corrupt (CRC-32 mismatch); it cannot be used: delete it and start without --resume");
    const std::string inconsistent = path + ": checkpoint fields are inconsistent";
    const std::string what_to_do = "; it cannot be used: delete it and start without --resume";
    Checkpoint c;
    try {
        const nlohmann::ordered_json h =
            nlohmann::ordered_json::parse(reinterpret_cast<const char*>(js), reinterpret_cast<const char*>(js) + json_len);
        c.config = h.at("config");
        bool plain = c.config.is_object();
        for (const auto& v : c.config) plain = plain && (v.is_string() || v.is_number() || v.is_null());
        if (!plain) throw CheckpointError(inconsistent + " (config)" + what_to_do);
        c.ranks = h.at("ranks").get<int32_t>();
        c.epoch = h.at("epoch").get<int32_t>();
        c.step_in_epoch = h.at("step_in_epoch").get<int64_t>();
        c.global_step = h.at("global_step").get<int64_t>();
        c.epoch_seconds = h.at("epoch_seconds").get<double>();
        c.lr = h.at("lr").get<double>();
        c.noise_scale = h.at("noise_scale").get<double>();
        c.rank_sums = h.at("rank_sums").get<std::vector<double>>();
        c.noise_estimator = nlohmann::json::parse(h.at("noise_estimator").dump());
        c.warmup = nlohmann::json::parse(h.at("warmup").dump());
        c.epochs_done = nlohmann::json::parse(h.at("epochs_done").dump());
        c.opt_t = h.at("opt_t").get<int64_t>();
        c.layer_rng = h.at("layer_rng").get<std::vector<std::string>>();
        if (h.contains("parts")) c.parts = h.at("parts").get<std::vector<double>>();  // absent: no earlier part
        const std::string stored_hash = h.at("config_hash").get<std::string>();
        if (stored_hash != config_hash_hex(c.config) && stored_hash != legacy_config_hash_hex(c.config))
            throw CheckpointError(inconsistent + " (config_hash)" + what_to_do);
        // the tensors, in the order and of the sizes the header lists
        std::vector<float>* dst[] = {&c.params, &c.state, &c.opt_m1, &c.opt_m2};
        const char* names[] = {"params", "state", "opt_m1", "opt_m2"};
        const auto& list = h.at("tensors");
        if (!list.is_array() || list.size() != 4) throw CheckpointError(inconsistent + " (tensors)" + what_to_do);
        uint64_t off = 0;
        for (size_t i = 0; i < 4; ++i) {
            const uint64_t n = list[i].at("count").get<uint64_t>();
            if (list[i].at("name").get<std::string>() != names[i] || list[i].at("dtype").get<std::string>() != "float32" ||
                n > (tensor_len - off) / sizeof(float))
                throw CheckpointError(inconsistent + " (tensor " + names[i] + ")" + what_to_do);
            dst[i]->resize(n);
            if (n) std::memcpy(dst[i]->data(), js + json_len + off, n * sizeof(float));
            off += n * sizeof(float);
        }
        if (off != tensor_len) throw CheckpointError(inconsistent + " (tensor bytes)" + what_to_do);
    } catch (const nlohmann::json::exception& e) {
        throw CheckpointError(inconsistent + " (" + e.what() + ")" + what_to_do);
    }
    if (c.ranks < 1 || c.epoch < 1 || c.step_in_epoch < 0 || c.rank_sums.size() != 2 * static_cast<size_t>(c.ranks) ||
        !c.epochs_done.is_array())
        throw CheckpointError(inconsistent + what_to_do);
    for (double p : c.parts)
        if (!std::isfinite(p) || p < 0) throw CheckpointError(inconsistent + " (parts)" + what_to_do);
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

bool stop_terminates() { return g_terminate != 0; }

void set_stop_requested(bool on) {
    g_stop = on ? 1 : 0;
    if (!on) g_terminate = 0;
}

}  // namespace train
}  // namespace tula
