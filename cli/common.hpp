// tula CLI: what every command shares: exit statuses, the common options (--conf, --db),
// configuration and database lookup, messages, terminal colour, files and programs.
#pragma once
#include "tula/tula.h"
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

// CLI11's types by name only: CLI/CLI.hpp costs seconds of compile per file, so only the
// files that register options include it.
namespace CLI {
class App;
class Option;
}  // namespace CLI

#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/predict.hpp"

namespace tula::cli {

/// Exit statuses of every command (tula(1), EXIT STATUS).
constexpr int kExitOk = 0;
constexpr int kExitError = 1;  ///< runtime error: missing file, unknown workload, failed job ...
constexpr int kExitUsage = 2;  ///< bad command line

/// A command-line mistake found after parsing (conflicting or malformed values): exit 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// What a parsed command does; set by the subcommand's parse callback, run by main().
/// Returns the exit status. May throw tula::Error (exit 1) or UsageError (exit 2).
using Action = std::function<int()>;

/// Path of the configuration used when --conf is not given: $TULA_CONF, else this.
/// The default tula.conf, sysconfdir/tula.conf (`make sysconfdir=DIR`; tula.h): compiled into
/// common.o alone, which the Makefile rebuilds when sysconfdir changes.
const char* default_conf_path();

/// --conf and --db, given to every command.
struct CommonOptions {
    std::string conf;              ///< --conf; empty when not given
    std::vector<std::string> dbs;  ///< --db, in order; empty when not given
    /// Site settings over tula.conf's (the plugstack line's db= and margin=, tula
    /// submit-filter): its system_db ("" : tula.conf's) and time_margin (< 0 : tula.conf's).
    std::string system_db;
    double time_margin = -1;
};

/// Adds --conf PATH and --db PATH to `sub`. `write` = the command writes one database:
/// --db then takes one path (default: the user's database), else it is repeatable (default:
/// the system database of tula.conf, then the user's).
void add_common_options(CLI::App* sub, CommonOptions* o, bool write);

/// Adds --with LIST and --without LIST to `sub`: the corrections of the modelled step to
/// switch on and off (Corrections::select; the ablation of docs/models.md).
void add_corrections_options(CLI::App* sub, std::string* with, std::string* without);
/// The corrections of --with and --without. Errors: UsageError naming a bad name.
Corrections corrections_of(const std::string& with, const std::string& without);

/// Adds --format FMT to `sub`, one of `choices` ("table", "kv", "json"); the default is
/// *format's value. Returns the option (for excludes()).
CLI::Option* add_format_option(CLI::App* sub, std::string* format, const std::vector<std::string>& choices);

/// What tula plan and tula plot plan: the workload, or the batch script that names it, the
/// epochs and the node counts (0: not given).
struct TargetOptions {
    std::string workload;
    std::string script;
    int epochs = 0;     ///< 0: the script's, else tula.conf's default_epochs
    int max_nodes = 0;  ///< 0: tula.conf's max_nodes
    int nodes = 0;      ///< 0: any node count up to max_nodes
    /// Global batch at which `epochs` define the accuracy target; 0: the script's --batch-size,
    /// else tula-train's default (kTrainerDefaultBatch); with --hardware, the smallest global batch.
    int batch_size = 0;
    bool fixed_epochs = false;  ///< every candidate trains `epochs` (not its epochs to target)
};

/// Adds --workload W, --script PATH, --epochs N, --batch-size B, --fixed-epochs, --max-nodes N
/// and --nodes N to `sub`.
void add_target_options(CLI::App* sub, TargetOptions* o);

/// The configuration a command uses and where it came from.
struct LoadedConfig {
    Config config;
    std::string path;        ///< the file read, or the one that was missing
    bool from_file = false;  ///< false: built-in defaults (the default file does not exist)
};

/// Loads --conf, else $TULA_CONF, else default_conf_path() (sysconfdir/tula.conf). A file that does not exist
/// gives the built-in defaults unless it was named with --conf. CommonOptions::system_db and
/// time_margin, when set, replace the file's. Errors: tula::Error for an
/// explicit --conf that is missing, an unreadable file, or a parse error (names the line).
LoadedConfig load_cli_config(const CommonOptions& o);

/// Databases a read-only command reads, in order: --db paths as given, else the system
/// database of `cfg` then the user's (tula::user_db_path with $XDG_DATA_HOME, $HOME);
/// duplicates dropped. When the user's path cannot be found (no HOME) a warning is appended.
/// A system database that others than root or cfg.admin_uid could write
/// (tula::system_db_distrust) is left out with one warning saying why and what the
/// administrator must do; paths given with --db are read as given.
std::vector<std::string> read_db_paths(const CommonOptions& o, const Config& cfg, std::vector<std::string>* warnings);

/// The database a writing command writes: --db (exactly one), else the user's. Returned as
/// an absolute path. Errors: tula::Error when there is no HOME/XDG_DATA_HOME; UsageError
/// for more than one --db.
std::string write_db_path(const CommonOptions& o);

/// The process's cache of the fits of the runs (FitCache), made on first use in
/// FitCache::default_dir($TULA_CACHE_DIR, $XDG_CACHE_HOME, $HOME, $TULA_FIT_CACHE).
/// Errors: none.
FitCache& fit_cache();

/// `p` made absolute against the current directory (not resolved). Errors: tula::Error when
/// the current directory cannot be read.
std::string absolute_path(const std::string& p);

/// Prints "tula: MSG" on stderr (MSG's own "tula: " prefix is not doubled), one line.
void print_error(const std::string& msg);
/// Prints "tula: warning: MSG" on stderr.
void print_warning(const std::string& msg);

/// True when standard output is a terminal, $NO_COLOR is unset and $TERM is not "dumb".
bool stdout_colour();
/// True when standard output is a terminal whose $TERM is set and not "dumb": progress is
/// then drawn as one bar redrawn in place (carriage return), else printed as plain lines.
bool stdout_terminal();
/// A progress bar of `width` cells, "[#####.....]", filled to `fraction` (clamped to 0..1).
std::string progress_bar(double fraction, int width);

/// `s` in bold / dim / green when `on`, else `s` unchanged (ANSI SGR sequences).
std::string bold(const std::string& s, bool on);
std::string dim(const std::string& s, bool on);
std::string green(const std::string& s, bool on);

using tula::read_text_file;  // conf.hpp

/// Directory of the running executable (dirname of /proc/self/exe); "" when unknown.
std::string self_exe_dir();

/// The first executable `name` in $PATH; nullopt when there is none.
std::optional<std::string> find_in_path(const std::string& name);

/// True if `path` exists; errno-free helper (stat).
bool file_exists(const std::string& path);

/// A directory for a command's files: `given` (made, mode 0700, when missing; kept with what
/// is in it), or with `given` empty a fresh private one, $TMPDIR (when absolute, else /tmp)
/// /PREFIX.XXXXXX, removed by the destructor with the files listed in `files` (only what the
/// command made there). Errors: tula::Error naming the directory and what to do.
struct TempDir {
    std::string path;
    bool own = false;
    std::vector<std::string> files;  // files to remove with the directory
    explicit TempDir(const std::string& given, const char* prefix = "tula");
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    /// path/NAME, listed in `files`.
    std::string add(const std::string& name) {
        files.push_back(path + "/" + name);
        return files.back();
    }
};

/// One database of a read-only command, opened read-only when it exists and is readable.
struct DbHandle {
    std::string path;
    bool missing = false;            ///< the file does not exist
    std::string error;               ///< why it could not be read (one line), else ""
    std::optional<ProfileDb> db;     ///< set when it was opened
};

/// Opens each path read-only (see DbHandle). Never throws for a bad database.
std::vector<DbHandle> open_read_dbs(const std::vector<std::string>& paths);

/// Adds the subcommands. Each one's parse callback sets `*action`.
void add_plan_command(CLI::App& app, Action* action);
void add_profile_command(CLI::App& app, Action* action);
void add_db_command(CLI::App& app, Action* action);
void add_explain_command(CLI::App& app, Action* action);
void add_predict_command(CLI::App& app, Action* action);  // cli/predict.cpp
void add_submit_filter_command(CLI::App& app, Action* action);  // cli/submit_filter.cpp
void add_plot_command(CLI::App& app, Action* action);

}  // namespace tula::cli
