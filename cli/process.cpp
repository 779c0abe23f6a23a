// tula CLI: fork/exec of child programs (see process.hpp).
#include "process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tula::cli {

pid_t start_process(const std::vector<std::string>& argv, const EnvSet& set_env, int stdout_fd, int stderr_fd,
                    std::string* error) {
    if (argv.empty() || argv[0].empty()) {
        if (error) *error = "no program to run";
        return -1;
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    // A close-on-exec pipe tells the parent whether exec succeeded: the child writes errno
    // into it only when execvp fails.
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        if (error) *error = "cannot run " + argv[0] + ": pipe: " + std::strerror(errno);
        return -1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        if (error) *error = "cannot run " + argv[0] + ": fork: " + std::strerror(errno);
        ::close(fds[0]);
        ::close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        ::close(fds[0]);
        if (stdout_fd >= 0 && ::dup2(stdout_fd, STDOUT_FILENO) < 0) ::_exit(127);
        if (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0) ::_exit(127);
        for (const auto& [k, v] : set_env) ::setenv(k.c_str(), v.c_str(), 1);
        ::execvp(args[0], args.data());
        const int e = errno;
        ssize_t ignored = ::write(fds[1], &e, sizeof e);
        (void)ignored;
        ::_exit(127);
    }
    ::close(fds[1]);
    int child_errno = 0;
    ssize_t n;
    do {
        n = ::read(fds[0], &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    ::close(fds[0]);
    if (n == static_cast<ssize_t>(sizeof child_errno)) {
        int status;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (error) *error = "cannot run " + argv[0] + ": " + std::strerror(child_errno);
        return -1;
    }
    return pid;
}

bool wait_process(pid_t pid, bool block, ProcessResult* r) {
    int status = 0;
    pid_t w;
    do {
        w = ::waitpid(pid, &status, block ? 0 : WNOHANG);
    } while (w < 0 && errno == EINTR);
    if (w == 0) return false;
    r->started = true;
    if (w < 0) {
        r->started = false;
        r->error = std::string("lost track of process ") + std::to_string(pid) + ": " + std::strerror(errno);
        return true;
    }
    if (WIFEXITED(status)) r->exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) r->signal = WTERMSIG(status);
    return true;
}

ProcessResult run_process(const std::vector<std::string>& argv, const EnvSet& set_env) {
    ProcessResult r;
    const pid_t pid = start_process(argv, set_env, -1, -1, &r.error);
    if (pid < 0) return r;
    wait_process(pid, true, &r);
    return r;
}

ProcessResult run_capture(const std::vector<std::string>& argv, std::string* out, size_t max_bytes) {
    ProcessResult r;
    out->clear();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        r.error = "cannot run " + (argv.empty() ? std::string("?") : argv[0]) + ": pipe: " + std::strerror(errno);
        return r;
    }
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const pid_t pid = start_process(argv, {}, fds[1], devnull, &r.error);
    ::close(fds[1]);
    if (devnull >= 0) ::close(devnull);
    if (pid < 0) {
        ::close(fds[0]);
        return r;
    }
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out->size() < max_bytes) out->append(buf, std::min(static_cast<size_t>(n), max_bytes - out->size()));
    }
    ::close(fds[0]);
    wait_process(pid, true, &r);
    return r;
}

std::string describe_result(const ProcessResult& r, const std::string& name) {
    if (!r.started) return r.error.empty() ? "cannot run " + name : r.error;
    if (r.signal) {
        const char* s = ::strsignal(r.signal);
        return name + " was killed by signal " + std::to_string(r.signal) + (s ? std::string(" (") + s + ")" : "");
    }
    return name + " exited with status " + std::to_string(r.exit_code);
}

}  // namespace tula::cli
