// tula CLI: the libslurm half of slurm_query.hpp: the child process that asks slurmctld, and the
// parent's deadline. The child writes its lines (slurm_reply.cpp) to a pipe and exits; the
// parent reads until end of file or the deadline, then kills and reaps the child.
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "slurm_query.hpp"

// Exported by libslurm and named in slurm.h's comment on slurm_job_will_run2, but not declared
// there in Slurm 22.05.
extern "C" void slurm_free_will_run_response_msg(will_run_response_msg_t* msg);

namespace tula::cli {
namespace {

// Writes all of `s` to `fd`; errors are ignored (the parent then sees fewer lines).
void write_all(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = ::write(fd, s.data() + done, s.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

// What ended the child, for a message: "" when it exited with status 0, else "it exited with
// status N" or "it was killed by signal N", and the last line it wrote to standard error.
std::string child_end(int status, int err_fd) {
    std::string what;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return what;
    if (WIFEXITED(status)) what = "it exited with status " + std::to_string(WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) what = "it was killed by signal " + std::to_string(WTERMSIG(status));
    else what = "it ended";
    if (err_fd < 0) return what;
    char buf[2048];
    const off_t size = ::lseek(err_fd, 0, SEEK_END);
    const off_t from = size > static_cast<off_t>(sizeof buf) ? size - static_cast<off_t>(sizeof buf) : 0;
    const ssize_t n = ::pread(err_fd, buf, sizeof buf, from);
    if (n <= 0) return what;
    std::string text(buf, static_cast<size_t>(n));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const size_t nl = text.rfind('\n');
    const std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
    return last.empty() ? what : what + ": " + last;
}

// Runs `body` in a child whose standard output is a pipe and whose standard error is a memory
// file (libslurm prints its own errors there), and returns what it wrote to the pipe before it
// exited or `timeout_seconds` passed; *timed_out says which. The child writes an end line
// (encode_done) after `body`; when it died before, *ended says how (child_end). The child is
// killed and reaped either way.
std::string run_child(const std::function<void(int)>& body, double timeout_seconds, bool* timed_out,
                      std::string* ended, std::string* error) {
    *timed_out = false;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        *error = std::string("cannot make a pipe: ") + std::strerror(errno);
        return "";
    }
    const int err_fd = ::memfd_create("tula-slurm-query-stderr", MFD_CLOEXEC);
    // The child must not write out what the parent buffered (libslurm may flush stdio in it).
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        *error = std::string("cannot fork: ") + std::strerror(errno);
        ::close(fds[0]);
        ::close(fds[1]);
        if (err_fd >= 0) ::close(err_fd);
        return "";
    }
    if (pid == 0) {
        ::close(fds[0]);
        int sink = err_fd >= 0 ? err_fd : ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (sink >= 0) ::dup2(sink, STDERR_FILENO);
        // A second bound, in case the parent is gone: the child never outlives the deadline by much.
        ::alarm(static_cast<unsigned>(std::ceil(timeout_seconds)) + 1);
        body(fds[1]);
        write_all(fds[1], encode_done());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    char buf[4096];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            *timed_out = true;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) {
            *timed_out = true;
            break;
        }
        if (r < 0) break;
        ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!*timed_out && !reply_complete(out)) {
        *ended = child_end(status, err_fd);
        if (ended->empty()) ended->assign("it ended without its last line");
    }
    if (err_fd >= 0) ::close(err_fd);
    return out;
}

// The calling user's group names (primary and supplementary).
std::vector<std::string> user_groups() {
    std::vector<std::string> names;
    const struct passwd* pw = ::getpwuid(::getuid());
    if (!pw) return names;
    int n = 64;
    std::vector<gid_t> gids(static_cast<size_t>(n));
    if (::getgrouplist(pw->pw_name, pw->pw_gid, gids.data(), &n) < 0) {
        gids.resize(static_cast<size_t>(n));
        if (::getgrouplist(pw->pw_name, pw->pw_gid, gids.data(), &n) < 0) return names;
    }
    for (int i = 0; i < n; ++i)
        if (const struct group* g = ::getgrgid(gids[static_cast<size_t>(i)])) names.emplace_back(g->gr_name);
    return names;
}

// The last libslurm error: libslurm sets errno (Slurm 24.11 removed slurm_get_errno()).
std::string slurm_error() { return slurm_strerror(errno); }

// In the child: partitions and their up nodes.
void partitions_child(int fd) {
    slurm_init(nullptr);
    partition_info_msg_t* parts = nullptr;
    node_info_msg_t* nodes = nullptr;
    if (slurm_load_partitions(0, &parts, SHOW_ALL) != SLURM_SUCCESS) {
        write_all(fd, encode_failure("slurm_load_partitions: " + slurm_error()));
        return;
    }
    if (slurm_load_node(0, &nodes, SHOW_ALL) != SLURM_SUCCESS) nodes = nullptr;
    const std::vector<std::string> groups = user_groups();
    const bool root = ::getuid() == 0;
    for (uint32_t i = 0; i < parts->record_count; ++i) {
        const partition_info_t& pi = parts->partition_array[i];
        SlurmPartition p;
        p.name = pi.name ? pi.name : "";
        p.total_nodes = static_cast<int>(pi.total_nodes);
        p.is_default = (pi.flags & PART_FLAG_DEFAULT) != 0;
        p.max_nodes = pi.max_nodes == INFINITE || pi.max_nodes == NO_VAL ? 0 : static_cast<int>(pi.max_nodes);
        p.max_time_minutes = pi.max_time == INFINITE || pi.max_time == NO_VAL ? 0 : static_cast<int>(pi.max_time);
        if (nodes && pi.node_inx) {
            for (int k = 0; pi.node_inx[k] >= 0 && pi.node_inx[k + 1] >= 0; k += 2)
                for (int n = pi.node_inx[k]; n <= pi.node_inx[k + 1] && static_cast<uint32_t>(n) < nodes->record_count; ++n) {
                    const uint32_t st = nodes->node_array[n].node_state;
                    const uint32_t base = st & NODE_STATE_BASE;
                    if (base != NODE_STATE_DOWN && base != NODE_STATE_FUTURE && base != NODE_STATE_UNKNOWN &&
                        !(st & NODE_STATE_DRAIN) && !(st & NODE_STATE_FAIL))
                        ++p.up_nodes;
                }
        } else {
            p.up_nodes = p.total_nodes;
        }
        if ((pi.state_up & PARTITION_SCHED) == 0 || (pi.state_up & PARTITION_SUBMIT) == 0) {
            p.usable = false;
            p.why_not = "the partition is not up (State is not UP)";
        } else if ((pi.flags & PART_FLAG_ROOT_ONLY) && !root) {
            p.usable = false;
            p.why_not = "RootOnly=YES";
        } else if (!groups_allowed(pi.allow_groups ? pi.allow_groups : "", groups)) {
            p.usable = false;
            p.why_not = std::string("AllowGroups=") + pi.allow_groups + " does not include your groups";
        }
        write_all(fd, encode_partition(p));
    }
    slurm_free_partition_info_msg(parts);
    if (nodes) slurm_free_node_info_msg(nodes);
}

// In the child: slurm_job_will_run2 for a job of `pr`'s shape with a time limit of `minutes`
// that may not start before `begin` (seconds since the epoch; 0: now); the expected start minus
// now, seconds (>= 0), or nullopt with the error in *error.
std::optional<double> will_run_wait(const StartProbe& pr, int minutes, time_t begin, const std::string& cwd_in,
                                    std::string* error) {
    job_desc_msg_t d;
    slurm_init_job_desc_msg(&d);
    if (begin > 0) d.begin_time = begin;
    std::string part = pr.partition, name = "tula-will-run", gres, cwd = cwd_in;
    d.partition = part.empty() ? nullptr : &part[0];
    d.name = &name[0];
    d.min_nodes = d.max_nodes = static_cast<uint32_t>(pr.nodes);
    d.ntasks_per_node = static_cast<uint16_t>(pr.ranks_per_node);
    d.num_tasks = static_cast<uint32_t>(pr.nodes * pr.ranks_per_node);
    d.time_limit = static_cast<uint32_t>(minutes);
    d.user_id = ::getuid();
    d.group_id = ::getgid();
    // slurmctld refuses a job without a working directory from Slurm 24.11 on, for a
    // will-run query too ("Job cannot be submitted without the current working directory")
    d.work_dir = &cwd[0];
    if (pr.gpus_per_node > 0) {
        gres = "gres:gpu:" + std::to_string(pr.gpus_per_node);
        d.tres_per_node = &gres[0];
    }
    will_run_response_msg_t* resp = nullptr;
    if (slurm_job_will_run2(&d, &resp) != SLURM_SUCCESS || !resp) {
        *error = slurm_error();
        return std::nullopt;
    }
    const double wait = std::difftime(resp->start_time, ::time(nullptr));
    slurm_free_will_run_response_msg(resp);
    return wait > 0 ? wait : 0.0;
}

// In the child: the end times of slurmctld's reservations (seconds since the epoch); none when
// they cannot be read.
std::vector<time_t> reservation_ends() {
    std::vector<time_t> ends;
    reserve_info_msg_t* msg = nullptr;
    if (slurm_load_reservations(0, &msg) != SLURM_SUCCESS || !msg) return ends;
    for (uint32_t i = 0; i < msg->record_count; ++i) ends.push_back(msg->reservation_array[i].end_time);
    slurm_free_reservation_info_msg(msg);
    return ends;
}

// In the child: slurm_job_will_run2 for each probe, in order (after the reservations' ends when
// slurmctld refuses it now: wait_after_reservations); then the backfill holes of the
// probes with a --time-min (find_hole), within kMaxHoleProbes questions in all.
void starts_child(int fd, const std::vector<StartProbe>& probes) {
    slurm_init(nullptr);
    char dir[4096];
    const std::string cwd = ::getcwd(dir, sizeof dir) ? dir : "/";
    std::vector<StartEstimate> got(probes.size());
    std::optional<std::vector<time_t>> ends;  // the reservations' ends, read at the first refusal
    for (size_t i = 0; i < probes.size(); ++i) {
        StartEstimate& s = got[i];
        const StartProbe& pr = probes[i];
        std::optional<double> w = will_run_wait(pr, pr.time_limit_minutes, 0, cwd, &s.error);
        if (!w) {
            if (!ends) ends = reservation_ends();
            std::string ignored;
            const BeginOracle after = [&](time_t begin) {
                return will_run_wait(pr, pr.time_limit_minutes, begin, cwd, &ignored);
            };
            w = wait_after_reservations(after, *ends, ::time(nullptr), kMaxReservationEnds, nullptr);
            if (w) s.error.clear();
        }
        s.answered = w.has_value();
        if (w) s.wait_seconds = *w;
        write_all(fd, encode_start(i, s));
    }
    int left = kMaxHoleProbes;
    for (size_t i = 0; i < probes.size() && left > 0; ++i) {
        const StartProbe& pr = probes[i];
        if (!got[i].answered || pr.time_min_minutes < 1 || pr.time_min_minutes >= pr.time_limit_minutes) continue;
        std::string ignored;
        const StartOracle oracle = [&](int minutes) { return will_run_wait(pr, minutes, 0, cwd, &ignored); };
        const HoleFound h = find_hole(pr.time_min_minutes, pr.time_limit_minutes, got[i].wait_seconds, oracle,
                                      std::min(left, kHoleProbesPerShape));
        left -= h.probes;
        if (h.minutes > 0) write_all(fd, encode_hole(i, h));
    }
}

std::string deadline_message(double timeout_seconds) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", timeout_seconds);
    return std::string("slurmctld did not answer within ") + buf + " s";
}

}  // namespace

SlurmSite query_partitions(double timeout_seconds) {
    SlurmSite site;
    bool timed_out = false;
    std::string error;
    std::string ended;
    const std::string out = run_child(partitions_child, timeout_seconds, &timed_out, &ended, &error);
    if (!error.empty()) {
        site.error = error;
        return site;
    }
    decode_reply(out, &site, nullptr);
    if (timed_out) {
        site.answered = false;
        site.error = deadline_message(timeout_seconds);
    } else if (!ended.empty()) {
        site.answered = false;
        site.error = "the process that asks slurmctld ended before its answer (" + ended + ")";
    } else if (site.answered && site.partitions.empty()) {
        site.answered = false;
        site.error = "slurmctld reported no partitions";
    }
    return site;
}

std::vector<StartEstimate> query_starts(const std::vector<StartProbe>& probes, double timeout_seconds) {
    std::vector<StartEstimate> starts(probes.size());
    if (probes.empty()) return starts;
    bool timed_out = false;
    std::string error, ended;
    const std::string out =
        run_child([&](int fd) { starts_child(fd, probes); }, timeout_seconds, &timed_out, &ended, &error);
    const std::string none = !error.empty() ? error
                             : timed_out     ? deadline_message(timeout_seconds)
                             : !ended.empty() ? "the process that asks slurmctld ended before its answer (" + ended + ")"
                                             : std::string("slurmctld did not answer this probe");
    for (auto& s : starts) s.error = none;
    if (error.empty()) decode_reply(out, nullptr, &starts);
    return starts;
}

}  // namespace tula::cli
