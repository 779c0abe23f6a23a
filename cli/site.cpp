// tula CLI: the site as Slurm has it now (see site.hpp).
#include "site.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "common.hpp"
#include "slurm_query.hpp"
#include "text.hpp"
#include "tula/error.hpp"
#include "tula/stop.hpp"

namespace tula::cli {
namespace {

constexpr size_t kMaxProbes = 16;       // will-run questions per plan (each about 1-3 ms on the testbed)
constexpr size_t kProbesPerPartition = 4;
constexpr double kMinStartSeconds = 0.1;  // the least time left for the start estimates

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s + ",") {
        if (c == ',') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "about 25 min", "about 2 h 10 min" for a wait in seconds.
std::string wait_phrase(double s) { return "about " + format_duration(s); }

std::string part_label(const std::string& p) { return p.empty() ? std::string("the default partition") : p; }

}  // namespace

namespace {

// The partition names of a --partition LIST (sbatch -p). Errors: UsageError when it names none
// or a name is not a partition name.
std::vector<std::string> wanted_partitions(const std::string& partitions) {
    const std::vector<std::string> want = split_list(partitions);
    if (want.empty()) throw UsageError("--partition '" + one_line(partitions, 80) + "' names no partition");
    for (const auto& w : want)
        if (!valid_class_name(w))
            throw UsageError("--partition: '" + one_line(w, 80) +
                             "' is not a partition name (1 to 63 letters, digits, _ . -; a list is a,b)");
    return want;
}

}  // namespace

void narrow_site(Config* cfg, const std::string& partitions, int ranks_per_node) {
    if (ranks_per_node != 0 && (ranks_per_node < 1 || ranks_per_node > 1024))
        throw UsageError("--ranks-per-node must be between 1 and 1024, not " + std::to_string(ranks_per_node));
    if (!partitions.empty()) {
        const std::vector<std::string> want = wanted_partitions(partitions);
        if (!cfg->partitions.empty()) {
            std::vector<PartitionConf> kept;
            std::string have;
            for (const PartitionConf& p : cfg->partitions) {
                have += (have.empty() ? "" : ", ") + p.name;
                if (std::find(want.begin(), want.end(), p.name) != want.end()) kept.push_back(p);
            }
            if (kept.empty())
                throw Error("tula.conf has no [partition] section for " + one_line(partitions, 80) + " (it has: " + have +
                            "); ask for one of those, or ask the administrator to describe the partition");
            if (cfg->site_before_narrowing.empty()) cfg->site_before_narrowing = cfg->site_partitions();
            cfg->partitions = kept;
        }
    }
    if (ranks_per_node > 0) {
        if (cfg->partitions.empty()) cfg->partitions = cfg->site_partitions();  // the implicit one, made explicit
        for (PartitionConf& p : cfg->partitions) p.ranks_per_node = ranks_per_node;
    }
}

void narrow_hardware(std::vector<HardwareSpec>* parts, const std::string& file, const std::string& partitions,
                     int ranks_per_node) {
    if (!partitions.empty()) {
        const std::vector<std::string> want = wanted_partitions(partitions);
        std::vector<HardwareSpec> kept;
        std::string have;
        for (const HardwareSpec& h : *parts) {
            const std::string name = h.partition.empty() ? h.name : h.partition;
            have += (have.empty() ? "" : ", ") + name;
            if (std::find(want.begin(), want.end(), name) != want.end()) kept.push_back(h);
        }
        if (kept.empty())
            throw UsageError("--partition " + one_line(partitions, 80) + ": the hardware file " + file +
                             " has no such partition (it has: " + have + ")");
        *parts = kept;
    }
    if (ranks_per_node <= 0) return;
    for (HardwareSpec& h : *parts) {
        if (ranks_per_node > h.gpus_per_node)
            throw UsageError("--ranks-per-node " + std::to_string(ranks_per_node) + ": the nodes of partition " +
                             (h.partition.empty() ? h.name : h.partition) + " in " + file + " have " +
                             std::to_string(h.gpus_per_node) + " GPUs (gpus_per_node), one rank each; ask for at most " +
                             std::to_string(h.gpus_per_node) + ", or plan only the partitions with more (--partition)");
        h.gpus_per_node = ranks_per_node;
    }
}

bool slurm_configured() {
    struct stat st;
    const char* env = std::getenv("SLURM_CONF");
    if (env && *env) return ::stat(env, &st) == 0 && S_ISREG(st.st_mode);
    return ::stat("/etc/slurm/slurm.conf", &st) == 0 && S_ISREG(st.st_mode);
}

SiteQueue apply_slurm_limits(Config* cfg, std::vector<std::string>* warnings) {
    SiteQueue q;
    if (!cfg->queue_estimate || !slurm_configured()) return q;
    q.asked = true;
    const auto t0 = std::chrono::steady_clock::now();
    const SlurmSite site = query_partitions(cfg->queue_timeout);
    q.seconds_left = std::max(kMinStartSeconds, cfg->queue_timeout - seconds_since(t0));
    if (!site.answered) {
        q.note = "the queue is not known (" + site.error + "): planned as if it were empty";
        warnings->push_back("no partition limits or queue estimate from Slurm (" + site.error +
                            "); planned with tula.conf's partitions as if the queue were empty");
        return q;
    }
    q.answered = true;
    if (cfg->partitions.empty()) cfg->partitions = cfg->site_partitions();  // the implicit one: Slurm's default
    for (PartitionConf& p : cfg->partitions) {
        const SlurmPartition* s = nullptr;
        for (const SlurmPartition& sp : site.partitions)
            if (p.name.empty() ? sp.is_default : sp.name == p.name) s = &sp;
        if (!s) {
            p.unavailable = p.name.empty() ? "Slurm has no default partition"
                                           : "Slurm has no partition " + p.name + " (tula.conf describes one)";
            continue;
        }
        if (!s->usable) {
            p.unavailable = s->why_not;
            continue;
        }
        int nodes = std::min(p.nodes, s->up_nodes);
        if (s->max_nodes > 0) nodes = std::min(nodes, s->max_nodes);
        if (nodes < 1) {
            p.unavailable = "no node of the partition is up";
            continue;
        }
        p.nodes = nodes;
        p.max_time_minutes = s->max_time_minutes;
    }
    return q;
}

void apply_queue(PlanReport* r, const Config& cfg, const PolicySpec& policy, SiteQueue* q,
                 std::vector<std::string>* warnings) {
    if (!q->answered) return;
    Plan& plan = r->plan;
    const std::vector<Candidate>& cs = plan.candidates;
    if (cs.empty()) return;
    const std::vector<PartitionConf> parts = cfg.site_partitions();
    auto max_time = [&](const std::string& name) {
        for (const PartitionConf& p : parts)
            if (p.name == name) return p.max_time_minutes;
        return 0;
    };
    // The shapes to ask about: the plan's front, then each partition's own front.
    std::set<std::pair<std::string, int>> keys;
    std::vector<StartProbe> probes;
    auto add = [&](const Candidate& c) {
        if (probes.size() >= kMaxProbes || !keys.insert({c.partition, c.nodes}).second) return;
        StartProbe p;
        p.partition = c.partition;
        p.nodes = c.nodes;
        p.ranks_per_node = c.ranks_per_node;
        p.gpus_per_node = c.gpus_per_node;
        p.time_limit_minutes = candidate_time_limit(c, cfg.time_margin, cfg.time_overhead, max_time(c.partition));
        if (r->time_min) {  // the job may start in a hole of its --time-min (submit.cpp sets it)
            const int m = candidate_time_min(c, p.time_limit_minutes);
            p.time_min_minutes = m < p.time_limit_minutes ? m : 0;
        }
        probes.push_back(p);
    };
    for (size_t i : pareto_front(cs)) add(cs[i]);
    std::map<std::string, std::vector<Candidate>> by_part;
    for (const Candidate& c : cs) by_part[c.partition].push_back(c);
    for (auto& [name, list] : by_part) {
        size_t n = 0;
        for (size_t i : pareto_front(list))
            if (n++ < kProbesPerPartition) add(list[i]);
    }
    const std::vector<StartEstimate> starts = query_starts(probes, q->seconds_left);
    std::map<std::pair<std::string, int>, const StartEstimate*> wait;  // (partition, nodes) -> its answer
    std::string unanswered;
    for (size_t i = 0; i < probes.size(); ++i) {
        if (starts[i].answered) wait[{probes[i].partition, probes[i].nodes}] = &starts[i];
        else if (unanswered.empty()) unanswered = starts[i].error;
    }
    if (!unanswered.empty())
        warnings->push_back("slurmctld gave no start estimate for some candidates (" + unanswered +
                            "); they count as starting now");
    std::vector<QueueStart> waits(cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
        const Candidate& c = cs[i];
        // the nearest probed node count at or above this one in its partition, else its largest
        const StartEstimate* s = nullptr;
        auto it = wait.lower_bound({c.partition, c.nodes});
        if (it != wait.end() && it->first.first == c.partition) {
            s = it->second;
        } else {
            for (const auto& [k, w] : wait)
                if (k.first == c.partition) s = w;
        }
        if (!s) continue;
        waits[i].wait_seconds = s->wait_seconds;
        // the hole serves a candidate whose own --time-min fits in it
        const int limit = candidate_time_limit(c, cfg.time_margin, cfg.time_overhead, max_time(c.partition));
        const int part = candidate_time_min(c, limit);
        if (s->hole_minutes > 0 && part <= s->hole_minutes) {
            waits[i].hole_wait_seconds = s->hole_wait_seconds;
            waits[i].hole_seconds = 60.0 * s->hole_minutes;
            waits[i].part_seconds = 60.0 * part;  // Slurm gives every part the --time-min as its limit
        }
    }
    const Candidate before = plan.choice();
    const double before_wait = waits[plan.chosen].wait_seconds;
    apply_queue_starts(&plan, waits, policy, r->workload, cfg.time_margin, cfg.time_overhead, parts);
    const Candidate& ch = plan.choice();
    const std::string where = ch.partition.empty() ? std::string() : " of " + ch.partition;
    const bool moved = ch.partition != before.partition || ch.nodes != before.nodes ||
                       ch.global_batch != before.global_batch;
    const bool first = ch.time_to_target < before_wait + before.job_seconds();
    if (moved && before_wait >= 60)
        q->note = part_label(before.partition) + " starts in " + wait_phrase(before_wait) + "; " + nodes_phrase(ch.nodes) +
                  where + (ch.queue_wait_seconds < 60 ? " start now" : " start in " + wait_phrase(ch.queue_wait_seconds)) +
                  (first ? " and finish first" : " and cost less for their time to result");
    else if (ch.queue_wait_seconds >= 60)
        q->note = "starts in " + wait_phrase(ch.queue_wait_seconds) + (ch.partition.empty() ? "" : " on " + ch.partition);
    if (ch.hole.used) q->note += (q->note.empty() ? "" : "; or ") + hole_phrase(ch.hole);
}

}  // namespace tula::cli
