// libtula: the fits of the finished runs kept by the evidence they were fitted to (FitCache),
// so that a plan refits only when the evidence changed. The runs' step model (StepFit::fit)
// and the overlap exponent (OverlapModel::fit) are pure functions of their observations; the
// cache key is a hash of them, and an entry is never stale while the code that fits is the
// same (the key also covers the fits' constants, TULA_VERSION and a checksum of the fitting
// code's sources, TULA_FIT_CODE from the Makefile).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tula/models.hpp"
#include "tula/step_fit.hpp"

namespace tula {

/// StepFit as JSON text: every member, doubles round-tripped exactly (the covariance as its
/// upper triangle), NaN as null. Pure.
std::string step_fit_to_json(const StepFit& f);
/// The StepFit of step_fit_to_json's text; nullopt when the text is not one (malformed JSON,
/// a member missing or of the wrong type, a covariance whose size does not match its terms,
/// a non-finite coefficient). Pure; never throws.
std::optional<StepFit> step_fit_from_json(const std::string& text);

/// The fits of the runs by their observations: in memory for the process, and, when given a
/// directory, in one file per fit there (`<dir>/fits/<key>.json`, written to a temporary file
/// and renamed into place; past kMaxFiles files or kMaxBytes, the oldest are removed first,
/// down to 3/4 of both). A file is read only when it is a regular file owned by the effective
/// user, not writable by group or others, at most kMaxFileBytes long and a valid text of its
/// kind; anything else is a miss, and a directory that cannot be made or written leaves the
/// cache in memory only. Never throws for the cache's sake: the fit is returned either way.
class FitCache {
public:
    static constexpr int kMaxFiles = 512;               ///< files kept in `<dir>/fits`
    static constexpr long long kMaxBytes = 64LL << 20;  ///< bytes kept in `<dir>/fits`
    static constexpr long kMaxFileBytes = 16L << 20;    ///< largest file read, bytes

    /// What the cache did, for the tests and the benchmarks.
    struct Stats {
        int memory_hits = 0;   ///< fits found in memory
        int file_hits = 0;     ///< fits read from the directory
        int misses = 0;        ///< fits computed
        int write_errors = 0;  ///< fits that could not be written to the directory
    };

    /// A cache in memory only.
    FitCache() = default;
    /// A cache in memory backed by `dir` ("" for memory only); `dir` and its fits folder are
    /// made (mode 0700) on the first write.
    explicit FitCache(std::string dir) : dir_(std::move(dir)) {}

    /// StepFit::fit(obs), from the cache when the same observations were fitted before, else
    /// fitted and kept. Errors: none.
    StepFit step_fit(const std::vector<StepObservation>& obs);
    /// OverlapModel::fit(samples), from the cache when the same samples were fitted before,
    /// else fitted and kept; a fit that failed is kept as its message. Errors: tula::Error with
    /// OverlapModel::fit's message when that fit fails (or failed before on these samples).
    OverlapModel overlap(const std::vector<IterationSample>& samples);
    const Stats& stats() const { return stats_; }
    const std::string& dir() const { return dir_; }

    /// The keys of `obs` and of `samples`: 32 hex digits, two 64-bit hashes (FNV-1a and a
    /// multiply-xorshift) of the kind, every field (IEEE 754 bits, in order), the fit's
    /// constants, TULA_VERSION and TULA_FIT_CODE. Pure.
    static std::string key(const std::vector<StepObservation>& obs);
    static std::string key(const std::vector<IterationSample>& samples);
    /// The cache directory: `env_dir` (TULA_CACHE_DIR) when set and not empty, else
    /// `xdg_cache_home`/tula when that is an absolute path, else `home`/.cache/tula; "" when
    /// none is known (memory only) or when `enabled` (TULA_FIT_CACHE) is "0", "no" or "off".
    /// Arguments may be null. Pure.
    static std::string default_dir(const char* env_dir, const char* xdg_cache_home, const char* home,
                                   const char* enabled);

private:
    /// An overlap fit: the model, or the message of its failure.
    struct OverlapFit {
        OverlapModel model;
        std::string error;
    };
    std::optional<std::string> read_file(const std::string& key) const;
    void write_file(const std::string& key, const std::string& text);

    std::string dir_;
    std::map<std::string, StepFit> step_fits_;
    std::map<std::string, OverlapFit> overlaps_;
    Stats stats_;
};

}  // namespace tula
