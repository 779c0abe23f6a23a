// tula CLI: shared options, configuration, messages and files (see common.hpp).
#include "common.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <CLI/CLI.hpp>

#include "format.hpp"
#include "tula/error.hpp"
#include "tula/fit_cache.hpp"

namespace tula::cli {

void add_common_options(CLI::App* sub, CommonOptions* o, bool write) {
    sub->add_option("--conf", o->conf,
                    std::string("site configuration (default: $TULA_CONF, else ") + default_conf_path() +
                        "; a missing default file means built-in defaults)")
        ->type_name("PATH");
    if (write)
        sub->add_option("--db", o->dbs,
                        "profile database to write (default: the user's, $XDG_DATA_HOME/tula/profiles.db)")
            ->type_name("PATH")
            ->expected(1)
            ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    else
        sub->add_option("--db", o->dbs,
                        "profile database to read; repeatable (default: system_db of tula.conf, then the user's)")
            ->type_name("PATH");
}

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

const char* default_conf_path() { return TULA_DEFAULT_CONF; }

LoadedConfig load_cli_config(const CommonOptions& o) {
    LoadedConfig lc;
    const bool explicit_conf = !o.conf.empty();
    if (explicit_conf) {
        lc.path = o.conf;
    } else if (const char* env = std::getenv("TULA_CONF"); env && *env) {
        lc.path = env;
    } else {
        lc.path = default_conf_path();
    }
    bool defaults = false;
    if (!explicit_conf) {
        struct stat st;
        defaults = ::stat(lc.path.c_str(), &st) != 0 && errno == ENOENT;  // built-in defaults
    }
    if (!defaults) {
        lc.config = load_config(lc.path);
        lc.from_file = true;
    }
    if (!o.system_db.empty()) lc.config.system_db = o.system_db;
    if (o.time_margin >= 0) lc.config.time_margin = o.time_margin;
    return lc;
}

std::vector<std::string> read_db_paths(const CommonOptions& o, const Config& cfg, std::vector<std::string>* warnings) {
    std::vector<std::string> in;
    if (!o.dbs.empty()) {
        in = o.dbs;
    } else {
        // The system database is read only when nobody but its administrator can write it
        // (system_db_distrust): else one warning says why and it is left out.
        const std::string why = system_db_distrust(cfg.system_db, static_cast<uid_t>(cfg.admin_uid));
        if (why.empty()) in.push_back(cfg.system_db);
        else if (warnings) warnings->push_back(bare_message(why));
        try {
            in.push_back(user_db_path(std::getenv("XDG_DATA_HOME"), std::getenv("HOME")));
        } catch (const std::exception& e) {
            if (warnings) warnings->push_back(bare_message(e.what()));
        }
    }
    std::vector<std::string> out;
    for (const auto& p : in) {
        if (p.empty()) continue;
        bool dup = false;
        for (const auto& q : out) dup = dup || q == p;
        if (!dup) out.push_back(p);
    }
    return out;
}

std::string absolute_path(const std::string& p) {
    if (!p.empty() && p[0] == '/') return p;
    char buf[PATH_MAX];
    if (!::getcwd(buf, sizeof buf))
        throw Error(std::string("cannot read the current directory: ") + std::strerror(errno));
    std::string rel = p;
    while (rel.rfind("./", 0) == 0) rel = rel.substr(2);
    return std::string(buf) + (rel.empty() ? "" : "/" + rel);
}

FitCache& fit_cache() {
    static FitCache cache(FitCache::default_dir(std::getenv("TULA_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"),
                                                std::getenv("HOME"), std::getenv("TULA_FIT_CACHE")));
    return cache;
}

std::string write_db_path(const CommonOptions& o) {
    if (o.dbs.size() > 1) throw UsageError("--db: give one database to write, not " + std::to_string(o.dbs.size()));
    if (!o.dbs.empty()) {
        if (o.dbs[0].empty()) throw UsageError("--db: the path is empty");
        return absolute_path(o.dbs[0]);
    }
    return absolute_path(user_db_path(std::getenv("XDG_DATA_HOME"), std::getenv("HOME")));
}

void print_error(const std::string& msg) {
    std::fflush(stdout);
    std::fprintf(stderr, "tula: %s\n", one_line(bare_message(msg), 4000).c_str());
    std::fflush(stderr);
}

void print_warning(const std::string& msg) {
    std::string m = bare_message(msg);
    if (m.rfind("warning: ", 0) == 0) m = m.substr(9);
    std::fflush(stdout);
    std::fprintf(stderr, "tula: warning: %s\n", one_line(m, 4000).c_str());
    std::fflush(stderr);
}

std::vector<DbHandle> open_read_dbs(const std::vector<std::string>& paths) {
    std::vector<DbHandle> out;
    for (const auto& p : paths) {
        DbHandle h;
        h.path = p;
        struct stat st;
        if (::stat(p.c_str(), &st) != 0 && errno == ENOENT) {
            h.missing = true;
        } else {
            try {
                h.db.emplace(ProfileDb::open(p, ProfileDb::Mode::ReadOnly));
            } catch (const std::exception& e) {
                h.error = one_line(bare_message(e.what()));
            }
        }
        out.push_back(std::move(h));
    }
    return out;
}

bool stdout_colour() {
    if (!::isatty(STDOUT_FILENO)) return false;
    if (const char* nc = std::getenv("NO_COLOR"); nc && *nc) return false;
    const char* term = std::getenv("TERM");
    return term && *term && std::strcmp(term, "dumb") != 0;
}

bool stdout_terminal() {
    if (!::isatty(STDOUT_FILENO)) return false;
    const char* term = std::getenv("TERM");
    return term && *term && std::strcmp(term, "dumb") != 0;
}

CLI::Option* add_format_option(CLI::App* sub, std::string* format, const std::vector<std::string>& choices) {
    std::string help = "output: ";
    for (size_t i = 0; i < choices.size(); ++i)
        help += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    return sub->add_option("--format", *format, help)->check(CLI::IsMember(choices))->capture_default_str();
}

void add_target_options(CLI::App* sub, TargetOptions* o) {
    sub->add_option("--workload", o->workload, "workload to plan, MODEL@DATASET (e.g. lenet5@fashion-mnist)")
        ->type_name("W");
    sub->add_option("--script", o->script, "batch script whose `# tula: workload=M@D` directive or `tula-train --model M --data D` line names the workload")
        ->type_name("PATH");
    sub->add_option("--epochs", o->epochs,
                    "epochs that set the accuracy target at the reference batch (default: the script's --epochs, else "
                    "default_epochs of tula.conf); a larger global batch trains more of them, by the noise scale")
        ->type_name("N")
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--batch-size", o->batch_size,
                    "the reference batch: the global batch at which --epochs reach the target (default: the script's "
                    "--batch-size, else tula-train's default 64)")
        ->type_name("B")
        ->check(CLI::Range(1, 1 << 24));
    sub->add_flag("--fixed-epochs", o->fixed_epochs,
                  "every candidate trains --epochs, whatever its batch (also tula.conf fixed_epochs = yes)");
    sub->add_option("--max-nodes", o->max_nodes, "largest node count to consider (at most max_nodes of tula.conf)")
        ->type_name("N")
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--nodes", o->nodes, "plan for exactly this node count (global batches rounded to a multiple)")
        ->type_name("N")
        ->check(CLI::Range(1, 1000000));
}

std::string progress_bar(double fraction, int width) {
    if (!(fraction > 0)) fraction = 0;  // also NaN
    if (fraction > 1) fraction = 1;
    const int full = static_cast<int>(fraction * width + 0.5);
    return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
}

std::string bold(const std::string& s, bool on) { return on ? "\033[1m" + s + "\033[0m" : s; }
std::string dim(const std::string& s, bool on) { return on ? "\033[2m" + s + "\033[0m" : s; }
std::string green(const std::string& s, bool on) { return on ? "\033[32m" + s + "\033[0m" : s; }


std::string self_exe_dir() {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "";
    std::string p(buf, static_cast<size_t>(n));
    const size_t slash = p.rfind('/');
    if (slash == std::string::npos) return "";
    return slash == 0 ? "/" : p.substr(0, slash);
}

std::optional<std::string> find_in_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    if (!path || !*path) return std::nullopt;
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
        size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        std::string dir = p.substr(start, end - start);
        if (dir.empty()) dir = ".";
        const std::string cand = dir + "/" + name;
        struct stat st;
        if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0) return cand;
        start = end + 1;
    }
    return std::nullopt;
}

void add_corrections_options(CLI::App* sub, std::string* with, std::string* without) {
    sub->add_option("--with", *with,
                    "switch corrections on (a comma list of concurrency, synced-step, run-fit, calibration, class-scaling, "
                    "class-runs; all but calibration and class-runs are on by default)")
        ->type_name("LIST");
    sub->add_option("--without", *without, "switch corrections off (the same names): the ablation of docs/models.md")
        ->type_name("LIST");
}

Corrections corrections_of(const std::string& with, const std::string& without) {
    try {
        return Corrections::select(with, without);
    } catch (const Error& e) {
        throw UsageError(std::string("--with/--without: ") + bare_message(e.what()));
    }
}

TempDir::TempDir(const std::string& given, const char* prefix) {
    if (!given.empty()) {
        path = absolute_path(given);
        if (!file_exists(path) && ::mkdir(path.c_str(), 0700) != 0)
            throw Error("cannot create --output-dir " + path + ": " + std::strerror(errno));
        return;
    }
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = tmp && *tmp == '/' ? tmp : "/tmp";
    std::string templ = dir + "/" + prefix + ".XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
        throw Error("cannot create a temporary directory in " + dir + ": " + std::strerror(errno) +
                    "; set TMPDIR to a writable directory");
    path = buf.data();
    own = true;
}

TempDir::~TempDir() {
    if (!own) return;
    for (const auto& f : files) ::unlink(f.c_str());  // only what this command created
    ::rmdir(path.c_str());
}

}  // namespace tula::cli
