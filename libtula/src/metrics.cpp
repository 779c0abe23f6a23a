// libtula: the streaming reader of the job contract's metrics file. See tula/metrics.hpp and
// tula-jobs(7), "METRICS FILE".
#include "tula/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "tula/error.hpp"
#include "tula/tula.h"

namespace tula {

namespace {

using Json = nlohmann::json;

constexpr const char* kSeeSpec = "see tula-jobs(7), METRICS FILE";

// A JSON value shown in a message: its text, cut to 40 bytes.
std::string shown(const Json& v) {
    std::string s = v.dump(-1, ' ', true, Json::error_handler_t::replace);
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

// Checks the fields of one line; every failure names the file, the line and the field.
class Line {
public:
    Line(const Json& obj, const std::string& where, const std::string& type)
        : obj_(obj), where_(where), type_(type) {}

    [[noreturn]] void bad(const std::string& what, const std::string& todo = kSeeSpec) const {
        throw Error(where_ + ": \"" + type_ + "\" line: " + what + " (" + todo + ")");
    }
    const Json* find(const char* name) const {
        auto it = obj_.find(name);
        return it == obj_.end() ? nullptr : &*it;
    }
    const Json& need(const char* name) const {
        const Json* v = find(name);
        if (!v) bad(std::string("has no field \"") + name + "\"");
        return *v;
    }
    // An integer field >= lo (absent: `dflt` when optional). Floats, strings, null are refused.
    int64_t integer(const char* name, int64_t lo, bool required, int64_t dflt = 0, int64_t hi = INT64_MAX) const {
        const Json* v = required ? &need(name) : find(name);
        if (!v) return dflt;
        if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)))
            bad(std::string("field \"") + name + "\" must be an integer >= " + std::to_string(lo) + ", not " + shown(*v));
        const int64_t x = v->get<int64_t>();
        if (x < lo || x > hi)
            bad(std::string("field \"") + name + "\" must be an integer in " + std::to_string(lo) + ".." +
                std::to_string(hi) + ", not " + std::to_string(x));
        return x;
    }
    // A finite number field: > lo (strict) or >= lo, <= hi; null gives NaN when `nullable`.
    double number(const char* name, double lo, bool strict, bool required, bool nullable = false,
                  double hi = std::numeric_limits<double>::infinity()) const {
        const Json* v = required ? &need(name) : find(name);
        if (!v) return std::numeric_limits<double>::quiet_NaN();
        if (v->is_null() && nullable) return std::numeric_limits<double>::quiet_NaN();
        const std::string range = std::string(strict ? "> " : ">= ") + Json(lo).dump() +
                                  (std::isfinite(hi) ? " and <= " + Json(hi).dump() : std::string()) +
                                  (nullable ? " or null" : "");
        if (!v->is_number()) bad(std::string("field \"") + name + "\" must be a finite number " + range + ", not " + shown(*v));
        const double x = v->get<double>();
        if (!std::isfinite(x) || (strict ? x <= lo : x < lo) || x > hi)
            bad(std::string("field \"") + name + "\" must be a finite number " + range + ", not " + shown(*v));
        return x;
    }
    std::string text(const char* name) const {
        const Json* v = find(name);
        if (!v) return std::string();
        if (!v->is_string()) bad(std::string("field \"") + name + "\" must be a string, not " + shown(*v));
        return v->get<std::string>();
    }
    bool flag(const char* name) const {
        const Json* v = find(name);
        if (!v) return false;
        if (!v->is_boolean()) bad(std::string("field \"") + name + "\" must be true or false, not " + shown(*v));
        return v->get<bool>();
    }

private:
    const Json& obj_;
    const std::string& where_;
    const std::string& type_;
};

// The header of `l`; "workload" may be absent only when !need_workload (an allreduce profile).
MetricsHeader read_header(const Line& l, bool need_workload) {
    MetricsHeader h;
    const Json* wp = need_workload ? &l.need("workload") : l.find("workload");
    const Json& w = wp ? *wp : Json("");
    if (wp && (!w.is_string() || tula_check_workload(w.get<std::string>().c_str(), nullptr, 0) != 0 ||
               w.get<std::string>().find('\0') != std::string::npos))
        l.bad("field \"workload\" must be a workload name MODEL@DATASET (letters, digits, _ . - and one @), not " +
              shown(w));
    if (wp) h.workload = w.get<std::string>();
    h.nodes = static_cast<int>(l.integer("nodes", 1, true, 0, 1000000));
    h.ranks = static_cast<int>(l.integer("ranks", 1, true, 0, 100000000));
    if (h.ranks < h.nodes || h.ranks % h.nodes != 0)
        l.bad("ranks " + std::to_string(h.ranks) + " must be a multiple of nodes " + std::to_string(h.nodes) +
              " and at least nodes (ranks per node = ranks / nodes)");
    h.global_batch = static_cast<int>(l.integer("global_batch", 0, false, 0, INT32_MAX));
    h.epochs = static_cast<int>(l.integer("epochs", 1, false, 0, INT32_MAX));
    h.train_examples = l.integer("train_examples", 1, false);
    h.test_examples = l.integer("test_examples", 1, false);
    h.params = l.integer("params", 1, false);
    h.dataset_train_examples = l.integer("dataset_train_examples", 1, false);
    h.dataset_test_examples = l.integer("dataset_test_examples", 1, false);
    h.optimizer = l.text("optimizer");
    if (l.find("predicted_seconds")) h.predicted_seconds = l.number("predicted_seconds", 0, false, true);
    h.job_id = l.text("job_id");
    h.host = l.text("host");
    h.activation_floats = l.integer("activation_floats", 0, false);
    h.has_hardware_class = l.find("hardware_class") != nullptr;
    h.hardware_class = l.text("hardware_class");
    h.resumed = l.flag("resumed");
    h.resumed_at_step = l.integer("resumed_at_step", 0, false);
    return h;
}

}  // namespace

std::optional<Workload> MetricsHeader::workload_row() const {
    const int64_t train = dataset_train_examples > 0 ? dataset_train_examples : train_examples;
    if (params <= 0 || train <= 0) return std::nullopt;
    Workload w;
    w.name = workload;
    const size_t at = workload.find('@');
    w.model = workload.substr(0, at);
    w.dataset = at == std::string::npos ? "" : workload.substr(at + 1);
    w.params = params;
    w.train_examples = train;
    w.test_examples = dataset_test_examples > 0 ? dataset_test_examples : test_examples;
    w.activation_floats = activation_floats;
    return w;
}

namespace {

enum class Want { Run, Profile, Allreduce, Kind };

// What a scan of one file gathered.
struct Scan {
    MetricsHeader header;
    RunRecord run;
    std::vector<ProfileLine> profile;
    std::vector<AllreduceLine> allreduce;
    int64_t steps = 0;
    int resumes = 0;
    int64_t epoch_lines = 0, profile_lines = 0, allreduce_lines = 0;
    int64_t summary_observations = -1;  // the "summary" line's noise_observations; -1: none
    double summary_noise = -1;          // the "summary" line's noise_scale (0: null); -1: none
    int64_t summary_parts = 0;          // the "summary" line's parts; 0: none
    std::vector<double> summary_part_seconds;  // the "summary" line's part_seconds; empty: none
};

// One line's JSON object; `where` is "FILE:LINE" for the error. Throws Error with the parser's
// reason when the bytes are not valid JSON.
Json parse_line(const char* p, size_t len, const std::string& where) {
    Json obj = Json::parse(p, p + len, nullptr, false);
    if (!obj.is_discarded()) return obj;
    std::string why = "not valid JSON";
    try {
        const Json again = Json::parse(p, p + len);  // throws: the parser's reason
        (void)again;
    } catch (const Json::exception& e) {
        const char* m = std::strstr(e.what(), "] ");
        why += std::string(": ") + (m ? m + 2 : e.what());
    }
    throw Error(where + ": " + why + " (a job killed while writing leaves a truncated last line: remove it; " +
                "NaN and Infinity are not JSON)");
}

// The checks and the gathering of each line type, with what they keep between lines.
struct Scanner {
    Want want;
    Scan s;
    bool have_header = false;
    // the previous step number; after a resume, its resumed_at_step - 1 (resumed_at_step counts
    // the steps done before it, so with steps numbered from 0 it is the next step's number)
    int64_t last_step = -1;
    int last_epoch = 0;

    void header(const Line& l) {
        const MetricsHeader h = read_header(l, want != Want::Allreduce && want != Want::Kind);
        if (!have_header) {
            s.header = h;
            have_header = true;
            if (h.resumed) last_step = std::max<int64_t>(last_step, h.resumed_at_step - 1);
            return;
        }
        if (!h.resumed)
            l.bad("a second header must be a resume (\"resumed\": true)",
                  "a new run needs a new file; a resumed job appends a header with \"resumed\": true");
        const MetricsHeader& f = s.header;
        if (h.workload != f.workload || h.nodes != f.nodes || h.ranks != f.ranks || h.global_batch != f.global_batch)
            l.bad("the resume's workload, nodes, ranks or global_batch (" + h.workload + ", " + std::to_string(h.nodes) +
                      ", " + std::to_string(h.ranks) + ", " + std::to_string(h.global_batch) +
                      ") differ from the first header's (" + f.workload + ", " + std::to_string(f.nodes) + ", " +
                      std::to_string(f.ranks) + ", " + std::to_string(f.global_batch) + ")",
                  "a different run needs its own file");
        ++s.resumes;
        last_step = h.resumed_at_step - 1;
        // a summary before a resume speaks of the parts before it: the last summary counts
        s.summary_parts = 0;
        s.summary_part_seconds.clear();
    }

    void step(const Line& l) {
        if (s.header.global_batch < 1) l.bad("the header has no global_batch >= 1, which step lines need");
        const int64_t step = l.integer("step", 0, true);
        if (step <= last_step)
            l.bad("step " + std::to_string(step) + " is not above the previous step number " +
                      std::to_string(last_step) + (s.resumes > 0 || s.header.resumed ? " (or below the resume's resumed_at_step)" : ""),
                  "step numbers must increase strictly");
        last_step = step;
        l.number("seconds", 0, true, true);
        l.integer("examples", 1, true);
        ++s.steps;
    }

    void epoch(const Line& l) {
        if (s.header.global_batch < 1) l.bad("the header has no global_batch >= 1, which epoch lines need");
        const int64_t e = l.integer("epoch", 1, true);
        if (e != last_epoch + 1)
            l.bad("epoch " + std::to_string(e) + " does not follow epoch " + std::to_string(last_epoch) + " (expected " +
                      std::to_string(last_epoch + 1) + ")",
                  "epochs are numbered 1, 2, 3, ... and a resumed job continues after the last epoch line");
        last_epoch = static_cast<int>(e);
        ++s.epoch_lines;
        const double secs = l.number("seconds", 0, true, true);
        const double acc = l.number("test_accuracy", 0, false, true, false, 1.0);
        const double loss = l.number("train_loss", 0, false, false, true);
        const double noise = l.number("noise_scale", 0, true, false, true);
        const int64_t obs = l.integer("noise_observations", 0, false);
        if (want != Want::Run) return;
        RunRecord& r = s.run;
        r.epoch_seconds.push_back(secs);
        r.epoch_train_loss.push_back(loss);
        r.epoch_test_accuracy.push_back(acc);
        r.measured_seconds += secs;
        r.test_accuracy = acc;
        if (std::isfinite(noise)) r.noise_scale = noise;
        r.noise_observations += obs;
    }

    void profile(const Line& l) {
        ProfileLine p;
        p.local_batch = static_cast<int>(l.integer("local_batch", 1, true, 0, INT32_MAX));
        p.seconds = l.number("seconds", 0, true, true);
        p.steps = l.integer("steps", 1, true);
        p.threads = static_cast<int>(l.integer("threads", 1, false, 1, 1 << 20));
        p.startup_seconds = l.number("startup_seconds", 0, false, false, true);
        p.synced_seconds = l.number("synced_seconds", 0, true, false, true);
        if (want == Want::Profile) s.profile.push_back(p);
        ++s.profile_lines;
    }

    void allreduce(const Line& l) {
        AllreduceLine a;
        a.bytes = l.integer("bytes", 1, true);
        a.seconds = l.number("seconds", 0, true, true);
        a.iters = l.integer("iters", 1, true);
        if (want == Want::Allreduce) s.allreduce.push_back(a);
        ++s.allreduce_lines;
    }

    void summary(const Line& l) {
        // the run's own noise scale and observation count, which override the epochs'
        const double noise = l.number("noise_scale", 0, false, false, true);
        const int64_t obs = l.integer("noise_observations", 0, false, -1);
        // the parts the run trained in and their training seconds
        const int64_t parts = l.integer("parts", 1, false, 0, INT32_MAX);
        std::vector<double> part_seconds;
        if (const Json* ps = l.find("part_seconds")) {
            if (!ps->is_array() || ps->empty())
                l.bad("field \"part_seconds\" must be a list of seconds, one finite number >= 0 per part, not " +
                      shown(*ps));
            for (const Json& v : *ps) {
                if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
                    l.bad("field \"part_seconds\" must hold finite numbers >= 0, not " + shown(v));
                part_seconds.push_back(v.get<double>());
            }
            const size_t want_parts = parts > 0 ? static_cast<size_t>(parts) : 1;
            if (part_seconds.size() != want_parts)
                l.bad("field \"part_seconds\" has " + std::to_string(part_seconds.size()) + " values, \"parts\" is " +
                      std::to_string(want_parts) + (parts > 0 ? "" : " (absent)") + ": give one per part");
        }
        if (want != Want::Run) return;
        if (l.find("noise_scale")) s.summary_noise = std::isfinite(noise) ? noise : 0;
        if (obs >= 0) s.summary_observations = obs;
        s.summary_parts = parts;
        s.summary_part_seconds = std::move(part_seconds);
    }

    // One parsed line: its type checked and dispatched; other types are ignored.
    void line(const Json& obj, const std::string& where) {
        if (!obj.is_object()) throw Error(where + ": not a JSON object, " + shown(obj) + " (" + kSeeSpec + ")");
        auto ty = obj.find("type");
        if (ty == obj.end() || !ty->is_string())
            throw Error(where + ": the object has no string field \"type\" (" + kSeeSpec + ")");
        const std::string type = ty->get<std::string>();
        const Line l(obj, where, type);
        if (!have_header && type != "run")
            throw Error(where + ": the first line must be the \"run\" header, not a \"" + type +
                        "\" line (the writer must start the file with {\"type\":\"run\",...}; " + kSeeSpec + ")");
        if (type == "run") header(l);
        else if (type == "step") step(l);
        else if (type == "epoch") epoch(l);
        else if (type == "profile") profile(l);
        else if (type == "allreduce") allreduce(l);
        else if (type == "summary") summary(l);
    }
};

// Reads and checks every line of `in`, keeping what `want` needs.
Scan scan(std::istream& in, const std::string& source, Want want) {
    Scanner sc{want, {}};
    // one line and its '\n': getline stops after kMaxMetricsLineBytes + 1 bytes without one
    std::unique_ptr<char[]> buf(new char[kMaxMetricsLineBytes + 2]);
    for (int64_t n = 1;; ++n) {
        in.getline(buf.get(), static_cast<std::streamsize>(kMaxMetricsLineBytes + 2));
        const std::streamsize got = in.gcount();
        if (got == 0 && in.eof()) break;
        const std::string where = source + ":" + std::to_string(n);
        const bool has_newline = !in.eof() && !in.fail();
        const size_t len = static_cast<size_t>(got) - (has_newline ? 1 : 0);
        if (in.fail() && !in.eof()) {
            if (in.bad()) throw Error(where + ": cannot read the file (" + std::strerror(errno) + ")");
            throw Error(where + ": the line is longer than " + std::to_string(kMaxMetricsLineBytes) +
                        " bytes (each line is one JSON object of at most 64 KiB; " + kSeeSpec + ")");
        }
        if (len > kMaxMetricsLineBytes)
            throw Error(where + ": the line is longer than " + std::to_string(kMaxMetricsLineBytes) + " bytes (" +
                        kSeeSpec + ")");
        sc.line(parse_line(buf.get(), len, where), where);
        if (!has_newline) break;
    }
    if (in.bad()) throw Error(source + ": cannot read the file (" + std::strerror(errno) + ")");
    if (!sc.have_header)
        throw Error(source + ": the file is empty; a metrics file starts with the \"run\" header (" + kSeeSpec + ")");
    return sc.s;
}

template <class T, class F>
T read_file(const std::string& path, F read) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open the metrics file " + path + ": " + std::strerror(errno));
    return read(f, path);
}

}  // namespace

MetricsRun read_metrics_run(std::istream& in, const std::string& source) {
    Scan s = scan(in, source, Want::Run);
    if (s.header.global_batch < 1)
        throw Error(source + ":1: \"run\" header: field \"global_batch\" must be an integer >= 1 in a run file (" +
                    kSeeSpec + ")");
    if (s.run.epoch_seconds.empty())
        throw Error(source + ": no \"epoch\" line; a run is recorded once at least one epoch has finished");
    MetricsRun m;
    m.header = s.header;
    m.steps = s.steps;
    m.resumes = s.resumes;
    m.run = std::move(s.run);
    RunRecord& r = m.run;
    if (s.summary_observations >= 0) r.noise_observations = s.summary_observations;
    if (s.summary_noise >= 0) r.noise_scale = s.summary_noise;
    const MetricsHeader& h = m.header;
    // the summary's parts, else one per process that wrote the file: the first, and each resume
    r.parts = s.summary_parts > 0 ? static_cast<int>(s.summary_parts)
                                  : static_cast<int>(std::min<int64_t>(INT32_MAX, int64_t{1} + s.resumes + (h.resumed ? 1 : 0)));
    if (s.summary_parts > 1) r.part_seconds = std::move(s.summary_part_seconds);
    r.workload = h.workload;
    r.job_id = h.job_id;
    r.nodes = h.nodes;
    r.ranks_per_node = h.ranks_per_node();
    r.global_batch = h.global_batch;
    r.epochs = static_cast<int>(r.epoch_seconds.size());
    r.predicted_seconds = h.predicted_seconds >= 0 ? h.predicted_seconds : 0;
    r.train_examples = h.train_examples;
    r.optimizer = h.optimizer;
    r.hardware_class = h.hardware_class;
    return m;
}

MetricsProfile read_metrics_profile(std::istream& in, const std::string& source) {
    Scan s = scan(in, source, Want::Profile);
    if (s.profile.empty())
        throw Error(source + ": no \"profile\" line; the command must time each batch size of TULA_PROFILE_BATCHES (" +
                    kSeeSpec + ")");
    MetricsProfile p;
    p.header = s.header;
    p.lines = std::move(s.profile);
    return p;
}

MetricsKind metrics_file_kind(const std::string& path) {
    return read_file<MetricsKind>(path, [](std::istream& in, const std::string& p) {
        const Scan s = scan(in, p, Want::Kind);
        if (s.epoch_lines > 0) return MetricsKind::Run;
        if (s.profile_lines > 0) return MetricsKind::Profile;
        if (s.allreduce_lines > 0) return MetricsKind::Allreduce;
        throw Error(p + ": no \"epoch\", \"profile\" or \"allreduce\" line: nothing to record (a run is recorded once "
                    "at least one epoch has finished; " + kSeeSpec + ")");
    });
}

MetricsProfile read_metrics_allreduce_file(const std::string& path) {
    return read_file<MetricsProfile>(path, [](std::istream& in, const std::string& p) {
        Scan s = scan(in, p, Want::Allreduce);
        if (s.allreduce.empty())
            throw Error(p + ": no \"allreduce\" line; the file must have one per message size timed (" + kSeeSpec + ")");
        MetricsProfile m;
        m.header = s.header;
        m.allreduce = std::move(s.allreduce);
        return m;
    });
}

MetricsRun read_metrics_run_file(const std::string& path) {
    return read_file<MetricsRun>(path, [](std::istream& in, const std::string& p) { return read_metrics_run(in, p); });
}

MetricsProfile read_metrics_profile_file(const std::string& path) {
    return read_file<MetricsProfile>(path,
                                     [](std::istream& in, const std::string& p) { return read_metrics_profile(in, p); });
}

}  // namespace tula
