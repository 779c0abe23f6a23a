// libtula: the profile database's exchange format (tula db export / import, JSON) and
// pruning. See db.hpp and tula(1), DATABASE EXCHANGE.
#include <nlohmann/json.hpp>

#include "db/sqlite.hpp"

namespace tula {

using namespace detail;

namespace {

using ExJson = nlohmann::ordered_json;

constexpr const char* kExportFormat = "tula-profiles";

// A JSON number, or null for an SQL NULL column.
ExJson nullable(const Stmt& s, int c) { return s.is_null(c) ? ExJson(nullptr) : ExJson(s.dbl(c)); }

// Reads fields of one row of an imported document; every failure names the section and row.
class RowReader {
public:
    RowReader(const ExJson& row, const std::string& where) : row_(row), where_(where) {
        if (!row_.is_object()) bad("is not a JSON object");
    }
    [[noreturn]] void bad(const std::string& what) const { throw Error(where_ + " " + what); }
    const ExJson& field(const char* name) const {
        auto it = row_.find(name);
        if (it == row_.end()) bad(std::string("has no field \"") + name + "\"");
        return *it;
    }
    std::string text(const char* name, bool nonempty) const {
        const ExJson& v = field(name);
        if (!v.is_string()) bad(std::string(name) + " must be a string");
        std::string s = v.get<std::string>();
        if (nonempty && s.empty()) bad(std::string(name) + " must not be empty");
        if (s.size() > 4096) bad(std::string(name) + " is longer than 4096 bytes");
        return s;
    }
    // An integer in [lo, hi].
    int64_t integer(const char* name, int64_t lo, int64_t hi) const {
        const ExJson& v = field(name);
        if (!v.is_number_integer()) bad(std::string(name) + " must be an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
            bad(std::string(name) + " is too large");
        const int64_t x = v.get<int64_t>();
        if (x < lo || x > hi)
            bad(std::string(name) + " must be " + (lo == 1 ? "a count >= 1" : lo == 0 ? "an integer >= 0" : "in range") +
                (hi < INT64_MAX ? " and <= " + std::to_string(hi) : std::string()) + ", not " + std::to_string(x));
        return x;
    }
    // A finite number; > 0 when `positive`, else >= 0; at most `hi`.
    double number(const char* name, bool positive, double hi = HUGE_VAL) const {
        return check_number(field(name), name, positive, hi);
    }
    // As number(), or NaN for null / a missing field.
    double optional_number(const ExJson& v, const char* name, bool positive, double hi = HUGE_VAL) const {
        if (v.is_null()) return NAN;
        return check_number(v, name, positive, hi);
    }

private:
    double check_number(const ExJson& v, const char* name, bool positive, double hi) const {
        if (!v.is_number()) bad(std::string(name) + " must be a number");
        const double x = v.get<double>();
        if (!std::isfinite(x)) bad(std::string(name) + " must be finite");
        if (positive ? !(x > 0) : !(x >= 0))
            bad(std::string(name) + (positive ? " must be > 0" : " must be >= 0") + ", not " + ExJson(x).dump());
        if (x > hi) bad(std::string(name) + " must be <= " + ExJson(hi).dump() + ", not " + ExJson(x).dump());
        return x;
    }
    const ExJson& row_;
    std::string where_;
};

// The array `name` of the document (missing = empty). Errors: not an array.
const ExJson& section(const ExJson& doc, const char* name, const std::string& source) {
    static const ExJson empty = ExJson::array();
    auto it = doc.find(name);
    if (it == doc.end() || it->is_null()) return empty;
    if (!it->is_array()) throw Error(source + ": \"" + name + "\" must be a JSON array");
    return *it;
}

// Whether `s` may be stored as RunRecord::optimizer: "" or 1..32 of [a-z0-9-].
bool valid_optimizer_name(const std::string& s) {
    if (s.size() > 32) return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    return true;
}

std::string row_name(const char* sec, size_t i) { return std::string(sec) + " row " + std::to_string(i + 1) + ":"; }

struct ImportedCompute {
    ComputeSample s;
    double created = 0;
};
struct ImportedAllreduce {
    AllreduceSample s;
    double created = 0;
};
// Per-epoch values of an imported run; NaN = not recorded (stored as NULL).
struct ImportedRun {
    RunRecord r;
    std::vector<double> seconds, loss, acc;
};

constexpr double kMaxTime = 4102444800.0;  // 2100-01-01, a generous upper bound for `created`

}  // namespace

std::string ProfileDb::export_json(const std::string& workload) const {
    ExJson doc;
    doc["format"] = kExportFormat;
    doc["schema_version"] = kSchemaVersion;
    doc["exported"] = now_seconds();
    doc["workload_filter"] = workload.empty() ? ExJson(nullptr) : ExJson(workload);
    ExJson ws = ExJson::array();
    for (const auto& w : workloads()) {
        if (!workload.empty() && w.name != workload) continue;
        ws.push_back({{"name", w.name}, {"model", w.model}, {"dataset", w.dataset}, {"params", w.params},
                      {"train_examples", w.train_examples}, {"test_examples", w.test_examples},
                      {"activation_floats", w.activation_floats}});
    }
    doc["workloads"] = std::move(ws);
    ExJson cs = ExJson::array();
    {
        Stmt s(db_, path_,
               (std::string("SELECT workload, host, local_batch, threads, seconds_per_iter, iters, created, ") +
                (schema_ >= 4 ? "ranks, startup_seconds" : "1, NULL") +
                (schema_ >= 5 ? ", synced_seconds_per_iter" : ", NULL") + (schema_ >= 8 ? ", hardware_class, ranks_per_node" : ", '', 1") +
                (schema_ >= 11 ? ", job_id" : ", ''") + " FROM compute_profile " +
                (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id")
                   .c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step())
            cs.push_back({{"workload", s.text(0)}, {"host", s.text(1)}, {"local_batch", s.i64(2)},
                          {"threads", s.i64(3)}, {"seconds_per_iter", s.dbl(4)}, {"iters", s.i64(5)},
                          {"created", s.dbl(6)}, {"ranks", s.i64(7)},
                          {"startup_seconds", s.is_null(8) ? ExJson(nullptr) : ExJson(s.dbl(8))},
                          {"synced_seconds_per_iter", s.is_null(9) ? ExJson(nullptr) : ExJson(s.dbl(9))},
                          {"hardware_class", s.text(10)}, {"ranks_per_node", s.i64(11)}, {"job_id", s.text(12)}});
    }
    doc["compute"] = std::move(cs);
    ExJson as = ExJson::array();
    if (workload.empty()) {
        Stmt s(db_, path_,
               (std::string("SELECT host, nodes, bytes, seconds, created, ") +
                (schema_ >= 8 ? "hardware_class" : "''") + (schema_ >= 9 ? ", ranks_per_node" : ", 1") +
                " FROM allreduce_profile ORDER BY id")
                   .c_str());
        while (s.step())
            as.push_back({{"host", s.text(0)}, {"nodes", s.i64(1)}, {"bytes", s.i64(2)}, {"seconds", s.dbl(3)},
                          {"created", s.dbl(4)}, {"hardware_class", s.text(5)}, {"ranks_per_node", s.i64(6)}});
    }
    doc["allreduce"] = std::move(as);
    ExJson rs = ExJson::array();
    {
        const std::string sql = run_columns(schema_) + (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id";
        Stmt s(db_, path_, sql.c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step()) {
            const RunRecord r = read_run(s);
            ExJson j = {{"job_id", r.job_id}, {"workload", r.workload}, {"nodes", r.nodes},
                        {"global_batch", r.global_batch}, {"epochs", r.epochs},
                        {"predicted_seconds", r.predicted_seconds}, {"measured_seconds", r.measured_seconds},
                        {"test_accuracy", r.test_accuracy}, {"created", r.created},
                        {"noise_scale", r.noise_scale > 0 ? ExJson(r.noise_scale) : ExJson(nullptr)},
                        {"noise_observations", r.noise_observations},
                        {"train_examples", r.train_examples},
                        {"optimizer", r.optimizer},
                        {"hardware_class", r.hardware_class},
                        {"ranks_per_node", r.ranks_per_node},
                        {"parts", r.parts},
                        {"part_seconds", r.part_seconds.empty() ? ExJson(nullptr) : ExJson(r.part_seconds)}};
            ExJson es = ExJson::array();
            Stmt e(db_, path_,
                   "SELECT epoch, seconds, train_loss, test_accuracy FROM run_epoch WHERE run_id = ? ORDER BY epoch");
            e.bind(1, r.id);
            while (e.step())
                es.push_back({{"epoch", e.i64(0)}, {"seconds", nullable(e, 1)}, {"train_loss", nullable(e, 2)},
                              {"test_accuracy", nullable(e, 3)}});
            j["epoch_rows"] = std::move(es);
            rs.push_back(std::move(j));
        }
    }
    doc["runs"] = std::move(rs);
    return doc.dump(2) + "\n";
}

namespace {

// The "workloads" rows of an export `doc` of schema `version`, every field checked. Errors:
// tula::Error naming `source`, the row and the field.
std::vector<Workload> read_workload_rows(const ExJson& doc, int64_t version, const std::string& source) {
    std::vector<Workload> ws;
    const ExJson& jw = section(doc, "workloads", source);
    for (size_t i = 0; i < jw.size(); ++i) {
        RowReader r(jw[i], source + ": " + row_name("workloads", i));
        Workload w;
        w.name = r.text("name", true);
        w.model = r.text("model", true);
        w.dataset = r.text("dataset", true);
        w.params = r.integer("params", 1, INT64_MAX);
        w.train_examples = r.integer("train_examples", 1, INT64_MAX);
        w.test_examples = r.integer("test_examples", 0, INT64_MAX);
        if (version >= 6 && jw[i].contains("activation_floats"))  // optional: missing = 0, not known
            w.activation_floats = r.integer("activation_floats", 0, INT64_MAX);
        ws.push_back(w);
    }
    return ws;
}

// The "compute" rows of an export `doc` of schema `version`, every field checked. Errors:
// tula::Error naming `source`, the row and the field.
std::vector<ImportedCompute> read_compute_rows(const ExJson& doc, int64_t version, const std::string& source) {
    std::vector<ImportedCompute> cs;
    const ExJson& jc = section(doc, "compute", source);
    for (size_t i = 0; i < jc.size(); ++i) {
        RowReader r(jc[i], source + ": " + row_name("compute", i));
        ImportedCompute c;
        c.s.workload = r.text("workload", true);
        c.s.host = r.text("host", false);
        c.s.local_batch = static_cast<int>(r.integer("local_batch", 1, INT32_MAX));
        c.s.threads = static_cast<int>(r.integer("threads", 1, INT32_MAX));
        c.s.seconds_per_iter = r.number("seconds_per_iter", true);
        c.s.iters = static_cast<int>(r.integer("iters", 1, INT32_MAX));
        c.created = r.number("created", true, kMaxTime);
        if (version >= 4 && jc[i].contains("ranks"))  // optional: missing = 1, one rank alone
            c.s.ranks = static_cast<int>(r.integer("ranks", 1, INT32_MAX));
        if (version >= 4 && jc[i].contains("startup_seconds")) {  // optional: missing or null = not measured
            const double v = r.optional_number(jc[i]["startup_seconds"], "startup_seconds", false);
            if (!std::isnan(v)) c.s.startup_seconds = v;
        }
        if (version >= 5 && jc[i].contains("synced_seconds_per_iter")) {  // optional: missing or null = not measured
            const double v = r.optional_number(jc[i]["synced_seconds_per_iter"], "synced_seconds_per_iter", true);
            if (!std::isnan(v)) c.s.synced_seconds_per_iter = v;
        }
        if (version >= 8 && jc[i].contains("hardware_class"))  // optional: missing = "", unknown class
            c.s.hardware_class = r.text("hardware_class", false);
        if (version >= 8 && jc[i].contains("ranks_per_node")) {  // optional: missing = 1
            c.s.ranks_per_node = static_cast<int>(r.integer("ranks_per_node", 1, INT32_MAX));
            if (c.s.ranks % c.s.ranks_per_node != 0) r.bad("ranks must be a multiple of ranks_per_node");
        }
        if (version >= 11 && jc[i].contains("job_id"))  // optional: missing = "", not known
            c.s.job_id = r.text("job_id", false);
        cs.push_back(c);
    }
    return cs;
}

// The "allreduce" rows of an export `doc` of schema `version`, every field checked. Errors:
// tula::Error naming `source`, the row and the field.
std::vector<ImportedAllreduce> read_allreduce_rows(const ExJson& doc, int64_t version, const std::string& source) {
    std::vector<ImportedAllreduce> as;
    const ExJson& ja = section(doc, "allreduce", source);
    for (size_t i = 0; i < ja.size(); ++i) {
        RowReader r(ja[i], source + ": " + row_name("allreduce", i));
        ImportedAllreduce a;
        a.s.host = r.text("host", false);
        a.s.nodes = static_cast<int>(r.integer("nodes", 1, INT32_MAX));
        a.s.bytes = r.integer("bytes", 1, INT64_MAX);
        a.s.seconds = r.number("seconds", true);
        a.created = r.number("created", true, kMaxTime);
        if (version >= 8 && ja[i].contains("hardware_class"))  // optional: missing = "", unknown class
            a.s.hardware_class = r.text("hardware_class", false);
        if (version >= 9 && ja[i].contains("ranks_per_node"))  // optional: missing = 1 (one rank per node)
            a.s.ranks_per_node = static_cast<int>(r.integer("ranks_per_node", 1, INT32_MAX));
        as.push_back(a);
    }
    return as;
}

// The "runs" rows of an export `doc` of schema `version`, every field checked. Errors:
// tula::Error naming `source`, the row and the field.
std::vector<ImportedRun> read_run_rows(const ExJson& doc, int64_t version, const std::string& source) {
    std::vector<ImportedRun> rs;
    const ExJson& jr = section(doc, "runs", source);
    for (size_t i = 0; i < jr.size(); ++i) {
        const std::string where = source + ": " + row_name("runs", i);
        RowReader r(jr[i], where);
        ImportedRun x;
        // Required: workload, nodes, global_batch, epochs, measured_seconds. The rest may be left
        // out: job_id "" (no Slurm job), predicted_seconds 0 (no prediction), test_accuracy 0
        // (not measured), created 0 (not known: older than any dated run), no epoch rows.
        const ExJson& row = jr[i];
        x.r.job_id = row.contains("job_id") ? r.text("job_id", false) : "";
        x.r.workload = r.text("workload", true);
        x.r.nodes = static_cast<int>(r.integer("nodes", 1, INT32_MAX));
        x.r.global_batch = static_cast<int>(r.integer("global_batch", 1, INT32_MAX));
        x.r.epochs = static_cast<int>(r.integer("epochs", 1, INT32_MAX));
        x.r.predicted_seconds = row.contains("predicted_seconds") ? r.number("predicted_seconds", false) : 0.0;
        x.r.measured_seconds = r.number("measured_seconds", true);
        x.r.test_accuracy = row.contains("test_accuracy") ? r.number("test_accuracy", false, 1.0) : 0.0;
        x.r.created = row.contains("created") ? r.number("created", false, kMaxTime) : 0.0;
        if (version >= 2) {  // optional: missing or null = not measured
            auto ns = jr[i].find("noise_scale");
            if (ns != jr[i].end()) {
                const double v = r.optional_number(*ns, "noise_scale", true);
                x.r.noise_scale = std::isnan(v) ? 0.0 : v;
            }
            if (jr[i].contains("noise_observations"))
                x.r.noise_observations = r.integer("noise_observations", 0, INT64_MAX);
        }
        if (version >= 3 && jr[i].contains("train_examples"))  // optional: missing = 0, the workload's
            x.r.train_examples = r.integer("train_examples", 0, INT64_MAX);
        if (version >= 7 && jr[i].contains("optimizer")) {  // optional: missing or "" = not recorded
            x.r.optimizer = r.text("optimizer", false);
            if (!valid_optimizer_name(x.r.optimizer))
                r.bad("optimizer must be \"\" or a lower-case name of at most 32 letters, digits and - "
                      "(sgd, ags, lars, lamb, local-sgd), not \"" + x.r.optimizer.substr(0, 40) + "\"");
        }
        if (version >= 8 && jr[i].contains("hardware_class"))  // optional: missing = "", unknown class
            x.r.hardware_class = r.text("hardware_class", false);
        if (version >= 8 && jr[i].contains("ranks_per_node"))  // optional: missing = 1 (older: nodes were ranks)
            x.r.ranks_per_node = static_cast<int>(r.integer("ranks_per_node", 1, INT32_MAX));
        if (version >= 10 && jr[i].contains("parts"))  // optional: missing = 1 part
            x.r.parts = static_cast<int>(r.integer("parts", 1, INT32_MAX));
        if (version >= 10 && jr[i].contains("part_seconds") && !jr[i]["part_seconds"].is_null()) {  // null: not known
            const ExJson& ps = r.field("part_seconds");
            if (!ps.is_array() || ps.size() != static_cast<size_t>(x.r.parts))
                r.bad("part_seconds must be null or a list of one number per part (" + std::to_string(x.r.parts) +
                      " parts)");
            for (const ExJson& v : ps) x.r.part_seconds.push_back(r.optional_number(v, "part_seconds", false));
            for (double v : x.r.part_seconds)
                if (std::isnan(v)) r.bad("part_seconds must hold numbers, not null");
        }
        static const ExJson kNoEpochs = ExJson::array();
        const ExJson& er = row.contains("epoch_rows") ? r.field("epoch_rows") : kNoEpochs;
        if (!er.is_array()) r.bad("epoch_rows must be a JSON array");
        for (size_t k = 0; k < er.size(); ++k) {
            RowReader e(er[k], where + " epoch row " + std::to_string(k + 1) + ":");
            if (e.integer("epoch", 1, INT32_MAX) != static_cast<int64_t>(k + 1))
                e.bad("epoch must be " + std::to_string(k + 1) + " (epoch rows are numbered 1, 2, ... in order)");
            x.seconds.push_back(e.optional_number(e.field("seconds"), "seconds", true));
            x.loss.push_back(e.optional_number(e.field("train_loss"), "train_loss", false));
            x.acc.push_back(e.optional_number(e.field("test_accuracy"), "test_accuracy", false, 1.0));
        }
        rs.push_back(std::move(x));
    }
    return rs;
}

}  // namespace

ProfileDb::ImportCounts ProfileDb::import_json(const std::string& text, const std::string& source) {
    ExJson doc;
    try {
        doc = ExJson::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(source + ": not valid JSON (at byte " + std::to_string(e.byte) +
                    "); give a file written by `tula db export`");
    } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range 406: a number such as 1e99999
        throw Error(source + ": not valid JSON (" + e.what() + "); give a file written by `tula db export`");
    }
    if (!doc.is_object()) throw Error(source + ": not a tula profile export (the top level is not a JSON object)");
    auto fmt = doc.find("format");
    if (fmt == doc.end() || !fmt->is_string() || fmt->get<std::string>() != kExportFormat)
        throw Error(source + ": not a tula profile export (\"format\" is not \"" + kExportFormat +
                    "\"); give a file written by `tula db export`");
    auto ver = doc.find("schema_version");
    if (ver == doc.end() || !ver->is_number_integer())
        throw Error(source + ": \"schema_version\" is missing or not an integer");
    if (ver->is_number_unsigned() && ver->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw Error(source + ": schema_version is too large; upgrade tula");
    const int64_t version = ver->get<int64_t>();
    if (version < kOldestSchemaVersion || version > kSchemaVersion)
        throw Error(source + ": schema_version " + std::to_string(version) + " is not a version this tula reads (" +
                    std::to_string(kOldestSchemaVersion) + " to " + std::to_string(kSchemaVersion) + ")" +
                    (version > kSchemaVersion ? "; upgrade tula" : ""));

    // 1. Validate everything.
    const std::vector<Workload> ws = read_workload_rows(doc, version, source);
    const std::vector<ImportedCompute> cs = read_compute_rows(doc, version, source);
    const std::vector<ImportedAllreduce> as = read_allreduce_rows(doc, version, source);
    const std::vector<ImportedRun> rs = read_run_rows(doc, version, source);

    // 2. Add it all in one transaction.
    ImportCounts n;
    Txn t(db_, path_, write_timeout_ms());
    for (const auto& w : ws) {
        upsert_workload(w);
        ++n.workloads;
    }
    for (const auto& c : cs) {
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM compute_profile WHERE workload = ? AND host = ? AND local_batch = ? AND "
               "threads = ? AND seconds_per_iter = ? AND iters = ? AND created = ? AND ranks = ? AND hardware_class = ? AND ranks_per_node = ?");
        q.bind_all(c.s.workload, c.s.host, c.s.local_batch, c.s.threads, c.s.seconds_per_iter, c.s.iters, c.created,
                   c.s.ranks, c.s.hardware_class, c.s.ranks_per_node);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        Stmt s(db_, path_,
               "INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, created, "
               "ranks, startup_seconds, synced_seconds_per_iter, hardware_class, ranks_per_node, job_id) "
               "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        s.bind_all(c.s.workload, c.s.host, c.s.local_batch, c.s.threads, c.s.seconds_per_iter, c.s.iters, c.created,
                   c.s.ranks);
        s.bind(11, c.s.hardware_class);
        s.bind(12, c.s.ranks_per_node);
        s.bind(13, c.s.job_id);
        if (std::isfinite(c.s.startup_seconds)) s.bind(9, c.s.startup_seconds);
        if (std::isfinite(c.s.synced_seconds_per_iter)) s.bind(10, c.s.synced_seconds_per_iter);
        s.run();
        ++n.compute;
    }
    for (const auto& a : as) {
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM allreduce_profile WHERE host = ? AND nodes = ? AND bytes = ? AND seconds = ? AND "
               "created = ? AND hardware_class = ? AND ranks_per_node = ?");
        q.bind_all(a.s.host, a.s.nodes, a.s.bytes, a.s.seconds, a.created, a.s.hardware_class, a.s.ranks_per_node);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        Stmt s(db_, path_,
               "INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created, hardware_class, ranks_per_node) "
               "VALUES(?, ?, ?, ?, ?, ?, ?)");
        s.bind_all(a.s.host, a.s.nodes, a.s.bytes, a.s.seconds, a.created, a.s.hardware_class, a.s.ranks_per_node);
        s.run();
        ++n.allreduce;
    }
    for (const auto& x : rs) {
        const RunRecord& r = x.r;
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM run WHERE job_id = ? AND workload = ? AND nodes = ? AND global_batch = ? AND "
               "epochs = ? AND measured_seconds = ? AND created = ? AND ranks_per_node = ? AND hardware_class = ? AND "
               "parts = ?");
        q.bind_all(r.job_id, r.workload, r.nodes, r.global_batch, r.epochs, r.measured_seconds, r.created,
                   r.ranks_per_node, r.hardware_class, r.parts);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        insert_run_row(db_, path_, r);
        const int64_t id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
        for (size_t k = 0; k < x.seconds.size(); ++k) {
            Stmt e(db_, path_,
                   "INSERT INTO run_epoch(run_id, epoch, seconds, train_loss, test_accuracy) VALUES(?, ?, ?, ?, ?)");
            e.bind(1, id);
            e.bind(2, static_cast<int>(k + 1));
            const double v[3] = {x.seconds[k], x.loss[k], x.acc[k]};
            for (int c = 0; c < 3; ++c) {
                if (std::isnan(v[c])) e.bind_null(3 + c);
                else e.bind(3 + c, v[c]);
            }
            e.run();
        }
        ++n.runs;
    }
    t.commit();
    return n;
}

ProfileDb::PruneCounts ProfileDb::prune(double before, const std::string& workload, int above_nodes) {
    if (!(before > 0) && workload.empty() && above_nodes <= 0)
        throw Error("profile database " + path_ +
                    ": prune needs an age limit, a workload or a node count (refusing to remove every row)");
    PruneCounts n;
    Txn t(db_, path_, write_timeout_ms());
    // " AND ..." of the filters for a table whose node condition is `nodes_sql` (with one ? for
    // above_nodes; "" = none), and their binding from parameter 1.
    auto where = [&](bool by_workload, const char* nodes_sql) {
        std::string sql;
        if (before > 0) sql += " AND created < ?";
        if (by_workload) sql += " AND workload = ?";
        if (above_nodes > 0 && *nodes_sql) sql += std::string(" AND ") + nodes_sql;
        return sql;
    };
    auto bind = [&](Stmt& s, bool by_workload, const char* nodes_sql) {
        int i = 1;
        if (before > 0) s.bind(i++, before);
        if (by_workload) s.bind(i++, workload);
        if (above_nodes > 0 && *nodes_sql) s.bind(i++, static_cast<int64_t>(above_nodes));
    };
    // Deletes from `table` with the filters; returns the number of rows removed.
    auto remove = [&](const char* table, bool by_workload, const char* nodes_sql) -> size_t {
        Stmt s(db_, path_, (std::string("DELETE FROM ") + table + " WHERE 1" + where(by_workload, nodes_sql)).c_str());
        bind(s, by_workload, nodes_sql);
        s.run();
        return static_cast<size_t>(sqlite3_changes(db_));
    };
    const bool by_workload = !workload.empty();
    n.compute = remove("compute_profile", by_workload, "ranks > ? * ranks_per_node");
    if (!by_workload) n.allreduce = remove("allreduce_profile", false, "nodes > ?");
    {
        // Per-epoch rows of the runs about to go (foreign keys may be off on this connection).
        Stmt s(db_, path_,
               ("DELETE FROM run_epoch WHERE run_id IN (SELECT id FROM run WHERE 1" + where(by_workload, "nodes > ?") + ")")
                   .c_str());
        bind(s, by_workload, "nodes > ?");
        s.run();
    }
    n.runs = remove("run", by_workload, "nodes > ?");
    {
        // Workload rows left without any compute sample or run.
        std::string sql =
            "DELETE FROM workload WHERE NOT EXISTS (SELECT 1 FROM compute_profile c WHERE c.workload = workload.name) "
            "AND NOT EXISTS (SELECT 1 FROM run r WHERE r.workload = workload.name)";
        if (before > 0) sql += " AND updated < ?";
        if (!workload.empty()) sql += " AND name = ?";
        Stmt s(db_, path_, sql.c_str());
        int i = 1;
        if (before > 0) s.bind(i++, before);
        if (!workload.empty()) s.bind(i++, workload);
        s.run();
        n.workloads = static_cast<size_t>(sqlite3_changes(db_));
    }
    t.commit();
    return n;
}

}  // namespace tula
