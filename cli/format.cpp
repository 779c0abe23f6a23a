// tula CLI: the commands' reports (see format.hpp).
#include "format.hpp"
#include "tula/stop.hpp"
#include "tula/tula.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

namespace tula::cli {

std::optional<double> error_percent(double measured, double predicted) {
    if (!(measured > 0) || !(predicted > 0) || !std::isfinite(measured) || !std::isfinite(predicted))
        return std::nullopt;
    return (measured - predicted) / measured * 100.0;
}

std::string policy_phrase(Policy p, double deadline_seconds, double budget, double price_per_node_hour) {
    switch (p) {
        case Policy::Auto: return "knee of the time/cost Pareto front";
        case Policy::Time: return "fastest";
        case Policy::Cost: return "cheapest";
        case Policy::Deadline: return "cheapest meeting deadline " + format_hms(deadline_seconds);
        case Policy::Budget: {
            std::string s = "fastest within budget " + format_number("%g", budget);
            if (price_per_node_hour == 1.0) return s + " node-hours";
            if (price_per_node_hour > 0 && std::isfinite(price_per_node_hour))
                s += " (= " + format_number("%.3g", budget / price_per_node_hour) + " node-hours at " +
                     format_number("%g", price_per_node_hour) + " per node-hour)";
            return s;
        }
    }
    return "policy " + std::to_string(static_cast<int>(p));  // not reached: every Policy is named above
}

std::string plan_summary(const PlanReport& r) {
    const Candidate& c = r.plan.choice();
    std::string s = r.workload + ": " + nodes_phrase(c.nodes) + (c.partition.empty() ? "" : " of " + c.partition) +
                    (c.ranks_per_node > 1 ? " (" + std::to_string(c.ranks_per_node) + " ranks each)" : "") +
                    " x global batch " + std::to_string(c.global_batch) +
                    ", predicted " + format_duration(c.total_seconds) + " training (" + std::to_string(c.epochs) +
                    (c.epochs == 1 ? " epoch" : " epochs") + ")" +
                    (c.evaluation_seconds > 0 ? " and " + format_duration(c.evaluation_seconds) + " evaluating" : "") +
                    ", " + format_number("%.3g", c.node_hours) + " node-hours";
    if (r.gpus_per_node > 0) s += ", " + format_number("%.3g", c.gpu_hours) + " GPU-hours";
    if (r.watts_per_node > 0) s += ", " + format_number("%.3g", c.energy_kwh) + " kWh";
    if (r.node_hour_price() != 1.0) s += ", cost " + format_number("%.4g", c.cost);
    std::string why = policy_phrase(r.policy, r.deadline_seconds, r.budget, r.node_hour_price());
    if (r.fixed_nodes > 0) why += " for " + nodes_phrase(r.fixed_nodes);
    std::string out = (r.simulated ? "simulated: " : "") + s + " (" + why + ")";
    if (!r.queue_note.empty()) out += "; " + r.queue_note;
    return out;
}

std::vector<std::string> measuring_jobs(const std::vector<ComputeSample>& samples) {
    std::vector<std::string> out;
    for (const ComputeSample& c : samples)
        if (!c.job_id.empty() && std::find(out.begin(), out.end(), c.job_id) == out.end()) out.push_back(c.job_id);
    return out;
}

std::string jobs_phrase(const std::vector<std::string>& jobs, size_t max_shown) {
    if (jobs.empty()) return "";
    const size_t shown = std::min(jobs.size(), std::max<size_t>(1, max_shown));
    std::string s = jobs.size() == 1 ? "job " : "jobs ";
    for (size_t i = 0; i < shown; ++i)
        s += (i == 0 ? "" : i + 1 == jobs.size() ? " and " : ", ") + jobs[i];
    if (shown < jobs.size()) s += " and " + std::to_string(jobs.size() - shown) + " more";
    return s;
}

namespace {

// Job ids comma-separated, as the kv output's profile_jobs.
std::string jobs_list(const std::vector<std::string>& jobs) {
    std::string s;
    for (const std::string& j : jobs) s += (s.empty() ? "" : ",") + j;
    return s;
}

}  // namespace

KeyValues plan_kv(const PlanReport& r) {
    const Candidate& c = r.plan.choice();
    KeyValues kv = {
        {"status", "ok"},
        {"workload", r.workload},
        {"nodes", std::to_string(c.nodes)},
        {"global_batch", std::to_string(c.global_batch)},
        {"local_batch", std::to_string(c.local_batch)},
        {"epochs", std::to_string(c.epochs)},
        {"predicted_seconds", format_number("%.1f", c.total_seconds)},
        {"epoch_seconds", format_number("%.3f", c.epoch_seconds)},
        {"evaluation_seconds", format_number("%.1f", c.evaluation_seconds)},
        {"job_seconds", format_number("%.1f", c.job_seconds())},
        {"cost", format_number("%.4f", c.cost)},
        {"node_hours", format_number("%.4f", c.node_hours)},
        {"time_limit", std::to_string(r.plan.time_limit_minutes)},
        {"signal_seconds", std::to_string(c.signal_seconds)},
        {"time_min", std::to_string(candidate_time_min(c, r.plan.time_limit_minutes))},
        {"candidates", std::to_string(r.plan.candidates.size())},
        {"policy", policy_name(r.policy)},
        {"reason", r.plan.reason},
        {"summary", plan_summary(r)},
        {"policy_phrase", policy_phrase(r.policy, r.deadline_seconds, r.budget, r.node_hour_price())},
    };
    if (r.policy == Policy::Deadline) kv.emplace_back("deadline_seconds", format_number("%.0f", r.deadline_seconds));
    if (r.policy == Policy::Budget) kv.emplace_back("budget", format_number("%g", r.budget));
    kv.emplace_back("predicted_seconds_upper", format_number("%.1f", c.total_seconds_upper));
    kv.emplace_back("cost_upper", format_number("%.4f", c.cost_upper));
    kv.emplace_back("iter_seconds", format_number("%.6g", c.iter_seconds));
    kv.emplace_back("memory_bytes", format_number("%.0f", c.memory_bytes));
    kv.emplace_back("expected_accuracy",
                    std::isfinite(c.expected_accuracy) ? format_number("%.4f", c.expected_accuracy) : "");
    kv.emplace_back("requested_epochs", std::to_string(r.epochs));
    kv.emplace_back("reference_batch", std::to_string(r.plan.reference_batch));
    kv.emplace_back("epochs_to_target", format_number("%.3f", c.epochs_to_target));
    kv.emplace_back("epochs_to_target_low", format_number("%.3f", c.epochs_to_target_low));
    kv.emplace_back("epochs_to_target_high", format_number("%.3f", c.epochs_to_target_high));
    kv.emplace_back("time_to_target_seconds", format_number("%.1f", c.time_to_target));
    kv.emplace_back("cost_to_target", format_number("%.4f", c.cost_to_target));
    kv.emplace_back("pareto", c.pareto ? "1" : "0");
    kv.emplace_back("max_local_batch", std::to_string(r.plan.max_local_batch));
    kv.emplace_back("gamma", format_number("%.4g", r.plan.gamma));
    kv.emplace_back("allreduce_bucket_bytes", format_number("%.0f", r.plan.allreduce_bucket_bytes));
    kv.emplace_back("last_batch", last_batch_name(r.plan.last_batch));
    kv.emplace_back("accuracy_excluded", std::to_string(r.plan.accuracy_excluded));
    kv.emplace_back("gpu_hours", format_number("%.4f", c.gpu_hours));
    kv.emplace_back("energy_kwh", format_number("%.4f", c.energy_kwh));
    kv.emplace_back("simulated", r.simulated ? "1" : "0");
    if (r.simulated) kv.emplace_back("hardware", r.hardware);
    std::string flagged;
    for (const auto& f : r.plan.flagged_runs) flagged += (flagged.empty() ? "" : ",") + (f.job_id.empty() ? "-" : f.job_id);
    kv.emplace_back("flagged_runs", flagged);
    // The shape of the request (partition sections of tula.conf, a hardware file's partitions):
    // partition is empty for a file without sections (no partition is requested).
    kv.emplace_back("partition", c.partition);
    kv.emplace_back("ranks_per_node", std::to_string(c.ranks_per_node));
    kv.emplace_back("gpus_per_node", std::to_string(c.gpus_per_node));
    kv.emplace_back("exclusive", c.exclusive ? "yes" : "no");
    kv.emplace_back("cpus_per_rank", std::to_string(r.cpus_per_rank));
    kv.emplace_back("scaled_from", c.scaled_from);
    kv.emplace_back("own_profile", c.own_profile ? "yes" : "no");
    kv.emplace_back("intra_node_bandwidth", format_number("%.6g", c.intra_node_bandwidth));
    kv.emplace_back("intra_node_source", c.intra_node_source);
    kv.emplace_back("queue_wait_seconds", format_number("%.0f", c.queue_wait_seconds));
    kv.emplace_back("queue", r.queue_note);
    kv.emplace_back("profile_jobs", jobs_list(r.profile_jobs));
    if (c.hole.used) {  // a start in a backfill hole, then the requeued rest (hole_time_to_result)
        kv.emplace_back("hole_wait_seconds", format_number("%.0f", c.hole.wait_seconds));
        kv.emplace_back("hole_seconds", format_number("%.0f", c.hole.seconds));
        kv.emplace_back("hole_part_seconds", format_number("%.0f", c.hole.part_seconds));
        kv.emplace_back("hole_parts", std::to_string(c.hole.hole_parts));
        kv.emplace_back("hole_train_seconds", format_number("%.1f", c.hole.train_seconds));
        kv.emplace_back("rest_parts", std::to_string(c.hole.rest_parts));
        kv.emplace_back("rest_wait_seconds", format_number("%.0f", c.hole.rest_wait_seconds));
        kv.emplace_back("rest_train_seconds", format_number("%.1f", c.hole.rest_train_seconds));
        kv.emplace_back("hole", hole_phrase(c.hole));
    }
    for (const auto& l : r.plan.left_out) kv.emplace_back("left_out", l);
    for (const auto& w : r.warnings) kv.emplace_back("warning", bare_message(w));
    return kv;
}

KeyValues error_kv(const std::string& message, const std::vector<std::string>& warnings) {
    KeyValues kv = {{"status", "error"}, {"message", bare_message(message)}};
    for (const auto& w : warnings) kv.emplace_back("warning", bare_message(w));
    return kv;
}

Json candidate_json(const Candidate& c) {
    Json j = {{"nodes", c.nodes}, {"global_batch", c.global_batch}, {"local_batch", c.local_batch},
              {"iter_seconds", c.iter_seconds}, {"time_factor", c.time_factor}, {"synced_profile", c.synced_profile},
              {"run_fit_seconds", c.run_fit_seconds}, {"run_fit_runs", c.run_fit_runs},
              {"epoch_seconds", c.epoch_seconds}, {"startup_seconds", c.startup_seconds},
              {"evaluation_seconds", c.evaluation_seconds}, {"epochs", c.epochs},
              {"total_seconds", c.total_seconds}, {"job_seconds", c.job_seconds()}, {"node_hours", c.node_hours},
              {"gpu_hours", c.gpu_hours},
              {"energy_kwh", c.energy_kwh}, {"cost", c.cost}, {"pareto", c.pareto},
              {"total_seconds_upper", c.total_seconds_upper}, {"cost_upper", c.cost_upper},
              {"epochs_to_target", c.epochs_to_target}, {"epochs_to_target_low", c.epochs_to_target_low},
              {"epochs_to_target_high", c.epochs_to_target_high}, {"time_to_target_seconds", c.time_to_target},
              {"cost_to_target", c.cost_to_target},
              {"expected_accuracy", std::isfinite(c.expected_accuracy) ? Json(c.expected_accuracy) : Json(nullptr)},
              {"memory_bytes", c.memory_bytes}, {"partition", c.partition}, {"ranks_per_node", c.ranks_per_node},
              {"gpus_per_node", c.gpus_per_node}, {"exclusive", c.exclusive}, {"scaled_from", c.scaled_from},
              {"intra_node_bandwidth", c.intra_node_bandwidth}, {"intra_node_source", c.intra_node_source},
              {"queue_wait_seconds", c.queue_wait_seconds},
              {"step_seconds", {{"compute", c.compute_step_seconds}, {"exposed_communication", c.exposed_comm_step_seconds},
                                {"overhead", c.overhead_step_seconds}}}};
    if (c.hole.used)  // a start in a backfill hole, then the requeued rest (hole_time_to_result)
        j["hole"] = {{"wait_seconds", c.hole.wait_seconds}, {"seconds", c.hole.seconds},
                     {"part_seconds", c.hole.part_seconds}, {"parts", c.hole.hole_parts},
                     {"train_seconds", c.hole.train_seconds}, {"rest_parts", c.hole.rest_parts},
                     {"rest_wait_seconds", c.hole.rest_wait_seconds},
                     {"rest_train_seconds", c.hole.rest_train_seconds}, {"time_to_result_seconds", c.hole.time_to_result},
                     {"without_hole_seconds", c.hole.full_seconds}, {"line", hole_phrase(c.hole)}};
    return j;
}

Json plan_json(const PlanReport& r) {
    Json j;
    j["status"] = "ok";
    j["workload"] = r.workload;
    j["epochs"] = r.epochs;  // requested: the target; each candidate's "epochs" are the ones it trains
    j["reference_batch"] = r.plan.reference_batch;
    j["fixed_epochs"] = r.plan.fixed_epochs;
    j["policy"] = policy_name(r.policy);
    j["policy_phrase"] = policy_phrase(r.policy, r.deadline_seconds, r.budget, r.node_hour_price());
    if (r.policy == Policy::Deadline) j["deadline_seconds"] = r.deadline_seconds;
    if (r.policy == Policy::Budget) j["budget"] = r.budget;
    j["simulated"] = r.simulated;
    if (r.simulated) j["hardware"] = r.hardware;
    if (r.fixed_nodes > 0) j["fixed_nodes"] = r.fixed_nodes;
    j["cpus_per_rank"] = r.cpus_per_rank;
    j["price_per_node_hour"] = r.price_per_node_hour;
    j["gpus_per_node"] = r.gpus_per_node;
    j["price_per_gpu_hour"] = r.price_per_gpu_hour;
    j["node_hour_price"] = r.node_hour_price();
    j["accuracy_excluded"] = r.plan.accuracy_excluded;
    j["time_calibration"] = r.plan.calibration.factor;
    j["time_calibration_runs"] = r.plan.calibration.runs;
    j["time_calibration_single_node"] = r.plan.calibration.factor_single;
    j["time_calibration_single_node_runs"] = r.plan.calibration.runs_single;
    j["time_calibration_multi_node"] = r.plan.calibration.factor_multi;
    j["time_calibration_multi_node_runs"] = r.plan.calibration.runs_multi;
    // the multi-node ratio curve over the local batch ([local batch, factor] knots; empty: the median serves)
    j["time_calibration_multi_node_curve"] = r.plan.calibration.curve_multi;
    // per shape with runs of its own: what a candidate of exactly that shape uses; keyed "K" for
    // K nodes of one rank, "KxR" for K nodes of R ranks each
    nlohmann::json by_nodes = nlohmann::json::object();
    for (const auto& [k, g] : r.plan.calibration.by_nodes)
        by_nodes[std::to_string(k.first) + (k.second > 1 ? "x" + std::to_string(k.second) : "")] = {
            {"factor", g.factor}, {"runs", g.runs}, {"curve", g.curve}};
    j["time_calibration_by_nodes"] = by_nodes;
    j["watts_per_node"] = r.watts_per_node;
    j["time_margin"] = r.time_margin;
    j["time_overhead_seconds"] = r.time_overhead;
    j["max_local_batch"] = r.plan.max_local_batch;
    j["left_out"] = r.plan.left_out;  // partitions not planned: "NAME: why"
    j["profile_jobs"] = r.profile_jobs;  // the jobs that measured the compute samples planned from
    j["queue"] = r.queue_note;        // what the queue means for the choice (site.hpp); "" when nothing
    j["gamma"] = r.plan.gamma;
    j["allreduce_bucket_bytes"] = r.plan.allreduce_bucket_bytes;  // 0: gamma's form of the overlap
    j["last_batch"] = last_batch_name(r.plan.last_batch);          // "drop": floor(D / B) steps, "keep": ceil
    // B_noise of the convergence model and where it came from (ConvergenceModel::origin)
    j["noise_scale"] = r.plan.convergence.noise_scale;
    j["noise_scale_source"] = r.plan.convergence.measured_runs > 0 ? "measured" : r.plan.convergence.source;
    if (r.plan.convergence.confidence > 0) {  // distribution-free interval of the median
        j["noise_scale_low"] = r.plan.convergence.noise_scale_low;
        j["noise_scale_high"] = r.plan.convergence.noise_scale_high;
        j["noise_scale_confidence"] = r.plan.convergence.confidence;
    } else {
        j["noise_scale_low"] = j["noise_scale_high"] = j["noise_scale_confidence"] = nullptr;
    }
    j["noise_scale_runs"] = r.plan.convergence.measured_runs;
    // The target accuracy and E_min of the convergence model (convergence_from_history), null without
    const ConvergenceModel& cv = r.plan.convergence;
    j["target_accuracy"] = cv.target_accuracy > 0 ? Json(cv.target_accuracy) : Json(nullptr);
    j["e_min"] = cv.e_min > 0 ? Json(cv.e_min) : Json(nullptr);
    j["e_min_low"] = cv.e_min > 0 ? Json(cv.e_min_low) : Json(nullptr);
    j["e_min_high"] = cv.e_min > 0 ? Json(cv.e_min_high) : Json(nullptr);
    j["convergence_fit_runs"] = cv.fit_runs;
    j["convergence_fit_batches"] = cv.fit_batches;
    j["convergence_fit_optimizer"] = cv.fit_optimizer;
    j["reference_batch"] = r.plan.reference_batch;
    Json cands = Json::array();
    for (size_t i = 0; i < r.plan.candidates.size(); ++i) {
        Json c = candidate_json(r.plan.candidates[i]);
        c["chosen"] = (i == r.plan.chosen);
        cands.push_back(std::move(c));
    }
    j["candidates"] = std::move(cands);
    j["chosen"] = r.plan.chosen;
    j["choice"] = candidate_json(r.plan.choice());
    j["reason"] = r.plan.reason;
    j["time_limit_minutes"] = r.plan.time_limit_minutes;
    j["summary"] = plan_summary(r);
    Json fl = Json::array();
    for (const auto& f : r.plan.flagged_runs) fl.push_back(run_check_json(f));
    j["flagged_runs"] = std::move(fl);
    Json w = Json::array();
    for (const auto& s : r.warnings) w.push_back(bare_message(s));
    j["warnings"] = std::move(w);
    return j;
}

std::string run_check_line(const RunCheck& c) {
    std::string s = "job " + (c.job_id.empty() ? std::string("(no job id)") : c.job_id) + " (" + nodes_phrase(c.nodes) +
                    " x " + std::to_string(c.global_batch) + ", " + std::to_string(c.epochs) +
                    (c.epochs == 1 ? " epoch" : " epochs") + "): measured " + format_number("%.1f s", c.measured_seconds);
    if (!c.has_interval)
        return s + ", predicted " + format_number("%.1f s", c.predicted_seconds) +
               " by the refitted models (no prediction interval: too few compute samples)";
    return s + (c.flagged ? ", outside" : ", inside") + " the 95 % prediction interval " +
           format_number("%.1f", c.lower_seconds) + ".." + format_number("%.1f s", c.upper_seconds) +
           " of the refitted models (predicted " + format_number("%.1f s", c.predicted_seconds) + ")";
}

Json run_check_json(const RunCheck& c) {
    Json j = {{"job_id", c.job_id}, {"nodes", c.nodes}, {"global_batch", c.global_batch}, {"epochs", c.epochs},
              {"created", c.created}, {"measured_seconds", c.measured_seconds},
              {"predicted_seconds", c.predicted_seconds}, {"has_interval", c.has_interval},
              {"lower_seconds", c.lower_seconds}, {"upper_seconds", c.upper_seconds}, {"flagged", c.flagged},
              {"step_seconds", {{"compute", c.compute_step_seconds}, {"exposed_communication", c.exposed_comm_step_seconds},
                                {"overhead", c.overhead_step_seconds}}}};
    return j;
}

Json run_json(const RunRecord& r) {
    Json j = {{"id", r.id}, {"job_id", r.job_id}, {"workload", r.workload}, {"nodes", r.nodes},
              {"ranks_per_node", r.ranks_per_node}, {"global_batch", r.global_batch}, {"epochs", r.epochs}, {"predicted_seconds", r.predicted_seconds},
              {"measured_seconds", r.measured_seconds}};
    const auto e = error_percent(r.measured_seconds, r.predicted_seconds);
    j["error_percent"] = e ? Json(*e) : Json(nullptr);
    j["test_accuracy"] = r.test_accuracy;
    j["created"] = r.created;
    j["noise_scale"] = r.noise_scale > 0 ? Json(r.noise_scale) : Json(nullptr);  // B_simple, examples
    j["noise_observations"] = r.noise_observations;
    j["optimizer"] = r.optimizer;  // "" = not recorded (before schema version 7)
    j["hardware_class"] = r.hardware_class;  // "" = unknown (before schema version 8)
    j["parts"] = r.parts;  // 1 before schema version 10
    j["part_seconds"] = r.part_seconds.empty() ? Json(nullptr) : Json(r.part_seconds);  // null: one part, or not known
    j["epoch_seconds"] = r.epoch_seconds;
    j["epoch_train_loss"] = r.epoch_train_loss;
    j["epoch_test_accuracy"] = r.epoch_test_accuracy;
    return j;
}

KeyValues explain_kv(const RunRecord& r, const std::string& db_path, const std::optional<RunCheck>& check,
                     const std::vector<std::string>& profile_jobs) {
    const auto e = error_percent(r.measured_seconds, r.predicted_seconds);
    const double slow = slower_than_planned(r.measured_seconds, r.predicted_seconds);
    KeyValues kv = {
        {"status", "ok"},
        {"job_id", r.job_id},
        {"workload", r.workload},
        {"nodes", std::to_string(r.nodes)},
        {"ranks_per_node", std::to_string(r.ranks_per_node)},
        {"global_batch", std::to_string(r.global_batch)},
        {"local_batch", r.ranks() > 0 ? std::to_string(r.global_batch / r.ranks()) : ""},
        {"epochs", std::to_string(r.epochs)},
        {"measured_seconds", format_number("%.1f", r.measured_seconds)},
        {"predicted_seconds", format_number("%.1f", r.predicted_seconds)},
        {"error_percent", e ? format_number("%.1f", *e) : ""},
        {"slower_than_planned", slow > 0 ? format_number("%.2f", slow) : ""},
        {"parts", std::to_string(r.parts)},
        {"test_accuracy", format_number("%.4f", r.test_accuracy)},
        {"database", db_path},
        {"profile_jobs", jobs_list(profile_jobs)},
    };
    if (!check) {
        kv.emplace_back("flagged", "");
        return kv;
    }
    kv.emplace_back("flagged", check->flagged ? "1" : "0");
    kv.emplace_back("interval_lower", check->has_interval ? format_number("%.1f", check->lower_seconds) : "");
    kv.emplace_back("interval_upper", check->has_interval ? format_number("%.1f", check->upper_seconds) : "");
    kv.emplace_back("refit_predicted_seconds", format_number("%.1f", check->predicted_seconds));
    return kv;
}

double round_spread_percent(const std::vector<ComputeSample>& samples) {
    std::map<int, std::vector<double>> by_batch;  // local batch -> seconds per iteration
    for (const auto& s : samples)
        if (s.ranks <= 1 && s.local_batch >= 1 && std::isfinite(s.seconds_per_iter) && s.seconds_per_iter > 0)
            by_batch[s.local_batch].push_back(s.seconds_per_iter);
    std::vector<double> spreads;
    for (const auto& [b, v] : by_batch) {
        if (v.size() < 2) continue;
        const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
        spreads.push_back((*hi - *lo) / tula::median(v) * 100.0);
    }
    return spreads.empty() ? std::nan("") : tula::median(spreads);
}

std::vector<std::string> compute_fit_lines(const ComputeModel& m, const std::vector<ComputeSample>& samples) {
    std::vector<std::string> out;
    std::string head = "fit: " + std::string(m.form()) + " (AIC " + format_number("%.1f", m.aic_linear) + " linear, ";
    head += std::isfinite(m.aic_flat) ? format_number("%.1f", m.aic_flat) + " flat-then-linear" : "flat-then-linear not considered";
    head += "): t(b) = ";
    const std::string lin = format_number("%.4g", m.t0 * 1e3) + " ms + " + format_number("%.4g", m.t1 * 1e3) + " ms x b";
    head += m.flat ? "max(" + format_number("%.4g", m.t_min * 1e3) + " ms, " + lin + ")" : lin;
    head += ", local batch " + std::to_string(m.min_batch) + ".." + std::to_string(m.max_batch) + ", rmse " +
            format_number("%.4g", m.rmse * 1e3) + " ms";
    out.push_back(head);
    if (m.knots.size() >= 3 && std::isfinite(m.loo_interpolated) && std::isfinite(m.loo_parametric)) {
        const std::string cv = "leave-one-out error " + format_number("%.2f", m.loo_interpolated) + " % interpolated vs " +
                               format_number("%.2f", m.loo_parametric) + " % fitted";
        out.push_back(m.interpolated ? "inside local batch " + std::to_string(m.knots.front().first) + ".." +
                                           std::to_string(m.knots.back().first) + ": interpolated between the " +
                                           std::to_string(m.knots.size()) + " batch sizes' medians (" + cv +
                                           "); outside: the fit, shifted to meet the end batch sizes"
                                     : "the fit is used everywhere (" + cv + ")");
    }
    std::map<int, std::pair<double, int>> by_batch;  // local batch -> (sum of seconds, count)
    for (const auto& s : samples) {
        if (!(s.seconds_per_iter > 0) || !std::isfinite(s.seconds_per_iter) || s.local_batch < 1 || s.ranks > 1) continue;
        auto& e = by_batch[s.local_batch];
        e.first += s.seconds_per_iter;
        e.second += 1;
    }
    Table t;
    t.header = {"local batch", "samples", "measured (ms)", "predicted (ms)", "residual (ms)", "residual (%)"};
    t.right = {true, true, true, true, true, true};
    for (const auto& [b, e] : by_batch) {
        const double meas = e.first / e.second, pred = m.seconds_per_iter(b);
        t.rows.push_back({std::to_string(b), std::to_string(e.second), format_number("%.4g", meas * 1e3),
                          format_number("%.4g", pred * 1e3), format_number("%+.3g", (meas - pred) * 1e3),
                          format_number("%+.2f", (meas - pred) / meas * 100.0)});
    }
    for (auto& l : render_table_lines(t)) out.push_back(std::move(l));
    for (auto& l : compute_extra_lines(m)) out.push_back(std::move(l));
    return out;
}

std::vector<std::string> compute_extra_lines(const ComputeModel& m) {
    std::vector<std::string> out;
    if (!m.startup_knots.empty()) {
        std::string l = "start-up, once per run:";
        for (size_t i = 0; i < m.startup_knots.size(); ++i)
            l += std::string(i ? ", " : " ") + format_number("%.3f", m.startup_knots[i].second) + " s at local batch " +
                 std::to_string(m.startup_knots[i].first);
        out.push_back(l);
    }
    for (const auto& [k, knots] : m.concurrent) {
        std::string l = std::to_string(k) + " ranks at once: concurrency factor";
        for (size_t i = 0; i < knots.size(); ++i)
            l += std::string(i ? ", " : " ") + format_number("%.3f", knots[i].second) + " at local batch " +
                 format_number("%.0f", knots[i].first);
        out.push_back(l + " (a step on " + std::to_string(k) + " nodes computes that many times longer than alone)");
    }
    return out;
}
}  // namespace tula::cli
