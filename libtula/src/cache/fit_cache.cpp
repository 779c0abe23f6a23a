// libtula: FitCache (fit_cache.hpp): the runs' step models and overlap exponents kept by a
// hash of the observations they were fitted to, in memory and in one JSON file per fit.
#include "tula/fit_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "tula/error.hpp"

#ifndef TULA_FIT_CODE
#define TULA_FIT_CODE "unknown"  // the Makefile gives the checksum of the fitting code
#endif

namespace tula {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxMemoryFits = 64;  // fits of each kind kept in memory by one process

// Two 64-bit hashes over 64-bit words: FNV-1a (over the word's bytes) and a multiply-xorshift.
struct Hash128 {
    uint64_t a = 0xcbf29ce484222325ULL, b = 0x9e3779b97f4a7c15ULL;
    void word(uint64_t w) {
        for (int i = 0; i < 8; ++i) {
            a ^= (w >> (8 * i)) & 0xffU;
            a *= 0x100000001b3ULL;
        }
        b = (b ^ w) * 0xbf58476d1ce4e5b9ULL;
        b ^= b >> 31;
    }
    void real(double x) {
        uint64_t w;
        std::memcpy(&w, &x, sizeof w);
        word(w);
    }
    void text(const char* s) {
        for (; *s; ++s) word(static_cast<unsigned char>(*s));
        word(0);
    }
};

bool finite_all(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// A number of `j[name]`, NaN for null. Throws nlohmann's type_error / out_of_range otherwise.
double real_or_nan(const Json& j, const char* name) {
    const Json& v = j.at(name);
    return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

// mkdir -p with mode 0700 for what is made. False when a component cannot be made.
bool make_dirs(const std::string& dir) {
    if (dir.empty()) return false;
    for (size_t i = 1; i <= dir.size(); ++i) {
        if (i < dir.size() && dir[i] != '/') continue;
        const std::string part = dir.substr(0, i);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
    struct stat st;
    return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The start of every key: the kind of fit, the version and the fitting code.
Hash128 key_start(const char* kind) {
    Hash128 h;
    h.text(kind);
    h.text(TULA_VERSION);
    h.text(TULA_FIT_CODE);
    return h;
}

std::string hex(const Hash128& h) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.a),
                  static_cast<unsigned long long>(h.b));
    return buf;
}

}  // namespace

std::string step_fit_to_json(const StepFit& f) {
    Json j;
    j["runs"] = f.runs;
    j["borrowed"] = f.borrowed;
    j["theta0"] = f.theta0;
    j["phi0"] = f.phi0;
    j["scale_seconds"] = f.scale_seconds;
    Json pr = Json::array();
    for (const auto& [R, t] : f.per_ranks) pr.push_back({R, t.first, t.second});
    j["per_ranks"] = pr;
    Json pb = Json::array();
    for (const auto& [k, t] : f.per_batch) pb.push_back({k.first, k.second, t});
    j["per_batch"] = pb;
    // the covariance is symmetric: its upper triangle, row-major
    const size_t p = 2 + 2 * f.per_ranks.size() + f.per_batch.size();
    Json upper = Json::array();
    if (f.covariance.size() == p * p)
        for (size_t r = 0; r < p; ++r)
            for (size_t c = r; c < p; ++c) upper.push_back(f.covariance[r * p + c]);
    j["covariance_upper"] = upper;
    j["sigma"] = f.sigma;
    j["max_nodes"] = f.max_nodes;
    j["extrapolation"] = f.extrapolation;
    j["left_out_error"] = f.left_out_error;  // NaN is written as null
    j["left_out_error_per_batch"] = f.left_out_error_per_batch;
    return j.dump();
}

std::optional<StepFit> step_fit_from_json(const std::string& text) {
    try {
        const Json j = Json::parse(text);
        StepFit f;
        f.runs = j.at("runs").get<int>();
        f.borrowed = j.at("borrowed").get<int>();
        f.theta0 = j.at("theta0").get<double>();
        f.phi0 = j.at("phi0").get<double>();
        f.scale_seconds = j.at("scale_seconds").get<double>();
        for (const Json& r : j.at("per_ranks")) f.per_ranks[r.at(0).get<int>()] = {r.at(1).get<double>(), r.at(2).get<double>()};
        for (const Json& r : j.at("per_batch"))
            f.per_batch[{r.at(0).get<int>(), r.at(1).get<double>()}] = r.at(2).get<double>();
        f.sigma = j.at("sigma").get<double>();
        f.max_nodes = j.at("max_nodes").get<int>();
        f.extrapolation = j.at("extrapolation").get<double>();
        f.left_out_error = real_or_nan(j, "left_out_error");
        f.left_out_error_per_batch = real_or_nan(j, "left_out_error_per_batch");
        const size_t p = 2 + 2 * f.per_ranks.size() + f.per_batch.size();
        const std::vector<double> upper = j.at("covariance_upper").get<std::vector<double>>();
        if (!upper.empty()) {
            if (upper.size() != p * (p + 1) / 2) return std::nullopt;
            f.covariance.assign(p * p, 0.0);
            size_t i = 0;
            for (size_t r = 0; r < p; ++r)
                for (size_t c = r; c < p; ++c) f.covariance[r * p + c] = f.covariance[c * p + r] = upper[i++];
        }
        std::vector<double> coef{f.theta0, f.phi0, f.scale_seconds, f.sigma, f.extrapolation};
        for (const auto& [R, t] : f.per_ranks) coef.push_back(t.first), coef.push_back(t.second);
        for (const auto& [k, t] : f.per_batch) coef.push_back(k.second), coef.push_back(t);
        if (f.runs < 0 || f.borrowed < 0 || f.max_nodes < 0 || !finite_all(coef) || !finite_all(f.covariance)) return std::nullopt;
        return f;
    } catch (const Json::exception&) {
        return std::nullopt;
    }
}

std::string FitCache::key(const std::vector<StepObservation>& obs) {
    Hash128 h = key_start("step-fit");
    for (double c : {StepFit::kPriorPooled, StepFit::kPriorPerRanks, StepFit::kPriorExchangePerRanks,
                     StepFit::kPriorExchangePooled, StepFit::kPriorPerBatch, StepFit::kNoisePrior,
                     StepFit::kNoisePriorWeight, StepFit::kFloor, StepFit::kExtrapolation, StepFit::kBorrowedNoise})
        h.real(c);
    h.word(static_cast<uint64_t>(StepFit::kFolds));
    h.word(obs.size());
    for (const StepObservation& o : obs) {
        h.word(static_cast<uint64_t>(static_cast<int64_t>(o.nodes)));
        h.word(static_cast<uint64_t>(static_cast<int64_t>(o.ranks_per_node)));
        h.real(o.local_batch);
        h.real(o.measured_seconds);
        h.real(o.model_seconds);
        h.real(o.compute_seconds);
        h.word(o.borrowed ? 1 : 0);
    }
    return hex(h);
}

std::string FitCache::key(const std::vector<IterationSample>& samples) {
    Hash128 h = key_start("overlap");
    h.word(samples.size());
    for (const IterationSample& q : samples) {
        h.real(q.compute_seconds);
        h.real(q.comm_seconds);
        h.real(q.measured_seconds);
        h.word(static_cast<uint64_t>(static_cast<int64_t>(q.nodes)));
        h.word(static_cast<uint64_t>(static_cast<int64_t>(q.ranks_per_node)));
        h.real(q.local_batch);
    }
    return hex(h);
}

std::string FitCache::default_dir(const char* env_dir, const char* xdg_cache_home, const char* home,
                                      const char* enabled) {
    if (enabled && (!std::strcmp(enabled, "0") || !std::strcmp(enabled, "no") || !std::strcmp(enabled, "off")))
        return "";
    if (env_dir && *env_dir) return env_dir;
    if (xdg_cache_home && xdg_cache_home[0] == '/') return std::string(xdg_cache_home) + "/tula";
    if (home && home[0] == '/') return std::string(home) + "/.cache/tula";
    return "";
}

StepFit FitCache::step_fit(const std::vector<StepObservation>& obs) {
    const std::string k = key(obs);
    if (const auto it = step_fits_.find(k); it != step_fits_.end()) {
        ++stats_.memory_hits;
        return it->second;
    }
    std::optional<StepFit> f;
    if (const std::optional<std::string> text = read_file(k)) f = step_fit_from_json(*text);
    if (f) {
        ++stats_.file_hits;
    } else {
        ++stats_.misses;
        f = StepFit::fit(obs);
        write_file(k, step_fit_to_json(*f));
    }
    if (step_fits_.size() >= kMaxMemoryFits) step_fits_.clear();
    step_fits_.emplace(k, *f);
    return *f;
}

OverlapModel FitCache::overlap(const std::vector<IterationSample>& samples) {
    const std::string k = key(samples);
    auto it = overlaps_.find(k);
    if (it != overlaps_.end()) {
        ++stats_.memory_hits;
    } else {
        std::optional<OverlapFit> f;
        if (const std::optional<std::string> text = read_file(k)) {
            try {
                const Json j = Json::parse(*text);
                OverlapFit g;
                if (j.contains("error")) {
                    g.error = j.at("error").get<std::string>();
                } else {
                    g.model.gamma = j.at("gamma").get<double>();
                    g.model.samples = j.at("samples").get<int>();
                    g.model.rmse_rel = j.at("rmse_rel").get<double>();
                }
                if ((g.error.empty() && !(g.model.gamma >= 1.0 && std::isfinite(g.model.gamma) &&
                                          std::isfinite(g.model.rmse_rel) && g.model.samples >= 0)) ||
                    (!g.error.empty() && g.error.size() > 4096))
                    throw std::invalid_argument("not an overlap fit");
                f = g;
            } catch (const std::exception&) {
                f.reset();
            }
        }
        if (f) {
            ++stats_.file_hits;
        } else {
            ++stats_.misses;
            OverlapFit g;
            try {
                g.model = OverlapModel::fit(samples);
            } catch (const Error& e) {
                g.error = e.what();
            }
            Json j;
            if (!g.error.empty()) {
                j["error"] = g.error;
            } else {
                j["gamma"] = g.model.gamma;
                j["samples"] = g.model.samples;
                j["rmse_rel"] = g.model.rmse_rel;
            }
            write_file(k, j.dump());
            f = g;
        }
        if (overlaps_.size() >= kMaxMemoryFits) overlaps_.clear();
        it = overlaps_.emplace(k, *f).first;
    }
    if (!it->second.error.empty()) throw Error(it->second.error);
    return it->second.model;
}

std::optional<std::string> FitCache::read_file(const std::string& key) const {
    if (dir_.empty()) return std::nullopt;
    const std::string path = dir_ + "/fits/" + key + ".json";
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    struct stat st;
    std::string text;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        !(st.st_mode & (S_IWGRP | S_IWOTH)) && st.st_size > 0 && st.st_size <= kMaxFileBytes) {
        text.resize(static_cast<size_t>(st.st_size));
        size_t got = 0;
        while (got < text.size()) {
            const ssize_t n = ::read(fd, &text[got], text.size() - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += static_cast<size_t>(n);
        }
        text.resize(got);
    }
    ::close(fd);
    if (text.empty()) return std::nullopt;
    return text;
}

void FitCache::write_file(const std::string& key, const std::string& text) {
    if (dir_.empty()) return;
    const std::string folder = dir_ + "/fits";
    if (!make_dirs(folder)) {
        ++stats_.write_errors;
        return;
    }
    const std::string path = folder + "/" + key + ".json";
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0;
    size_t put = 0;
    while (ok && put < text.size()) {
        const ssize_t n = ::write(fd, text.data() + put, text.size() - put);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) put += static_cast<size_t>(n);
    }
    if (fd >= 0) ok = ::close(fd) == 0 && ok;
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        ++stats_.write_errors;
        return;
    }
    // at most kMaxFiles files and kMaxBytes: past either, the oldest (by modification time) go
    // first, down to 3/4 of both
    DIR* d = ::opendir(folder.c_str());
    if (!d) return;
    std::vector<std::tuple<long long, std::string, long long>> files;  // mtime, name, bytes
    long long bytes = 0;
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;  // every file counts: a writer killed midway leaves its .tmp
        struct stat st;
        if (::lstat((folder + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
            files.emplace_back(static_cast<long long>(st.st_mtime), name, static_cast<long long>(st.st_size));
            bytes += st.st_size;
        }
    }
    ::closedir(d);
    if (files.size() <= static_cast<size_t>(kMaxFiles) && bytes <= kMaxBytes) return;
    std::sort(files.begin(), files.end());
    size_t left = files.size();
    for (const auto& [mtime, name, size] : files) {
        if (left <= static_cast<size_t>(kMaxFiles) * 3 / 4 && bytes <= kMaxBytes / 4 * 3) break;
        if (name == key + ".json") continue;
        if (::unlink((folder + "/" + name).c_str()) == 0) --left, bytes -= size;
    }
}

}  // namespace tula
