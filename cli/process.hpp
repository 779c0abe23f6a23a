// tula CLI: running another program (tula-train, sbatch, squeue, scancel) with fork/exec,
// never through a shell.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace tula::cli {

/// How a child process ended.
struct ProcessResult {
    bool started = false;  ///< false: fork or exec failed (see error)
    int exit_code = -1;    ///< exit status when it exited normally, else -1
    int signal = 0;        ///< the signal that killed it, else 0
    std::string error;     ///< why it did not start ("cannot run X: No such file or directory")
    bool ok() const { return started && signal == 0 && exit_code == 0; }
};

/// (name, value) environment variables set in a child on top of this process's environment.
using EnvSet = std::vector<std::pair<std::string, std::string>>;

/// Starts argv[0] (looked up in $PATH when it has no '/') with the arguments argv[1..], the
/// environment of this process plus `set_env`, standard input from this process, standard
/// output to `stdout_fd` and standard error to `stderr_fd` (-1: this process's). Returns
/// the child's pid once it has exec'd, or -1 with `*error` set (fork/exec failure, e.g. "cannot
/// run sbatch: No such file or directory"). Flushes stdout and stderr first. Never throws.
pid_t start_process(const std::vector<std::string>& argv, const EnvSet& set_env, int stdout_fd, int stderr_fd,
                    std::string* error);

/// Waits for `pid` (started by start_process). `block` false: returns false at once when it
/// is still running. Returns true and fills `*r` when it has ended.
bool wait_process(pid_t pid, bool block, ProcessResult* r);

/// start_process + wait_process with this process's standard streams.
ProcessResult run_process(const std::vector<std::string>& argv, const EnvSet& set_env = {});

/// Runs a short command and returns at most `max_bytes` of its standard output in `*out`
/// (standard error is discarded). Used for squeue and scancel.
ProcessResult run_capture(const std::vector<std::string>& argv, std::string* out, size_t max_bytes = 65536);

/// One line about how it ended: "exited with status 3", "was killed by signal 9 (Killed)",
/// or the start error. `name` is the program's name for the message.
std::string describe_result(const ProcessResult& r, const std::string& name);

}  // namespace tula::cli
