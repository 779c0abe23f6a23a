// tula CLI: `tula plan` -- predicts every (nodes, global batch) candidate for a workload and
// shows the choice (tula(1), "tula plan"). The `--format kv` output is the contract read by
// etc/cli_filter.lua at submission time; keep its keys stable.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "plan.hpp"

#include "common.hpp"
#include "format.hpp"
#include "site.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/hardware.hpp"
#include "tula/planner.hpp"
#include "tula/tula.h"
#include "tula/workload.hpp"

namespace tula::cli {

// --timeout: `seconds` (> 0) of wall-clock time from now, SIGALRM ends the process with its
// default action (killed by SIGALRM; a shell reports exit status 142), printing nothing, as
// timeout(1) would end it. The default action, not a handler: it is a fatal signal, so it also
// ends a killable wait in the kernel (an unreachable NFS server), which a handler could not
// interrupt. The disposition and the blocked mask inherited through exec (from sbatch, which
// runs this through cli_filter.lua) are reset first. Throws tula::Error if a call fails.
void arm_timeout(int seconds) {
    if (seconds <= 0) return;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    if (::sigaction(SIGALRM, &sa, nullptr) != 0 || ::sigprocmask(SIG_UNBLOCK, &alrm, nullptr) != 0)
        throw Error(std::string("--timeout: cannot set up SIGALRM: ") + std::strerror(errno));
    ::alarm(static_cast<unsigned>(seconds));
}

namespace {

constexpr size_t kMaxScriptBytes = 1 << 20;  // parse_train_command reads at most 1 MiB too


// The columns a plan table shows beyond the fixed ones: each only where a candidate has it.
struct PlanColumns {
    bool gpus = false;    // GPU-hours: tula.conf (or the hardware file) gives GPUs
    bool energy = false;  // energy (kWh): it gives watts
    bool parts = false;   // partition and ranks/node: partition sections or a hardware file's partitions
    bool queue = false;   // wait (s): slurmctld expects a wait
};

PlanColumns plan_columns(const PlanReport& r) {
    PlanColumns k;
    k.gpus = r.gpus_per_node > 0;
    k.energy = r.watts_per_node > 0;
    for (const Candidate& c : r.plan.candidates) {
        k.queue = k.queue || c.queue_wait_seconds > 0;
        k.gpus = k.gpus || c.gpus_per_node > 0;
        k.energy = k.energy || c.energy_kwh > 0;
        k.parts = k.parts || !c.partition.empty();
    }
    return k;
}

// A simulated plan's first lines: the published figures and fitted runs it was planned from.
void print_simulated(const PlanReport& r, const SimulatedModels* sim, bool colour) {
    const Plan& p = r.plan;
    const int fitted = p.calibration.runs;
    std::printf("%s %s: planned from published figures%s, not from profiles\n", bold("SIMULATED plan", colour).c_str(),
                r.hardware.c_str(),
                fitted > 0 ? (" and the compute of " + std::to_string(fitted) + " finished run(s)").c_str() : "");
    if (sim) {
        std::printf("  compute: t(b) = %s ms + %s ms x b%s per node (%s)\n",
                    format_number("%.4g", sim->compute.t0 * 1e3).c_str(),
                    format_number("%.4g", sim->compute.t1 * 1e3).c_str(),
                    sim->compute.flat ? (", at least " + format_number("%.4g", sim->compute.t_min * 1e3) + " ms").c_str() : "",
                    fitted > 0 ? "fitted to the runs' seconds per step" : "roofline: FLOPs / (peak x efficiency)");
        const std::string across =
            sim->allreduce.bus_bandwidth.empty()
                ? std::string(sim->allreduce.algorithm_name()) + ", alpha " + format_number("%.4g", sim->allreduce.alpha * 1e6) +
                      " us, beta " + format_number("%.4g", sim->allreduce.beta * 1e9) + " ns/byte (alpha-beta model)"
                : "nccl-tests bus bandwidth tables";
        const std::string buckets =
            sim->overlap.bucket_bytes > 0
                ? "in " + format_number("%.4g", sim->overlap.bucket_bytes / 1048576.0) + " MiB buckets during the backward pass"
                : "in one message after the backward pass";
        std::printf("  allreduce: %s; intra-node %s ms per iteration; the gradient %s\n", across.c_str(),
                    format_number("%.4g", sim->intra_node_seconds * 1e3).c_str(), buckets.c_str());
        std::printf("  memory per node: %s GiB + %s MiB x b, of %s GiB\n",
                    format_number("%.4g", sim->memory.static_bytes / 1073741824.0).c_str(),
                    format_number("%.4g", sim->memory.per_example_bytes / 1048576.0).c_str(),
                    format_number("%.4g", sim->node_memory_bytes / 1073741824.0).c_str());
    }
}

// The plan's header line (workload, epochs, policy, nodes, price), its candidates table and the
// table's legend.
void print_candidates(const PlanReport& r, const PlanColumns& k, bool colour) {
    const Plan& p = r.plan;
    const bool gpus = k.gpus, energy = k.energy, parts = k.parts, queue = k.queue;
    int lo = 0, hi = 0;
    for (const auto& c : p.candidates) {
        lo = lo == 0 ? c.nodes : std::min(lo, c.nodes);
        hi = std::max(hi, c.nodes);
    }
    std::string price = format_number("%g", r.price_per_node_hour) + " per node-hour";
    if (r.price_per_gpu_hour > 0)
        price += " + " + std::to_string(r.gpus_per_node) + " GPUs x " + format_number("%g", r.price_per_gpu_hour) + " per GPU-hour";
    for (const Candidate& c : p.candidates)
        if (c.partition != p.candidates.front().partition) {
            price = "each partition's own (tula.conf sections or the hardware file)";
            break;
        }
    std::printf("%s: %d epoch%s, policy %s (%s), %s, price %s\n", bold(r.workload, colour).c_str(),
                r.epochs, r.epochs == 1 ? "" : "s", policy_name(r.policy),
                policy_phrase(r.policy, r.deadline_seconds, r.budget, r.node_hour_price()).c_str(),
                lo == hi ? nodes_phrase(lo).c_str() : (std::to_string(lo) + ".." + std::to_string(hi) + " nodes").c_str(),
                price.c_str());
    Table t;
    t.header = {""};
    if (parts) t.header.insert(t.header.end(), {"partition", "ranks/node"});
    for (const char* h : {"nodes", "global batch", "local batch", "iter (ms)", "epoch (s)", "epochs", "training (s)",
                          "upper (s)", "node-hours"})
        t.header.push_back(h);
    if (queue) t.header.push_back("wait (s)");
    if (gpus) t.header.push_back("GPU-hours");
    if (energy) t.header.push_back("energy (kWh)");
    for (const char* h : {"cost", "accuracy", "pareto"}) t.header.push_back(h);
    t.right.assign(t.header.size(), true);
    t.right.front() = t.right.back() = false;
    for (size_t i = 0; i < p.candidates.size(); ++i) {
        const Candidate& c = p.candidates[i];
        std::vector<std::string> row = {i == p.chosen ? ">" : ""};
        if (parts) row.insert(row.end(), {c.partition + (c.scaled_from.empty() ? "" : " (scaled)"), std::to_string(c.ranks_per_node)});
        row.insert(row.end(), {std::to_string(c.nodes), std::to_string(c.global_batch),
                                        std::to_string(c.local_batch), format_number("%.2f", c.iter_seconds * 1e3),
                                        format_number("%.2f", c.epoch_seconds), std::to_string(c.epochs),
                                        format_number("%.1f", c.total_seconds),
                                        format_number("%.1f", c.total_seconds_upper), format_number("%.4f", c.node_hours)});
        if (queue) row.push_back(format_number("%.0f", c.queue_wait_seconds));
        if (gpus) row.push_back(format_number("%.4f", c.gpu_hours));
        if (energy) row.push_back(format_number("%.4f", c.energy_kwh));
        row.push_back(format_number("%.4f", c.cost));
        row.push_back(std::isfinite(c.expected_accuracy) ? format_number("%.1f%%", c.expected_accuracy * 100) : "-");
        row.push_back(c.pareto ? "*" : "");
        t.rows.push_back(std::move(row));
    }
    const std::vector<std::string> lines = render_table_lines(t);
    std::printf("%s\n", lines[0].c_str());
    for (size_t i = 0; i < p.candidates.size(); ++i) {
        const std::string& l = lines[i + 1];
        if (i == p.chosen) std::printf("%s\n", bold(green(l, colour), colour).c_str());
        else if (!p.candidates[i].pareto) std::printf("%s\n", dim(l, colour).c_str());
        else std::printf("%s\n", l.c_str());
    }
    std::printf("  (> chosen, * on the Pareto front of %s and cost; epochs = %s; training = those "
                "epochs, without evaluation; upper = 95 %% prediction bound%s; accuracy from the run history, - when "
                "there is none)\n",
                queue ? "time to result (wait + training)" : "training time",
                p.fixed_epochs ? ("the requested " + std::to_string(r.epochs) + ", fixed").c_str()
                : p.convergence.e_min > 0
                    ? ("the whole epochs this batch needs to reach test accuracy " +
                       format_number("%.4g", p.convergence.target_accuracy) + " (noise scale, below)")
                          .c_str()
                    : ("the whole epochs this batch needs to reach what " + std::to_string(r.epochs) + " reach at batch " +
                       std::to_string(p.reference_batch) + " (noise scale, below)")
                          .c_str(),
                r.simulated ? ", equal to the prediction when simulated: nothing was measured" : "");
    if (p.max_local_batch > 0) std::printf("  (largest local batch that fits device memory: %d)\n", p.max_local_batch);
    for (const Candidate& c : p.candidates)
        if (!c.scaled_from.empty()) {
            std::printf("  (scaled: partition %s has no profile of its own; predicted from class %s by the published "
                        "figures of tula.conf, with a wider interval)\n",
                        c.partition.c_str(), c.scaled_from.c_str());
            break;
        }
    for (const std::string& l : p.left_out) std::printf("%s %s\n", bold("left out:", colour).c_str(), l.c_str());
}

// The lines under the table: the choice, why, the queue, the measuring jobs, the noise scale,
// the run fit, flagged runs and the time limit.
void print_choice(const PlanReport& r, const PlanColumns& k, bool colour) {
    const Plan& p = r.plan;
    const bool gpus = k.gpus, energy = k.energy;
    const Candidate& c = p.choice();
    std::string extra;
    if (gpus) extra += ", " + format_number("%.3g", c.gpu_hours) + " GPU-hours";
    if (energy) extra += ", " + format_number("%.3g", c.energy_kwh) + " kWh";
    std::string where = nodes_phrase(c.nodes);
    if (!c.partition.empty()) where += " of " + c.partition;
    if (c.ranks_per_node > 1) where += " (" + std::to_string(c.ranks_per_node) + " ranks each)";
    std::printf("%s %s x global batch %d (local batch %d): predicted %s training, %s node-hours%s, cost %s\n",
                bold(r.simulated ? "chosen (simulated):" : "chosen:", colour).c_str(), where.c_str(), c.global_batch, c.local_batch,
                format_duration(c.total_seconds).c_str(), format_number("%.3g", c.node_hours).c_str(), extra.c_str(),
                format_number("%.4g", c.cost).c_str());
    std::printf("%s %s\n", bold("why:", colour).c_str(), bare_message(p.reason).c_str());
    if (!r.queue_note.empty()) std::printf("%s %s\n", bold("queue:", colour).c_str(), r.queue_note.c_str());
    if (!r.profile_jobs.empty())
        std::printf("%s measured by %s\n", bold("compute profile:", colour).c_str(), jobs_phrase(r.profile_jobs).c_str());
    // The convergence model (McCandlish et al. 2018, E(B) = E_min (1 + B/B_noise)): the job trains
    // the whole epochs its batch needs (unless they are fixed), and the policies rank by them.
    const ConvergenceModel& cv = p.convergence;
    const std::string bn_ci = cv.confidence > 0 ? ", " + format_number("%.4g", cv.noise_scale_low) + ".." +
                                                      format_number("%.4g", cv.noise_scale_high) + " at " +
                                                      format_number("%.1f", cv.confidence * 100) + " % confidence"
                                                : "";
    const std::string ep_ci = cv.confidence > 0 ? " (" + format_number("%.3g", c.epochs_to_target_low) + ".." +
                                                      format_number("%.3g", c.epochs_to_target_high) + ")"
                                                : "";
    const std::string trains = p.fixed_epochs ? "the job trains its " + std::to_string(c.epochs) + " epochs (fixed)"
                                              : "the job trains " + std::to_string(c.epochs) + " (TULA_EPOCHS)";
    const std::string goal = cv.e_min > 0 ? "to reach test accuracy " + format_number("%.4g", cv.target_accuracy) +
                                                " (E_min " + format_number("%.3g", cv.e_min) + ")"
                                          : "to reach what " + std::to_string(r.epochs) + " reach at batch " +
                                                std::to_string(p.reference_batch);
    std::printf("%s B_noise %s examples (%s%s); by E(B) = E_min (1 + B/B_noise) global batch %d needs %s epochs%s "
                "%s: %s; the time limit covers them\n",
                bold("noise scale:", colour).c_str(), format_number("%.4g", cv.noise_scale).c_str(), cv.origin().c_str(),
                bn_ci.c_str(), c.global_batch, format_number("%.3g", c.epochs_to_target).c_str(), ep_ci.c_str(),
                goal.c_str(), trains.c_str());
    if (c.run_fit_runs > 0)
        std::printf("%s the step is fitted to %d finished run(s) of this hardware class besides the profiles: %s s per "
                    "step at this placement (the run-fit correction, docs/models.md)\n",
                    bold("runs:", colour).c_str(), c.run_fit_runs,
                    (std::string(c.run_fit_seconds < 0 ? "" : "+") + format_number("%.3g", c.run_fit_seconds)).c_str());
    for (const auto& f : p.flagged_runs) std::printf("%s %s\n", bold("flagged run:", colour).c_str(), run_check_line(f).c_str());
    std::printf("%s %d min (predicted x %s + %s s)\n", bold("time limit:", colour).c_str(), p.time_limit_minutes,
                format_number("%g", 1.0 + r.time_margin).c_str(), format_number("%g", r.time_overhead).c_str());
}

// The human-readable plan: candidates table, choice, reason, time limit.
void print_table(const PlanReport& r, const SimulatedModels* sim) {
    const bool colour = stdout_colour();
    const PlanColumns k = plan_columns(r);
    if (r.simulated) print_simulated(r, sim, colour);
    print_candidates(r, k, colour);
    print_choice(r, k, colour);
}

// Reports a failure in the requested format; `status` is returned.
int fail(const std::string& format, const std::string& message, const std::vector<std::string>& warnings,
         int status) {
    if (format == "kv") {
        std::fputs(render_kv(error_kv(message, warnings)).c_str(), stdout);
    } else if (format == "json") {
        Json j;
        j["status"] = "error";
        j["message"] = one_line(bare_message(message), 4000);
        Json w = Json::array();
        for (const auto& s : warnings) w.push_back(bare_message(s));
        j["warnings"] = std::move(w);
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        for (const auto& w : warnings) print_warning(w);
    }
    print_error(message);
    return status;
}

// One row of the plan table: NODES:GLOBAL_BATCH:EPOCHS:SECONDS (seconds with one decimal), the
// epochs the candidate trains.
std::string table_row(const Candidate& c) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%d:%d:%d:%.1f", c.nodes, c.global_batch, c.epochs,
                  std::min(std::max(c.total_seconds, 0.0), 1e9));
    std::string row = buf;
    if (c.ranks_per_node > 1) row += ":" + std::to_string(c.ranks_per_node);  // absent: 1 (spank-tula(8))
    return row;
}

// What tula plan takes from its options and the batch script.
struct ScriptFacts {
    std::string workload;          // --workload, else --hardware's (hw_workload), else the script's
    int epochs = 0;                // --epochs, else the script's (0: none)
    EpochExamples examples;        // the script's --limit-train, --limit-test, --val-split (0: absent)
    int script_batch = 0;          // TrainCommand::reference_batch() of the script (0: no script line)
    std::string script_optimizer;  // TrainCommand::optimizer of the script ("": none)
    int threads = 0;               // TrainCommand::threads of the script (0: none)
};

// The workload and the facts of the batch script (--script, or its text): --workload names the
// workload (else `hw_workload`, else the script's tula-train line); the script still gives the
// epochs when it has a tula-train line. Errors: tula::Error for a script without a workload.
ScriptFacts read_script(const PlanOptions& o, const std::string& hw_workload, std::vector<std::string>* warnings) {
    ScriptFacts f;
    std::string& workload = f.workload;
    int& epochs = f.epochs;
    workload = o.workload;
    epochs = o.epochs;
    if (!o.script.empty() || !o.script_text.empty()) {
        // --workload (e.g. from --tula-workload) names the workload; the script still
        // gives the epoch count when it has a tula-train line.
        TrainCommand tc;
        try {
            tc = parse_train_command(!o.script_text.empty() ? o.script_text.substr(0, kMaxScriptBytes)
                                                            : read_text_file(o.script, kMaxScriptBytes));
        } catch (const std::exception& e) {
            if (workload.empty()) throw;
            warnings->push_back(std::string("cannot read the epochs from the script: ") + e.what());
        }
        if (workload.empty()) workload = hw_workload;
        if (workload.empty()) {
            if (!tc.problem.empty()) throw Error(tc.problem + " in " + o.script);
            if (!tc.found)
                throw Error("no `tula-train --model NAME` line and no `# tula: workload=MODEL@DATASET` directive in " +
                            o.script + "; add the directive, or name the workload with --workload MODEL@DATASET "
                            "(sbatch: --tula-workload=MODEL@DATASET)");
            workload = tc.workload();
            if (!valid_workload_name(workload))
                throw Error("the tula-train line of " + o.script + " names workload '" + one_line(workload, 80) +
                            "', which is not of the form MODEL@DATASET");
        }
        if (epochs <= 0 && tc.found) epochs = tc.epochs;
        if (tc.found) f.examples = tc.epoch_examples();
        if (tc.found) f.script_batch = tc.reference_batch();
        if (tc.found) f.script_optimizer = tc.optimizer;
        if (tc.found) f.threads = tc.threads;
    }
    if (workload.empty()) workload = hw_workload;
    return f;
}

// A plan of --hardware FILE (simulation: the models derived from the file's partitions; with
// --db, the run history of its workload gives the epochs to the target) into `r`.
void plan_from_hardware(const PlanOptions& o, const Config& cfg, const std::vector<HardwareSpec>& hw_parts,
                        const PolicySpec& spec, PlanReport* rp, std::vector<std::string>* warnings_out,
                        std::optional<SimulatedModels>* sim) {
    PlanReport& r = *rp;
    std::vector<std::string>& warnings = *warnings_out;
    const HardwareSpec* hw = &hw_parts.front();
    // Simulation mode: no profile database is read.
    r.simulated = true;
    auto shape = [](const HardwareSpec& h) {
        return nodes_phrase(h.nodes) + " x " + std::to_string(h.gpus_per_node) +
               (h.gpus_per_node == 1 ? " device" : " devices");
    };
    r.hardware = o.hardware + " (cluster " + hw->name + ", ";
    if (hw_parts.size() == 1) r.hardware += shape(*hw) + ")";
    for (size_t i = 0; hw_parts.size() > 1 && i < hw_parts.size(); ++i)
        r.hardware += (i ? ", " : "partitions ") + hw_parts[i].partition + " " + shape(hw_parts[i]) +
                      (i + 1 == hw_parts.size() ? ")" : "");
    r.price_per_node_hour = hw->price_per_node_hour;
    r.gpus_per_node = hw->gpus_per_node;
    r.price_per_gpu_hour = hw->price_per_gpu_hour;
    r.watts_per_node = hw->watts_per_node;
    // With --db, the run history of the file's workload gives the epochs to the target.
    std::vector<RunRecord> runs;
    if (!o.common.dbs.empty()) load_profiles(o.common.dbs, &warnings, hw->workload.name, &runs);
    if (hw_parts.size() == 1) {
        *sim = hardware_models(*hw, runs, nullptr);
        r.plan = plan_hardware(cfg, *hw, r.epochs, o.max_nodes, o.nodes, spec, runs, &warnings);
    } else {
        r.plan = plan_hardware_site(cfg, hw_parts, r.epochs, o.max_nodes, o.nodes, spec, runs, &warnings);
    }
}

}  // namespace

std::pair<int, int> parse_node_range(const std::string& s) {
    int lo = 0, hi = 0;
    char tail = 0;
    const int n = std::sscanf(s.c_str(), "%d-%d%c", &lo, &hi, &tail);
    if (n == 1 && s.find('-') == std::string::npos) hi = lo;
    if ((n != 1 && n != 2) || s.empty() || s.size() > 16 || !std::isdigit(static_cast<unsigned char>(s[0])) ||
        lo < 1 || hi < lo || hi > 1000000)
        throw UsageError("--node-range '" + one_line(s, 40) + "' is not LO-HI with 1 <= LO <= HI, e.g. 2-4");
    if (hi - lo + 1 > TULA_PLAN_ROWS_MAX)
        throw UsageError("--node-range " + s + " spans more than " + std::to_string(TULA_PLAN_ROWS_MAX) +
                         " node counts; give a narrower -N range");
    return {lo, hi};
}

PlanReport make_plan_report(const PlanOptions& o, std::vector<std::string>* warnings_out, std::string* table,
                            std::optional<SimulatedModels>* sim) {
    std::vector<std::string>& warnings = *warnings_out;
    if (o.workload.empty() && o.script.empty() && o.hardware.empty())
        throw UsageError("give --workload MODEL@DATASET or --script PATH (or both), or --hardware FILE (see tula plan --help)");
    if (o.nodes > 0 && o.node_range)
        throw UsageError("give --nodes or --node-range, not both");
    if (o.nodes > 0 && o.max_nodes > 0 && o.nodes > o.max_nodes)
        throw UsageError("--nodes " + std::to_string(o.nodes) + " is more than --max-nodes " +
                         std::to_string(o.max_nodes));
    if (o.target_accuracy != -1 && !(o.target_accuracy > 0 && o.target_accuracy <= 1))
        throw UsageError("--target-accuracy must be a test accuracy in (0, 1], e.g. 0.759 for 75.9 %");
    if (!o.workload.empty() && !valid_workload_name(o.workload))
        throw UsageError("--workload '" + one_line(o.workload, 80) +
                         "' is not of the form MODEL@DATASET (letters, digits, _ . -), e.g. lenet5@fashion-mnist");
    const LoadedConfig lc = load_cli_config(o.common);
    std::optional<HardwareSpec> hw;  // the first (or only) partition of --hardware
    std::vector<HardwareSpec> hw_parts;  // all of them
    if (!o.hardware.empty()) {
        hw_parts = load_hardware_partitions(o.hardware);
        narrow_hardware(&hw_parts, o.hardware, o.partition, o.ranks_per_node);
        hw = hw_parts.front();
        if (!o.workload.empty() && o.workload != hw->workload.name)
            throw UsageError("--workload " + o.workload + " differs from the workload of --hardware " + o.hardware +
                             " (" + hw->workload.name + "); leave --workload out or change workload.name there");
    }

    const ScriptFacts sf = read_script(o, hw ? hw->workload.name : std::string(), &warnings);
    std::string workload = sf.workload;
    int epochs = sf.epochs;
    const EpochExamples& examples = sf.examples;
    PolicySpec spec = o.policy;
    const Policy policy = spec.policy;
    // The target: the epochs at the batch they were written for (--batch-size, the script's,
    // else tula-train's default; a hardware plan without one: the smallest global batch).
    spec.reference_batch =
        o.batch_size > 0 ? o.batch_size : sf.script_batch > 0 ? sf.script_batch : hw ? 0 : kTrainerDefaultBatch;
    spec.fixed_epochs = o.fixed_epochs;
    spec.optimizer = sf.script_optimizer;
    spec.target_accuracy = o.target_accuracy > 0 ? o.target_accuracy : 0;

    PlanReport r;
    r.workload = workload;
    if (epochs <= 0 && hw) epochs = hw->epochs;
    r.epochs = epochs > 0 ? epochs : lc.config.default_epochs;  // as make_plan_request does
    r.policy = policy;
    r.deadline_seconds = spec.deadline_seconds;
    r.budget = spec.budget;
    r.price_per_node_hour = lc.config.price_per_node_hour;
    r.gpus_per_node = lc.config.gpus_per_node;
    r.price_per_gpu_hour = lc.config.price_per_gpu_hour;
    r.watts_per_node = lc.config.watts_per_node;
    r.time_margin = lc.config.time_margin;
    r.time_overhead = lc.config.time_overhead;
    r.time_min = o.time_min == "yes" || (o.time_min != "no" && lc.config.time_min);
    r.fixed_nodes = o.nodes;
    r.cpus_per_rank = sf.threads;
    if (hw) {
        plan_from_hardware(o, lc.config, hw_parts, spec, &r, &warnings, sim);
    } else {
        // The databases are read once; a node range (sbatch -N LO-HI: the job may get any
        // count of it) plans a row for each count, shows the plan of the largest and takes
        // the time limit that covers the slowest row. The user asked for these counts, so
        // tula.conf's max_nodes does not cut them.
        std::vector<int> counts{o.nodes};
        int max_nodes = o.max_nodes;
        Config cfg = lc.config;
        narrow_site(&cfg, o.partition, o.ranks_per_node);
        if (o.node_range) {
            const auto [lo, hi] = *o.node_range;
            counts.clear();
            for (int n = lo; n <= hi; ++n) counts.push_back(n);
            max_nodes = hi;
            cfg.max_nodes = std::max(cfg.max_nodes, hi);
            for (PartitionConf& p : cfg.partitions) p.nodes = std::max(p.nodes, hi);
        }
        SiteQueue q = apply_slurm_limits(&cfg, &warnings);
        PlanData data = load_plan_data(read_db_paths(o.common, cfg, &warnings), workload, &warnings);
        data.fit_cache = &fit_cache();
        r.profile_jobs = measuring_jobs(data.compute);
        std::vector<Plan> rows = plan_node_counts(cfg, data, r.epochs, max_nodes, counts, spec, &warnings, examples);
        r.plan = rows.back();
        apply_queue(&r, cfg, spec, &q, &warnings);
        // One job runs in one partition: when the rows of a node range (or the queue) chose
        // different ones, every row is planned again in the partition of the plan shown.
        bool mixed = false;
        for (const Plan& p : rows)
            mixed = mixed || (rows.size() > 1 && p.choice().partition != r.plan.choice().partition);
        if (mixed) {
            narrow_site(&cfg, r.plan.choice().partition, 0);
            rows = plan_node_counts(cfg, data, r.epochs, max_nodes, counts, spec, &warnings, examples);
            r.plan = rows.back();
            apply_queue(&r, cfg, spec, &q, &warnings);
        }
        *table = workload;
        int limit = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
            // the shown plan's row is the one the queue may have moved
            const Plan& p = i + 1 == rows.size() ? r.plan : rows[i];
            *table += ";" + table_row(p.choice());
            limit = std::max(limit, p.time_limit_minutes);
        }
        if (o.node_range) {
            r.plan.time_limit_minutes = limit;
            r.fixed_nodes = counts.back();
        }
        r.queue_note = q.note;
    }
    r.warnings = warnings;
    return r;
}

namespace {

// tula plan's command line: the options, and the text of those PlanOptions holds typed.
struct PlanArgs : PlanOptions {
    std::string policy_text = "auto";  ///< --policy
    std::string node_range_text;       ///< --node-range ("": not given)
};

// The typed options of `a`. Errors: UsageError for a bad --policy or --node-range.
PlanOptions plan_options(const PlanArgs& a) {
    PlanOptions o = a;
    try {
        o.policy = parse_policy_spec(a.policy_text);
    } catch (const Error& e) {
        throw UsageError(std::string("--policy: ") + bare_message(e.what()));
    }
    if (!a.node_range_text.empty()) o.node_range = parse_node_range(a.node_range_text);
    return o;
}

int run_plan(const PlanArgs& args) {
    const std::string format = args.json ? "json" : args.format;
    std::vector<std::string> warnings;
    try {
        arm_timeout(args.timeout);
        const PlanOptions o = plan_options(args);
        std::string table;  // the kv key `table`: the plan table the job receives (spank-tula(8))
        std::optional<SimulatedModels> sim;
        const PlanReport r = make_plan_report(o, &warnings, &table, &sim);
        if (format == "kv") {
            KeyValues kv = plan_kv(r);
            if (!table.empty()) kv.emplace_back("table", table);
            std::fputs(render_kv(kv).c_str(), stdout);
        } else if (format == "json") {
            std::printf("%s\n", plan_json(r).dump(2).c_str());
        } else {
            for (const auto& w : warnings) print_warning(w);
            print_table(r, sim ? &*sim : nullptr);
        }
        return kExitOk;
    } catch (const UsageError& e) {
        return fail(format, e.what(), warnings, kExitUsage);
    } catch (const std::exception& e) {
        return fail(format, e.what(), warnings, kExitError);
    }
}

}  // namespace

void add_plan_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<PlanArgs>();
    CLI::App* sub = app.add_subcommand("plan", "predict time and cost of every (nodes, global batch) candidate and pick one");
    sub->footer(
        "Give --workload, --script, or both (the workload from --workload, the epochs from the script), or --hardware FILE "
        "to simulate a described cluster without profiles. Output formats: table (people), kv (key=value lines, the "
        "contract of scripts), json (the whole plan). Exit status: 0 planned, 1 error (unknown "
        "workload, too few profile points, unreadable file), 2 usage error; killed by SIGALRM (142 in a shell) "
        "when --timeout ran out. See tula(1).");
    add_common_options(sub, &o->common, false);
    add_target_options(sub, o.get());
    sub->add_option("--target-accuracy", o->target_accuracy,
                    "the test accuracy (a fraction in (0, 1]) the job must reach: each candidate's epochs_to_target "
                    "come from B_crit and E_min fitted to the run history's first epochs reaching it (with --db, also "
                    "with --hardware)")
        ->type_name("A");
    sub->add_option("--partition", o->partition,
                    "plan only these partitions (a comma list, as sbatch -p); with [partition] sections in tula.conf")
        ->type_name("LIST");
    sub->add_option("--ranks-per-node", o->ranks_per_node,
                    "ranks (Slurm tasks) per node on every partition, as sbatch --ntasks-per-node (1 .. 1024); with "
                    "--hardware, the GPUs of each node the job uses, one rank each (at most the file's gpus_per_node)")
        ->type_name("N");
    sub->add_option("--time-min", o->time_min,
                    "yes: plan for a job with a --time-min (sbatch --tula-time-min=yes): the queue estimate also "
                    "looks for a backfill hole to start in; no: without; default: tula.conf's time_min")
        ->type_name("yes|no")
        ->check(CLI::IsMember({"yes", "no"}));
    sub->add_option("--node-range", o->node_range_text,
                    "the job may get any node count LO..HI (sbatch -N LO-HI): the kv output's `table` has a row for "
                    "each (at most " + std::to_string(TULA_PLAN_ROWS_MAX) +
                        "), the time limit covers the slowest; tula.conf's max_nodes does not cut it")
        ->type_name("LO-HI");
    sub->add_option("--hardware", o->hardware,
                    "simulation mode: plan the workload of this JSON hardware file on the cluster it describes, "
                    "from published figures, without profiles (see tula(1), HARDWARE FILE)")
        ->type_name("FILE");
    // Validated by parse_policy_spec (one clear message for a bad deadline or budget).
    sub->add_option("--policy", o->policy_text,
                    "auto (knee of the time/cost Pareto front), time (fastest), cost (cheapest), deadline=HH:MM:SS "
                    "(cheapest that meets it), budget=X (fastest within it)")
        ->type_name("POLICY")
        ->capture_default_str();
    auto* fmt = add_format_option(sub, &o->format, {"table", "kv", "json"});
    sub->add_flag("--json", o->json, "same as --format json")->excludes(fmt);
    sub->add_option("--timeout", o->timeout,
                    "give up after SECONDS of wall-clock time: the process is killed by SIGALRM (exit status 142 "
                    "in a shell), printing nothing; cli_filter.lua passes 5. Default 0: no limit")
        ->type_name("SECONDS")
        ->check(CLI::Range(0, 86400));
    sub->callback([o, action] { *action = [o] { return run_plan(*o); }; });
}

}  // namespace tula::cli
