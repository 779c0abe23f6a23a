// libtula: simulation mode (see hardware.hpp and tula(1), "HARDWARE FILE").
#include "tula/hardware.hpp"
#include "tula/convergence_fit.hpp"
#include "tula/tula.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tula/error.hpp"
#include "util.hpp"

namespace tula {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxHardwareBytes = 1 << 20;
constexpr double kMaxPairs = 1e8;  // (nodes, global batch) pairs plan_hardware enumerates at most
constexpr size_t kMaxTablePoints = 64;  // points of one bus-bandwidth table

std::string fmt_g(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

// Reads the keys of one JSON object, checking for unknown ones; `where` is the object's
// path in messages ("" for the top level, "device." ...).
class Reader {
public:
    Reader(const Json& obj, std::string where, std::string source, std::set<std::string> keys)
        : obj_(obj), where_(std::move(where)), source_(std::move(source)) {
        if (!obj_.is_object()) fail(where_.empty() ? "the top level must be a JSON object {...}" :
                                                     where_.substr(0, where_.size() - 1) + " must be a JSON object {...}");
        for (auto it = obj_.begin(); it != obj_.end(); ++it) {
            if (!keys.count(it.key())) {
                std::string list;
                for (const auto& k : keys) list += (list.empty() ? "" : ", ") + where_ + k;
                std::string shown = it.key().substr(0, 64);
                for (char& c : shown)
                    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
                fail("unknown key '" + where_ + shown + "'; valid keys here: " + list);
            }
        }
    }
    [[noreturn]] void fail(const std::string& what) const { throw Error(source_ + ": " + what + " (see tula(1), HARDWARE FILE)"); }
    bool has(const char* k) const { return obj_.contains(k); }
    const Json& at(const char* k) const { return obj_.at(k); }

    // A number in [lo, hi]; `required` or else `def`.
    double number(const char* k, double lo, double hi, bool required, double def, const char* unit) const {
        if (!has(k)) {
            if (required) fail("missing key '" + where_ + k + "' (" + unit + ")");
            return def;
        }
        const Json& v = obj_.at(k);
        if (!v.is_number()) fail("'" + where_ + k + "' must be a number (" + unit + ")");
        const double d = v.get<double>();
        if (!std::isfinite(d) || d < lo || d > hi)
            fail("'" + where_ + k + "' = " + fmt_g(d) + " is out of range [" + fmt_g(lo) + ", " + fmt_g(hi) + "] (" + unit + ")");
        return d;
    }
    int integer(const char* k, int lo, int hi, bool required, int def, const char* unit) const {
        const double d = number(k, lo, hi, required, def, unit);
        if (d != std::floor(d)) fail("'" + where_ + k + "' = " + fmt_g(d) + " must be a whole number (" + unit + ")");
        return static_cast<int>(d);
    }
    // A bus-bandwidth table [[bytes, busbw], ...]: 1..kMaxTablePoints pairs of numbers > 0,
    // bytes strictly ascending; `k` absent: empty.
    BusBandwidthTable table(const char* k) const {
        BusBandwidthTable t;
        if (!has(k)) return t;
        const Json& v = obj_.at(k);
        const std::string name = "'" + where_ + k + "'";
        const std::string form = " must be a list of 1 to " + std::to_string(kMaxTablePoints) +
                                 " [bytes, busbw bytes/s] pairs, as nccl-tests all_reduce_perf prints them";
        if (!v.is_array() || v.empty() || v.size() > kMaxTablePoints) fail(name + form);
        for (size_t i = 0; i < v.size(); ++i) {
            const Json& e = v[i];
            if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number()) fail(name + form);
            const double bytes = e[0].get<double>(), busbw = e[1].get<double>();
            const std::string at = name + "[" + std::to_string(i) + "]";
            if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e15)
                fail(at + " has message size " + fmt_g(bytes) + ", not in [1, 1e15] bytes");
            if (!std::isfinite(busbw) || busbw < 1e3 || busbw > 1e15)
                fail(at + " has bus bandwidth " + fmt_g(busbw) + ", not in [1e3, 1e15] bytes/s");
            if (!t.empty() && !(bytes > t.back().first))
                fail(at + ": message sizes must be strictly ascending");
            t.emplace_back(bytes, busbw);
        }
        return t;
    }
    std::string string(const char* k, bool required, const std::string& def) const {
        if (!has(k)) {
            if (required) fail("missing key '" + where_ + k + "'");
            return def;
        }
        const Json& v = obj_.at(k);
        if (!v.is_string()) fail("'" + where_ + k + "' must be a string");
        return v.get<std::string>();
    }

private:
    const Json& obj_;
    std::string where_, source_;
};

// Reads the node description (nodes, GPUs, prices, device, network) of one partition from
// `r`, whose keys are under `where` in messages, into `h`.
void parse_nodes(const Reader& top, const std::string& source, const std::string& where, HardwareSpec* hp) {
    HardwareSpec& h = *hp;
    h.nodes = top.integer("nodes", 1, 1000000, true, 0, "nodes");
    h.gpus_per_node = top.integer("gpus_per_node", 1, 1024, true, 1, "devices per node");
    h.price_per_node_hour = top.number("price_per_node_hour", 0, 1e9, true, 1, "price unit per node-hour");
    h.price_per_gpu_hour = top.number("price_per_gpu_hour", 0, 1e9, false, 0, "price unit per GPU-hour");
    h.watts_per_node = top.number("watts_per_node", 0, 1e7, false, 0, "watts per node");
    h.iteration_overhead = top.number("iteration_overhead_seconds", 0, 3600, false, 0, "seconds per iteration");
    if (!top.has("device")) top.fail("missing object '" + where + "device' (peak_flops, memory_bytes)");
    if (!top.has("network")) top.fail("missing object '" + where + "network' (bandwidth, latency)");

    const Reader dev(top.at("device"), where + "device.", source, {"peak_flops", "efficiency", "memory_bytes", "saturation_batch"});
    h.peak_flops = dev.number("peak_flops", 1e6, 1e21, true, 0, "FLOP/s of one device");
    h.efficiency = dev.number("efficiency", 1e-4, 1.0, false, 0.4, "fraction of peak");
    h.device_memory_bytes = dev.number("memory_bytes", 1e6, 1e15, true, 0, "bytes of one device");
    h.saturation_batch = dev.integer("saturation_batch", 0, 1 << 20, false, 0, "examples per device");

    const Reader net(top.at("network"), where + "network.", source,
                     {"bandwidth", "latency", "intra_node_bandwidth", "allreduce", "bus_bandwidth"});
    h.network_bandwidth = net.number("bandwidth", 1e3, 1e15, true, 0, "bytes/s per node");
    h.network_latency = net.number("latency", 0, 1.0, true, 0, "seconds");
    h.intra_node_bandwidth = net.number("intra_node_bandwidth", 0, 1e15, false, 0, "bytes/s");
    const std::string alg = net.string("allreduce", false, "rabenseifner");
    if (alg == "ring") h.algorithm = AllreduceModel::Algorithm::Ring;
    else if (alg == "rabenseifner") h.algorithm = AllreduceModel::Algorithm::Rabenseifner;
    else net.fail("'" + where + "network.allreduce' must be \"ring\" or \"rabenseifner\"");
    if (net.has("bus_bandwidth")) {
        const Reader bus(net.at("bus_bandwidth"), where + "network.bus_bandwidth.", source, {"intra_node", "inter_node"});
        h.intra_bus_bandwidth = bus.table("intra_node");
        h.inter_bus_bandwidth = bus.table("inter_node");
    }
}

}  // namespace

std::vector<HardwareSpec> parse_hardware_partitions(const std::string& text, const std::string& source) {
    Json root;
    try {
        root = Json::parse(text);
    } catch (const Json::exception& e) {
        std::string m = e.what();
        for (char& c : m)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
        throw Error(source + ": not valid JSON (" + m.substr(0, 200) + "); see tula(1), HARDWARE FILE");
    }
    HardwareSpec h;
    const Reader top(root, "", source,
                     {"name", "nodes", "gpus_per_node", "device", "network", "price_per_node_hour",
                      "price_per_gpu_hour", "watts_per_node", "iteration_overhead_seconds", "workload", "global_batches", "comment",
                      "partitions"});
    h.name = top.string("name", false, "cluster");
    if (h.name.empty() || h.name.size() > 128) top.fail("'name' must be 1..128 characters");
    for (char& c : h.name)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    top.string("comment", false, "");  // free text, ignored
    if (!top.has("workload")) top.fail("missing object 'workload' (name, flops_per_example, parameter_bytes, train_examples)");
    std::vector<Json> parts;  // the partitions' objects, or the top level itself for a one-partition file
    if (top.has("partitions")) {
        for (const char* k : {"nodes", "gpus_per_node", "device", "network", "price_per_node_hour", "price_per_gpu_hour",
                              "watts_per_node", "iteration_overhead_seconds"})
            if (top.has(k))
                top.fail(std::string("'") + k + "' is given at the top level next to 'partitions'; give it inside each partition");
        const Json& pa = top.at("partitions");
        if (!pa.is_array() || pa.empty() || pa.size() > 64) top.fail("'partitions' must be a list of 1..64 partition objects");
        for (const Json& o : pa) parts.push_back(o);
    } else {
        parts.push_back(root);
    }
    const Reader wl(top.at("workload"), "workload.", source,
                    {"name", "flops_per_example", "parameter_bytes", "train_examples", "test_examples",
                     "activation_bytes_per_example", "epochs", "noise_scale", "allreduce_bucket_bytes", "last_batch", "eval_batch"});
    const std::string wname = wl.string("name", true, "");
    if (wname.find('\0') != std::string::npos || tula_check_workload(wname.c_str(), nullptr, 0) != 0)
        wl.fail("'workload.name' must be MODEL@DATASET (letters, digits, _ . -), e.g. resnet50@imagenet");
    const size_t at = wname.find('@');
    h.workload.name = wname;
    h.workload.model = wname.substr(0, at);
    h.workload.dataset = wname.substr(at + 1);
    h.flops_per_example = wl.number("flops_per_example", 1, 1e18, true, 0, "FLOPs per example, forward + backward");
    h.parameter_bytes = wl.number("parameter_bytes", 4, 1e13, true, 0, "bytes");
    h.workload.params = static_cast<int64_t>(std::ceil(h.parameter_bytes / 4.0));
    h.workload.train_examples = static_cast<int64_t>(wl.number("train_examples", 1, 1e12, true, 0, "examples"));
    h.workload.test_examples = static_cast<int64_t>(wl.number("test_examples", 0, 1e12, false, 0, "examples"));
    h.activation_bytes_per_example = wl.number("activation_bytes_per_example", 0, 1e13, false, 0, "bytes per example");
    h.epochs = wl.integer("epochs", 0, 1000000, false, 0, "epochs");
    h.noise_scale = wl.number("noise_scale", 0, 1e12, false, 0, "examples");
    h.allreduce_bucket_bytes =
        wl.number("allreduce_bucket_bytes", 0, 1e13, false, kDefaultBucketBytes, "bytes per gradient bucket");
    if (h.allreduce_bucket_bytes > 0 && h.allreduce_bucket_bytes < 1)
        wl.fail("'workload.allreduce_bucket_bytes' = " + fmt_g(h.allreduce_bucket_bytes) +
                " is less than one byte; give 0 for one allreduce after the backward pass, or a bucket size in bytes");
    const std::string last = wl.string("last_batch", false, "keep");
    if (last != "keep" && last != "drop")
        wl.fail("'workload.last_batch' must be \"keep\" (the last partial batch of an epoch is trained: ceil(D / B) "
                "steps) or \"drop\" (it is left out: floor(D / B) steps)");
    h.workload.last_batch = last == "drop" ? LastBatch::Drop : LastBatch::Keep;
    h.workload.eval_batch = wl.integer("eval_batch", 1, 100000000, false, kTrainerEvalBatch, "examples per GPU");

    if (top.has("global_batches")) {
        const Json& gb = top.at("global_batches");
        if (!gb.is_array() || gb.empty() || gb.size() > 4096)
            top.fail("'global_batches' must be a list of 1..4096 whole numbers (examples per step)");
        for (const Json& v : gb) {
            if (!v.is_number()) top.fail("'global_batches' must hold numbers only");
            const double d = v.get<double>();
            if (!std::isfinite(d) || d < 1 || d > (1 << 30) || d != std::floor(d))
                top.fail("'global_batches' value " + fmt_g(d) + " is not a whole number in [1, 2^30]");
            h.global_batches.push_back(static_cast<int>(d));
        }
    }
    std::vector<HardwareSpec> out;
    for (size_t i = 0; i < parts.size(); ++i) {
        HardwareSpec p = h;
        const bool many = top.has("partitions");
        const std::string where = many ? "partitions[" + std::to_string(i) + "]." : "";
        static const std::set<std::string> kNodeKeys = {"nodes", "gpus_per_node", "device", "network", "price_per_node_hour",
                                                        "price_per_gpu_hour", "watts_per_node", "iteration_overhead_seconds"};
        std::set<std::string> keys = kNodeKeys;
        if (many) keys.insert({"name", "comment"});
        else keys.insert({"name", "workload", "global_batches", "comment", "partitions"});
        const Reader r(parts[i], where, source, keys);
        if (many) {
            p.partition = r.string("name", true, "");
            if (p.partition.empty() || p.partition.size() > 63 ||
                p.partition.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                    std::string::npos)
                r.fail("'" + where + "name' must be a partition name (1 to 63 letters, digits, '_', '.', '-')");
            for (const HardwareSpec& o : out)
                if (o.partition == p.partition) r.fail("partition '" + p.partition + "' is described twice");
        }
        parse_nodes(r, source, where, &p);
        out.push_back(p);
    }
    return out;
}

std::vector<HardwareSpec> load_hardware_partitions(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read the hardware file " + path + ": " + std::strerror(errno));
    std::string text;
    text.resize(kMaxHardwareBytes + 1);
    in.read(&text[0], static_cast<std::streamsize>(text.size()));
    if (in.bad()) throw Error("cannot read the hardware file " + path + ": read error");
    text.resize(static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxHardwareBytes) throw Error("the hardware file " + path + " is larger than 1 MiB");
    return parse_hardware_partitions(text, path);
}


std::vector<int> default_global_batches(const HardwareSpec& h) {
    const double top = std::min(64.0 * h.nodes * h.gpus_per_node, double(1 << 24));
    std::vector<int> v;
    for (double b = 32; b <= top; b *= 2) v.push_back(static_cast<int>(b));
    if (v.empty()) v.push_back(32);
    return v;
}

SimulatedModels derive_models(const HardwareSpec& h) {
    SimulatedModels m;
    const double g = h.gpus_per_node;
    const double per_device = h.peak_flops * h.efficiency;  // FLOP/s reached by one device
    m.intra_node_seconds = h.intra_bus_bandwidth.empty()
                               ? intra_node_allreduce_seconds(h.gpus_per_node, h.parameter_bytes, h.intra_node_bandwidth)
                               : bus_bandwidth_seconds(h.intra_bus_bandwidth, h.gpus_per_node, h.parameter_bytes);
    ComputeModel& c = m.compute;
    c.t0 = h.iteration_overhead + m.intra_node_seconds;
    c.t1 = h.flops_per_example / (g * per_device);
    if (h.saturation_batch > 0) {
        c.flat = true;
        c.t_min = c.t0 + h.saturation_batch * h.flops_per_example / per_device;
    }
    c.min_batch = c.max_batch = 0;  // no profiled range: the planner does not limit extrapolation
    c.dof = 0;
    c.sigma = 0;  // nothing measured: no prediction interval
    AllreduceModel& a = m.allreduce;
    a.alpha = h.network_latency;
    a.beta = 1.0 / h.network_bandwidth;
    a.algorithm = h.algorithm;
    a.bus_bandwidth = h.inter_bus_bandwidth;
    a.intra_bus_bandwidth = h.intra_bus_bandwidth;
    a.devices_per_node = h.gpus_per_node;
    a.intra_bandwidth = h.intra_node_bandwidth;
    m.memory.static_bytes = g * 4.0 * h.parameter_bytes;
    m.memory.per_example_bytes = h.activation_bytes_per_example;
    m.node_memory_bytes = g * h.device_memory_bytes;
    m.overlap.bucket_bytes = h.allreduce_bucket_bytes;
    return m;
}

Plan plan_hardware(const Config& cfg, const HardwareSpec& h, int epochs, int max_nodes, int fixed_nodes,
                   const PolicySpec& policy, const std::vector<RunRecord>& runs, std::vector<std::string>* warnings) {
    if (fixed_nodes > h.nodes)
        throw Error("--nodes " + std::to_string(fixed_nodes) + " is more than the " + std::to_string(h.nodes) +
                    " nodes of the hardware file's cluster " + h.name);
    return plan_hardware_site(cfg, {h}, epochs, max_nodes, fixed_nodes, policy, runs, warnings);
}

Plan plan_hardware_site(const Config& cfg, const std::vector<HardwareSpec>& parts, int epochs, int max_nodes,
                        int fixed_nodes, const PolicySpec& policy, const std::vector<RunRecord>& runs,
                        std::vector<std::string>* warnings) {
    if ((policy.policy == Policy::Deadline && !(policy.deadline_seconds > 0)) ||
        (policy.policy == Policy::Budget && !(policy.budget > 0)))
        throw Error("the deadline or budget of the policy must be > 0");
    if (parts.empty()) throw Error("the hardware file describes no partition");
    const HardwareSpec& h = parts.front();  // the workload and global batches are the file's, shared
    int most = 0;
    for (const HardwareSpec& p : parts) most = std::max(most, p.nodes);
    if (fixed_nodes > most)
        throw Error("--nodes " + std::to_string(fixed_nodes) + " is more than the " + std::to_string(most) +
                    " nodes of the hardware file's largest partition");
    std::vector<PartitionTarget> targets;
    double node_memory = 0;
    int calibrated_runs = 0;
    OverlapModel overlap;
    for (const HardwareSpec& p : parts) {
        int used = 0;
        const SimulatedModels m = hardware_models(p, runs, &used);
        calibrated_runs += used;
        if (targets.empty()) overlap = m.overlap;  // the workload's trainer: the same for every partition
        PartitionTarget t;
        t.conf.name = p.partition;
        t.conf.hardware_class = p.partition;
        t.conf.nodes = p.nodes;
        t.conf.gpus_per_node = p.gpus_per_node;
        t.conf.ranks_per_node = 1;  // one planner rank drives the node's devices (SimulatedModels)
        t.devices_per_rank = p.gpus_per_node;
        t.conf.price_per_node_hour = p.price_per_node_hour;
        t.conf.price_per_gpu_hour = p.price_per_gpu_hour;
        t.conf.watts_per_node = p.watts_per_node;
        t.conf.peak_flops = p.peak_flops;
        t.conf.link_bandwidth = p.network_bandwidth;
        t.compute = m.compute;
        t.allreduce = m.allreduce;
        t.memory = m.memory;
        t.device_memory_bytes = m.node_memory_bytes;
        targets.push_back(t);
        // one memory bound for the request: the smallest node's (a bigger node fits what it fits)
        node_memory = node_memory > 0 ? std::min(node_memory, m.node_memory_bytes) : m.node_memory_bytes;
    }
    Config c = cfg;
    c.partitions.clear();
    c.max_nodes = most;
    c.max_nodes_set = false;
    c.price_per_node_hour = h.price_per_node_hour;
    c.gpus_per_node = h.gpus_per_node;
    c.price_per_gpu_hour = h.price_per_gpu_hour;
    c.watts_per_node = h.watts_per_node;
    c.global_batches = h.global_batches.empty() ? default_global_batches(h) : h.global_batches;
    c.device_memory_bytes = node_memory;
    if (h.noise_scale > 0) c.noise_scale = h.noise_scale;
    PlanRequest req = make_plan_request(c, h.workload, epochs > 0 ? epochs : h.epochs, max_nodes, policy.policy);
    if (h.noise_scale > 0) req.convergence.source = "hardware file";
    // The planner visits every (partition, node count, global batch): refuse sizes that would
    // take minutes rather than plan them (1,000,000 nodes x 25 batches is ~0.2 s).
    const double pairs =
        static_cast<double>(fixed_nodes > 0 ? 1 : req.max_nodes) * req.global_batches.size() * parts.size();
    if (pairs > kMaxPairs)
        throw Error("the hardware file's cluster " + h.name + " gives " + fmt_g(pairs) +
                    " (partition, nodes, global batch) triples to plan, more than " + fmt_g(kMaxPairs) +
                    "; give fewer global_batches or use --max-nodes");
    req.deadline_seconds = policy.deadline_seconds;
    req.budget = policy.budget;
    req.reference_batch = policy.reference_batch;
    req.fixed_epochs = req.fixed_epochs || policy.fixed_epochs;
    req.memory = *targets.front().memory;  // the first partition's, with what its runs measured
    req.overlap = overlap;
    if (!runs.empty()) {
        int ref = req.reference_batch;
        if (ref <= 0)  // as the candidates' enumeration: the smallest global batch
            for (int b : req.global_batches)
                if (b > 0 && (ref <= 0 || b < ref)) ref = b;
        req.convergence =
            history_convergence(runs, h.workload, policy.target_accuracy, ref, req.epochs, req.convergence, warnings,
                                policy.optimizer);
    }
    if (fixed_nodes > 0) {
        req.min_nodes = req.max_nodes = fixed_nodes;
        for (int& b : req.global_batches)
            if (b % fixed_nodes != 0) b = std::max(fixed_nodes, b / fixed_nodes * fixed_nodes);
    }
    if (warnings && parts.size() > 1 && calibrated_runs > 0) {
        int unclassified = 0;
        for (const RunRecord& r : runs) unclassified += r.workload == h.workload.name && r.hardware_class.empty();
        if (unclassified > 0)
            warnings->push_back(std::to_string(unclassified) + " run(s) of " + h.workload.name +
                                " have no hardware class and calibrate every partition planned; plan one partition "
                                "(--partition) or give the runs their hardware_class");
    }
    if (parts.size() == 1 && parts.front().partition.empty()) {  // a file without partitions: the implicit target
        PartitionTarget only = implicit_target(req, targets.front().compute, &*targets.front().allreduce);
        only.devices_per_rank = targets.front().devices_per_rank;
        targets = {only};
    }
    Plan plan = make_site_plan(req, targets);
    plan.calibration.runs = calibrated_runs;
    return plan;
}

}  // namespace tula
