// tula CLI: `tula db list` and `tula db show WORKLOAD` -- the profile databases, read by
// people; `tula db export`, `tula db import FILE` and `tula db prune` -- sharing profiles
// between sites and removing old ones (tula(1), "tula db").
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <set>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "format.hpp"
#include "metrics_commands.hpp"
#include "tula/error.hpp"
#include "tula/models.hpp"

namespace tula::cli {
namespace {

// M::fit(samples) (ComputeModel, AllreduceModel); empty when there are no samples, or when the
// fit fails, which *error then says.
template <class M, class S>
std::optional<M> fit_if_any(const S& samples, std::string* error) {
    if (samples.empty()) return std::nullopt;
    try {
        return M::fit(samples);
    } catch (const std::exception& e) {
        *error = bare_message(e.what());
        return std::nullopt;
    }
}

struct ListOptions {
    CommonOptions common;
    std::string format = "table";
};

struct ShowOptions {
    CommonOptions common;
    std::string workload;
    std::string format = "table";
};

// What one database holds about each workload.
struct WorkloadCounts {
    std::optional<Workload> row;
    size_t compute = 0;
    int min_batch = 0, max_batch = 0;
    size_t runs = 0;
};

// Per-workload counts of one open database. Errors: tula::Error on a read failure.
std::map<std::string, WorkloadCounts> count_workloads(const ProfileDb& db) {
    std::map<std::string, WorkloadCounts> m;
    for (const auto& w : db.workloads()) m[w.name].row = w;
    for (const auto& c : db.compute_samples("")) {
        WorkloadCounts& wc = m[c.workload];
        ++wc.compute;
        wc.min_batch = wc.min_batch == 0 ? c.local_batch : std::min(wc.min_batch, c.local_batch);
        wc.max_batch = std::max(wc.max_batch, c.local_batch);
    }
    for (const auto& r : db.runs("")) ++m[r.workload].runs;
    return m;
}

// A within-node allreduce sample: R >= 2 ranks on 1 node (IntraNodeModel).
bool within_node(const AllreduceSample& s) { return s.nodes == 1 && s.ranks_per_node >= 2; }

// The node counts of the across-node samples, "2, 3, 4".
std::string node_list(const std::vector<AllreduceSample>& a) {
    std::set<int> nodes;
    for (const auto& s : a)
        if (!within_node(s)) nodes.insert(s.nodes);
    return join_ints(std::vector<int>(nodes.begin(), nodes.end()), ", ");
}

// The ranks per node of the within-node samples, "2, 4".
std::string ranks_list(const std::vector<AllreduceSample>& a) {
    std::set<int> ranks;
    for (const auto& s : a)
        if (within_node(s)) ranks.insert(s.ranks_per_node);
    return join_ints(std::vector<int>(ranks.begin(), ranks.end()), ", ");
}

size_t count_within_node(const std::vector<AllreduceSample>& a) {
    return static_cast<size_t>(std::count_if(a.begin(), a.end(), within_node));
}

// `tula db show`'s within-node part: the samples of R ranks on one node (a table) and the
// bandwidth fitted to them (IntraNodeModel; all classes together), or why there is none.
void print_within_node(const std::vector<AllreduceSample>& within, const std::optional<IntraNodeModel>& im,
                       const std::string& im_error, bool colour) {
    if (!within.empty()) {
        std::printf("\n%s (%zu; all workloads):\n", bold("within-node allreduce samples", colour).c_str(), within.size());
        Table t;
        t.header = {"ranks", "bytes", "seconds", "GB/s", "class", "host"};
        t.right = {true, true, true, true, false, false};
        for (const auto& a : within) {
            const double r = a.ranks_per_node, x = 2.0 * (r - 1.0) / r * static_cast<double>(a.bytes);
            t.rows.push_back({std::to_string(a.ranks_per_node), std::to_string(a.bytes), format_number("%.4g", a.seconds),
                              a.seconds > 0 ? format_number("%.4g", x / a.seconds / 1e9) : "-",
                              a.hardware_class.empty() ? "-" : a.hardware_class, a.host});
        }
        std::fputs(render_table(t).c_str(), stdout);
    }
    if (im)
        std::printf("%s bandwidth = %s GB/s, latency = %s us  (seconds = a + 2(R-1)/R x bytes / bandwidth, %d samples, "
                    "ranks per node %s; the planner takes it over tula.conf's intra_node_bandwidth)\n",
                    bold("within-node model:", colour).c_str(), format_number("%.4g", im->bandwidth / 1e9).c_str(),
                    format_number("%.2f", im->latency * 1e6).c_str(), im->samples, join_ints(im->ranks, ", ").c_str());
    else
        std::printf("%s none (%s)\n", bold("within-node model:", colour).c_str(),
                    within.empty() ? "no within-node samples; tula.conf's intra_node_bandwidth is used; run tula profile "
                                     "allreduce --ranks-per-node R"
                                   : im_error.c_str());
}

// Throws a tula::Error when a database named explicitly with --db does not exist.
void check_explicit(const CommonOptions& c, const std::vector<DbHandle>& dbs) {
    if (c.dbs.empty()) return;
    for (const auto& h : dbs)
        if (h.missing) throw Error("profile database " + h.path + " does not exist");
}

int run_list(const ListOptions& o) {
    const LoadedConfig lc = load_cli_config(o.common);
    std::vector<std::string> warnings;
    const std::vector<DbHandle> dbs = open_read_dbs(read_db_paths(o.common, lc.config, &warnings));
    for (const auto& w : warnings) print_warning(w);
    const bool colour = stdout_colour();
    int status = kExitOk;
    Json out = Json::array();
    for (const auto& h : dbs) {
        Json jd;
        jd["path"] = h.path;
        std::string error = h.error;
        std::map<std::string, WorkloadCounts> counts;
        std::vector<AllreduceSample> allreduce;
        if (h.db) {
            try {
                counts = count_workloads(*h.db);
                allreduce = h.db->allreduce_samples();
            } catch (const std::exception& e) {
                error = one_line(bare_message(e.what()));
            }
        }
        if (!error.empty() || (h.missing && !o.common.dbs.empty())) status = kExitError;
        if (o.format == "json") {
            jd["exists"] = !h.missing;
            if (!error.empty()) jd["error"] = error;
            Json wl = Json::array();
            for (const auto& [name, c] : counts) {
                Json j;
                j["workload"] = name;
                j["params"] = c.row ? Json(c.row->params) : Json(nullptr);
                j["train_examples"] = c.row ? Json(c.row->train_examples) : Json(nullptr);
                j["compute_points"] = c.compute;
                j["runs"] = c.runs;
                wl.push_back(std::move(j));
            }
            jd["workloads"] = std::move(wl);
            jd["allreduce_points"] = allreduce.size();  // within-node ones included
            jd["within_node_points"] = count_within_node(allreduce);
            out.push_back(std::move(jd));
            continue;
        }
        if (h.missing) {
            std::printf("%s: %s\n", bold(h.path, colour).c_str(), "does not exist");
            continue;
        }
        if (!error.empty()) {
            std::printf("%s: cannot read: %s\n", bold(h.path, colour).c_str(), error.c_str());
            continue;
        }
        std::printf("%s:\n", bold(h.path, colour).c_str());
        if (counts.empty()) {
            std::printf("  no workloads\n");
        } else {
            Table t;
            t.header = {"workload", "params", "train examples", "compute points", "local batches", "runs"};
            t.right = {false, true, true, true, true, true};
            for (const auto& [name, c] : counts)
                t.rows.push_back({name, c.row ? std::to_string(c.row->params) : "-",
                                  c.row ? std::to_string(c.row->train_examples) : "-", std::to_string(c.compute),
                                  c.compute ? std::to_string(c.min_batch) + ".." + std::to_string(c.max_batch) : "-",
                                  std::to_string(c.runs)});
            std::fputs(render_table(t).c_str(), stdout);
        }
        const size_t within = count_within_node(allreduce);
        std::printf("  allreduce points: %zu%s\n", allreduce.size() - within,
                    allreduce.size() == within ? "" : (" (nodes " + node_list(allreduce) + ")").c_str());
        std::printf("  within-node allreduce points: %zu%s\n", within,
                    within == 0 ? "" : (" (ranks per node " + ranks_list(allreduce) + ")").c_str());
    }
    if (o.format == "json") std::printf("%s\n", out.dump(2).c_str());
    if (status != kExitOk)
        for (const auto& h : dbs) {
            if (!h.error.empty()) print_error("cannot read " + h.path + ": " + h.error);
            else if (h.missing && !o.common.dbs.empty()) print_error("profile database " + h.path + " does not exist");
        }
    return status;
}

// What `tula db show` shows of a workload: its row, samples and runs from every database, and
// the models fitted to them (each with the reason it could not be fitted).
struct ShowData {
    std::optional<Workload> row;
    std::vector<std::pair<ComputeSample, std::string>> compute;  // sample, database
    std::vector<AllreduceSample> allreduce;
    std::vector<std::pair<RunRecord, std::string>> runs;         // newest first
    std::vector<AllreduceSample> within;                         // the within-node samples
    std::string cm_error, am_error, im_error;
    std::optional<ComputeModel> cm;
    std::optional<AllreduceModel> am;
    std::optional<IntraNodeModel> im;
};

// Reads and fits what `tula db show` shows (warnings printed). Errors: tula::Error when no
// database has a profile or run of the workload.
ShowData read_show(const ShowOptions& o) {
    ShowData d;
    std::optional<Workload>& row = d.row;
    auto& compute = d.compute;
    auto& allreduce = d.allreduce;
    auto& runs = d.runs;
    if (!valid_workload_name(o.workload))
        throw UsageError("'" + one_line(o.workload, 80) + "' is not a workload name of the form MODEL@DATASET");
    const LoadedConfig lc = load_cli_config(o.common);
    std::vector<std::string> warnings;
    const std::vector<DbHandle> dbs = open_read_dbs(read_db_paths(o.common, lc.config, &warnings));
    check_explicit(o.common, dbs);

    for (const auto& h : dbs) {
        if (!h.error.empty()) warnings.push_back("skipping " + h.path + ": " + h.error);
        if (!h.db) continue;
        try {
            if (auto w = h.db->workload(o.workload)) row = w;  // a later database overrides
            for (auto& c : h.db->compute_samples(o.workload)) compute.emplace_back(c, h.path);
            for (auto& a : h.db->allreduce_samples()) allreduce.push_back(a);
            for (auto& r : h.db->runs(o.workload)) runs.emplace_back(r, h.path);
        } catch (const std::exception& e) {
            warnings.push_back("skipping " + h.path + ": " + one_line(bare_message(e.what())));
        }
    }
    for (const auto& w : warnings) print_warning(w);
    if (!row && compute.empty() && runs.empty()) {
        std::string where;
        for (const auto& h : dbs) where += (where.empty() ? "" : ", ") + h.path;
        throw Error("no profile or run of workload " + o.workload + " in " + (where.empty() ? "any database" : where) +
                    "; run `tula profile compute --workload " + o.workload + "`");
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first.created > b.first.created; });

    std::vector<ComputeSample> samples;
    for (const auto& c : compute) samples.push_back(c.first);
    d.cm = fit_if_any<ComputeModel>(samples, &d.cm_error);
    d.am = fit_if_any<AllreduceModel>(allreduce, &d.am_error);
    for (const auto& a : allreduce)
        if (within_node(a)) d.within.push_back(a);
    d.im = fit_if_any<IntraNodeModel>(d.within, &d.im_error);
    return d;
}

// `tula db show --format json`.
void print_show_json(const ShowOptions& o, const ShowData& d) {
    const auto& [row, compute, allreduce, runs, within, cm_error, am_error, im_error, cm, am, im] = d;
    Json j;
    j["workload"] = o.workload;
    if (row) {
        j["model"] = row->model;
        j["dataset"] = row->dataset;
        j["params"] = row->params;
        j["train_examples"] = row->train_examples;
        j["test_examples"] = row->test_examples;
    }
    Json cs = Json::array();
    for (const auto& [c, path] : compute) {
        Json x;
        x["local_batch"] = c.local_batch;
        x["ranks"] = c.ranks;
        x["ranks_per_node"] = c.ranks_per_node;
        x["hardware_class"] = c.hardware_class;  // "" = unknown
        x["startup_seconds"] = std::isfinite(c.startup_seconds) ? Json(c.startup_seconds) : Json(nullptr);
        x["seconds_per_iter"] = c.seconds_per_iter;
        x["synced_seconds_per_iter"] =
            std::isfinite(c.synced_seconds_per_iter) ? Json(c.synced_seconds_per_iter) : Json(nullptr);
        x["iters"] = c.iters;
        x["threads"] = c.threads;
        x["host"] = c.host;
        x["database"] = path;
        cs.push_back(std::move(x));
    }
    j["compute_samples"] = std::move(cs);
    if (cm) j["compute_model"] = {{"t0_seconds", cm->t0}, {"t1_seconds_per_example", cm->t1},
                                  {"min_batch", cm->min_batch}, {"max_batch", cm->max_batch},
                                  {"rmse_seconds", cm->rmse}};
    else j["compute_model"] = nullptr;
    if (cm) {
        Json cf = Json::object();  // ranks at once -> [[local batch, factor], ...]
        for (const auto& [k, knots] : cm->concurrent) cf[std::to_string(k)] = knots;
        j["compute_model"]["concurrency_factors"] = std::move(cf);
        j["compute_model"]["startup_seconds"] = cm->startup_knots;  // [[local batch, seconds], ...]
    }
    if (!cm_error.empty()) j["compute_model_error"] = cm_error;
    if (am) j["allreduce_model"] = {{"alpha_seconds", am->alpha}, {"beta_seconds_per_byte", am->beta},
                                    {"rmse_seconds", am->rmse}, {"samples", am->samples}, {"note", am->note}};
    else j["allreduce_model"] = nullptr;
    if (!am_error.empty()) j["allreduce_model_error"] = am_error;
    Json ws = Json::array();
    for (const auto& a : within)
        ws.push_back({{"ranks_per_node", a.ranks_per_node}, {"bytes", a.bytes}, {"seconds", a.seconds},
                      {"hardware_class", a.hardware_class}, {"host", a.host}});
    j["within_node_samples"] = std::move(ws);
    if (im) j["within_node_model"] = {{"bandwidth_bytes_per_second", im->bandwidth}, {"latency_seconds", im->latency},
                                      {"rmse_seconds", im->rmse}, {"samples", im->samples}, {"ranks_per_node", im->ranks}};
    else j["within_node_model"] = nullptr;
    if (!im_error.empty()) j["within_node_model_error"] = im_error;
    Json rs = Json::array();
    for (const auto& [r, path] : runs) {
        Json x = run_json(r);
        x["database"] = path;
        rs.push_back(std::move(x));
    }
    j["runs"] = std::move(rs);
    std::printf("%s\n", j.dump(2).c_str());
}

// " in N parts (A + B s)" after a run's measured seconds when it trained in several parts
// (stopped and resumed; the seconds of each part when known), else "".
std::string parts_note(const RunRecord& r) {
    if (r.parts <= 1) return "";
    std::string n = " in " + std::to_string(r.parts) + " parts";
    if (r.part_seconds.size() != static_cast<size_t>(r.parts)) return n;
    n += " (";
    for (size_t i = 0; i < r.part_seconds.size(); ++i) n += (i ? " + " : "") + format_number("%.1f", r.part_seconds[i]);
    return n + " s)";
}

// `tula db show` as text: the workload row, then its samples, models and runs as tables.
void print_show_text(const ShowOptions& o, const ShowData& d) {
    const auto& [row, compute, allreduce, runs, within, cm_error, am_error, im_error, cm, am, im] = d;
    const bool colour = stdout_colour();
    if (row)
        std::printf("%s: model %s, data set %s, %lld parameters (%s of float32 gradients), %lld training / %lld test "
                    "examples\n",
                    bold(o.workload, colour).c_str(), row->model.c_str(), row->dataset.c_str(),
                    static_cast<long long>(row->params), format_number("%.3g MB", 4.0 * row->params / 1e6).c_str(),
                    static_cast<long long>(row->train_examples), static_cast<long long>(row->test_examples));
    else
        std::printf("%s: (no workload row: parameter and example counts unknown)\n", bold(o.workload, colour).c_str());

    std::printf("\n%s (%zu):\n", bold("compute samples", colour).c_str(), compute.size());
    if (!compute.empty()) {
        Table t;
        t.header = {"local batch", "ranks", "ms/iter", "fit ms/iter", "synced ms/iter", "images/s", "iters", "start-up s",
                    "threads", "class", "host", "database"};
        t.right = {true, true, true, true, true, true, true, true, true, false, false, false};
        for (const auto& [c, path] : compute)
            t.rows.push_back({std::to_string(c.local_batch),
                              std::to_string(c.ranks) +
                                  (c.ranks_per_node > 1 ? " (" + std::to_string(c.ranks_per_node) + "/node)" : ""),
                              format_number("%.3f", c.seconds_per_iter * 1e3),
                              cm ? format_number("%.3f", cm->seconds_per_iter(c.local_batch) *
                                                             cm->concurrency_at(c.ranks / c.ranks_per_node,
                                                                                c.ranks_per_node, c.local_batch) *
                                                             1e3)
                                 : "-",
                              std::isfinite(c.synced_seconds_per_iter)
                                  ? format_number("%.3f", c.synced_seconds_per_iter * 1e3)
                                  : "-",
                              c.seconds_per_iter > 0 ? format_number("%.0f", c.local_batch / c.seconds_per_iter) : "-",
                              std::to_string(c.iters),
                              std::isfinite(c.startup_seconds) ? format_number("%.3f", c.startup_seconds) : "-",
                              std::to_string(c.threads), c.hardware_class.empty() ? "-" : c.hardware_class, c.host,
                              path});
        std::fputs(render_table(t).c_str(), stdout);
    }
    if (cm)
        std::printf("%s t(b) = %s ms + %s ms x b  (least squares over local batch %d..%d, rmse %s ms)\n",
                    bold("compute model:", colour).c_str(), format_number("%.3f", cm->t0 * 1e3).c_str(),
                    format_number("%.4f", cm->t1 * 1e3).c_str(), cm->min_batch, cm->max_batch,
                    format_number("%.3f", cm->rmse * 1e3).c_str());
    if (cm)
        for (const auto& l : compute_extra_lines(*cm)) std::printf("  %s\n", l.c_str());
    if (!cm)
        std::printf("%s none (%s)\n", bold("compute model:", colour).c_str(),
                    cm_error.empty() ? "no compute samples; run tula profile compute" : cm_error.c_str());
    if (am)
        std::printf("%s alpha = %s us per step, beta = %s ns per byte  (%d samples fitted of %zu across nodes, "
                    "nodes %s; all workloads)\n",
                    bold("allreduce model:", colour).c_str(), format_number("%.2f", am->alpha * 1e6).c_str(),
                    format_number("%.4f", am->beta * 1e9).c_str(), am->samples, allreduce.size() - within.size(),
                    node_list(allreduce).c_str());
    if (am && !am->note.empty()) std::printf("                 %s\n", am->note.c_str());
    if (am && !am->measured.empty()) {
        std::printf("                 nodes %s: predicted from their own measurements, interpolated between message sizes\n",
                    am->measured_nodes().c_str());
    }
    if (!am)
        std::printf("%s none (%s)\n", bold("allreduce model:", colour).c_str(),
                    am_error.empty() ? "no allreduce samples; run tula profile allreduce" : am_error.c_str());
    print_within_node(within, im, im_error, colour);

    std::printf("\n%s (%zu):\n", bold("runs", colour).c_str(), runs.size());
    if (!runs.empty()) {
        Table t;
        t.header = {"job", "finished", "nodes", "class", "global batch", "epochs", "predicted", "measured", "error",
                    "test accuracy"};
        t.right = {false, false, true, false, true, true, true, true, true, true};
        for (const auto& [r, path] : runs) {
            const auto e = error_percent(r.measured_seconds, r.predicted_seconds);
            t.rows.push_back({r.job_id.empty() ? "-" : r.job_id, format_time(r.created),
                              std::to_string(r.nodes) +
                                  (r.ranks_per_node > 1 ? " x " + std::to_string(r.ranks_per_node) + " ranks" : ""),
                              r.hardware_class.empty() ? "-" : r.hardware_class,
                              std::to_string(r.global_batch), std::to_string(r.epochs),
                              r.predicted_seconds > 0 ? format_number("%.1f s", r.predicted_seconds) : "-",
                              format_number("%.1f s", r.measured_seconds) + parts_note(r),
                              e ? format_number("%+.1f %%", *e) : "-",
                              r.test_accuracy > 0 ? format_number("%.2f %%", r.test_accuracy * 100) : "-"});  // 0: not measured
        }
        std::fputs(render_table(t).c_str(), stdout);
    }
}

int run_show(const ShowOptions& o) {
    const ShowData d = read_show(o);
    if (o.format == "json") print_show_json(o, d);
    else print_show_text(o, d);
    return kExitOk;
}

struct ExportOptions {
    CommonOptions common;
    std::string workload;
    std::string output;  // "" or "-": standard output
};

struct ImportOptions {
    CommonOptions common;
    std::string file;
};

struct PruneOptions {
    CommonOptions common;
    double older_than_days = 0;  // 0: no age limit
    std::string workload;
    int nodes_above = 0;  // 0: any node count
};

constexpr size_t kMaxImportBytes = size_t(256) << 20;  // 256 MiB

// Writes `text` to `path` through a temporary file renamed into place. Errors: tula::Error.
void write_file_atomic(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
    size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw Error("cannot write " + path + ": " + std::strerror(e));
        }
        off += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        throw Error("cannot write " + path + ": " + std::strerror(e));
    }
}

// The one database export reads: --db (exactly one), else the user's. Must exist.
int run_export(const ExportOptions& o) {
    if (!o.workload.empty() && !valid_workload_name(o.workload))
        throw UsageError("--workload '" + one_line(o.workload, 80) + "' is not of the form MODEL@DATASET");
    const std::string path = write_db_path(o.common);
    if (!file_exists(path)) throw Error("profile database " + path + " does not exist; name one with --db PATH");
    const ProfileDb db = ProfileDb::open(path, ProfileDb::Mode::ReadOnly);
    const std::string text = db.export_json(o.workload);
    if (o.output.empty() || o.output == "-") {
        std::fputs(text.c_str(), stdout);
        if (std::fflush(stdout) != 0) throw Error(std::string("cannot write the export: ") + std::strerror(errno));
    } else {
        write_file_atomic(o.output, text);
        std::fprintf(stderr, "tula: exported %s%s to %s\n", path.c_str(),
                     o.workload.empty() ? "" : (" (workload " + o.workload + ")").c_str(), o.output.c_str());
    }
    return kExitOk;
}

int run_import(const ImportOptions& o) {
    if (o.file == "-") throw UsageError("give the export file's path (standard input is not read)");
    const std::string text = read_text_file(o.file, kMaxImportBytes + 1);
    if (text.size() > kMaxImportBytes) throw Error(o.file + " is larger than 256 MiB; not a tula profile export");
    const std::string path = write_db_path(o.common);
    ProfileDb db = ProfileDb::open(path, ProfileDb::Mode::ReadWrite);
    const ProfileDb::ImportCounts n = db.import_json(text, o.file);
    std::printf("imported into %s: %zu workload%s, %zu compute sample%s, %zu allreduce sample%s, %zu run%s "
                "(%zu already present, skipped)\n",
                path.c_str(), n.workloads, n.workloads == 1 ? "" : "s", n.compute, n.compute == 1 ? "" : "s",
                n.allreduce, n.allreduce == 1 ? "" : "s", n.runs, n.runs == 1 ? "" : "s", n.skipped);
    return kExitOk;
}

int run_prune(const PruneOptions& o) {
    if (o.older_than_days <= 0 && o.workload.empty() && o.nodes_above <= 0)
        throw UsageError("give --older-than DAYS, --workload W or --nodes-above N (or several)");
    if (!o.workload.empty() && !valid_workload_name(o.workload))
        throw UsageError("--workload '" + one_line(o.workload, 80) + "' is not of the form MODEL@DATASET");
    const std::string path = write_db_path(o.common);
    if (!file_exists(path)) throw Error("profile database " + path + " does not exist; name one with --db PATH");
    ProfileDb db = ProfileDb::open(path, ProfileDb::Mode::ReadWrite);
    const double before = o.older_than_days > 0 ? static_cast<double>(std::time(nullptr)) - o.older_than_days * 86400.0 : 0;
    const ProfileDb::PruneCounts n = db.prune(before, o.workload, o.nodes_above);
    std::printf("removed from %s: %zu row%s (%zu compute sample%s, %zu allreduce sample%s, %zu run%s, %zu workload%s)\n",
                path.c_str(), n.total(), n.total() == 1 ? "" : "s", n.compute, n.compute == 1 ? "" : "s", n.allreduce,
                n.allreduce == 1 ? "" : "s", n.runs, n.runs == 1 ? "" : "s", n.workloads, n.workloads == 1 ? "" : "s");
    return kExitOk;
}

}  // namespace

void add_db_command(CLI::App& app, Action* action) {
    CLI::App* db = app.add_subcommand("db", "show, export, import, record and prune the profile databases");
    db->require_subcommand(1);
    db->footer("See tula(1), \"tula db\" and \"PROFILE DATABASE\".");

    auto l = std::make_shared<ListOptions>();
    CLI::App* list = db->add_subcommand("list", "each database's workloads with their compute points and runs, and its allreduce points");
    list->footer("Exit status: 0, or 1 when a database cannot be read or a --db does not exist.");
    add_common_options(list, &l->common, false);
    add_format_option(list, &l->format, {"table", "json"});
    list->callback([l, action] { *action = [l] { return run_list(*l); }; });

    auto s = std::make_shared<ShowOptions>();
    CLI::App* show = db->add_subcommand("show", "a workload's compute samples, fitted models and runs, over all databases");
    show->footer("Exit status: 0, 1 when no database knows the workload, 2 usage error.");
    add_common_options(show, &s->common, false);
    show->add_option("workload", s->workload, "MODEL@DATASET")->required()->type_name("WORKLOAD");
    add_format_option(show, &s->format, {"table", "json"});
    show->callback([s, action] { *action = [s] { return run_show(*s); }; });

    auto e = std::make_shared<ExportOptions>();
    CLI::App* ex = db->add_subcommand("export", "write one database's profiles and runs as JSON, to share them with another site");
    ex->footer("Reads --db PATH (default: the user's database). Exit status: 0, 1 when the database is missing or "
               "unreadable or the output cannot be written, 2 usage error.");
    add_common_options(ex, &e->common, true);
    ex->add_option("--workload", e->workload, "only this workload's rows (no allreduce samples), MODEL@DATASET")
        ->type_name("W");
    ex->add_option("-o,--output", e->output, "file to write (default: standard output)")->type_name("FILE");
    ex->callback([e, action] { *action = [e] { return run_export(*e); }; });

    auto im = std::make_shared<ImportOptions>();
    CLI::App* imp = db->add_subcommand("import", "add the rows of a `tula db export` file to a database (checked first; all or nothing)");
    imp->footer("Writes --db PATH (default: the user's database). Rows already present are skipped. Exit status: 0, "
                "1 when the file is not a valid export (the message names the row), 2 usage error.");
    add_common_options(imp, &im->common, true);
    imp->add_option("file", im->file, "JSON file written by tula db export")->required()->type_name("FILE");
    imp->callback([im, action] { *action = [im] { return run_import(*im); }; });

    add_db_record_command(db, action);

    auto p = std::make_shared<PruneOptions>();
    CLI::App* pr = db->add_subcommand("prune", "remove old rows, or one workload's rows, and say how many");
    pr->footer("Writes --db PATH (default: the user's database). Give --older-than, --workload, --nodes-above or "
               "several (several: the rows that match all of them). Exit status: 0, 1 when the database is missing "
               "or cannot be written, 2 usage error.");
    add_common_options(pr, &p->common, true);
    pr->add_option("--older-than", p->older_than_days, "remove rows created more than DAYS days ago")
        ->type_name("DAYS")
        ->check(CLI::Range(1e-9, 1e6));
    pr->add_option("--workload", p->workload, "remove only this workload's rows, MODEL@DATASET")->type_name("W");
    pr->add_option("--nodes-above", p->nodes_above,
                   "remove only what was measured on more than N nodes (runs, allreduce samples, compute samples "
                   "timed on more nodes at once)")
        ->type_name("N")
        ->check(CLI::Range(1, 1000000));
    pr->callback([p, action] { *action = [p] { return run_prune(*p); }; });
}

}  // namespace tula::cli
