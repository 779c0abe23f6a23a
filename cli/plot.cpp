// tula CLI: `tula plot` -- a PNG (or SVG) of the plan: predicted training time and cost vs
// global batch, one curve per node count, the time/cost Pareto front and the chosen candidate
// marked, and where the time of a step goes on the Pareto front (tula(1), "tula plot").
//
// The plan itself comes from `tula plan --format json` run as a child of this same program
// (/proc/self/exe), so the options (--workload, --script, --epochs, --batch-size, --fixed-epochs,
// --max-nodes, --nodes, --policy, --conf, --db) mean exactly what they mean for `tula plan`,
// and its errors are its own one-line `tula:` messages. The figure is drawn by gnuplot (Debian
// gnuplot-nox), run as a child process on a data file and a script in a temporary directory.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "format.hpp"
#include "process.hpp"
#include "tula/error.hpp"

namespace tula::cli {
namespace {

constexpr size_t kMaxPlanJsonBytes = size_t(64) << 20;

struct PlotOptions : TargetOptions {
    CommonOptions common;
    std::string policy = "auto";
    std::string output = "tula-plan.png";
    bool svg = false;
    int width = 1200;   // pixels
    int height = 500;   // pixels
};

// Writes `text` to `path`. Errors: tula::Error naming the path.
void write_text(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

// `s` as a single-quoted gnuplot string ('' stands for one quote).
std::string gp_quote(const std::string& s) {
    std::string o = "'";
    for (char c : s) {
        if (c == '\'') o += "''";
        else if (c == '\n' || c == '\r') o += ' ';
        else o += c;
    }
    return o + "'";
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One candidate of the plan's JSON.
struct Point {
    std::string partition;  // "" without partition sections
    int nodes = 0;
    int global_batch = 0;
    double seconds = 0;  // predicted training seconds
    double cost = 0;     // node-hours x price
    bool pareto = false;
    bool chosen = false;
    // the step's parts (the plan's step_seconds), seconds; NaN when the plan has none
    double compute = NAN, exposed_comm = NAN, overhead = NAN;
};

// The candidates of `tula plan --format json` output. Errors: tula::Error for output that is
// not a plan (should not happen; names what was missing).
std::vector<Point> read_points(const Json& plan) {
    const auto it = plan.find("candidates");
    if (it == plan.end() || !it->is_array() || it->empty()) throw Error("the plan has no candidates to plot");
    std::vector<Point> pts;
    for (const auto& c : *it) {
        Point p;
        p.nodes = c.at("nodes").get<int>();
        p.partition = c.value("partition", std::string());
        p.global_batch = c.at("global_batch").get<int>();
        // time and cost of the epochs each candidate trains: what the Pareto front and the
        // policies are about (a plan from before they existed has only the requested epochs' figures)
        p.seconds = c.contains("time_to_target_seconds") ? c.at("time_to_target_seconds").get<double>()
                                                         : c.at("total_seconds").get<double>();
        p.cost = c.contains("cost_to_target") ? c.at("cost_to_target").get<double>() : c.at("cost").get<double>();
        p.pareto = c.at("pareto").get<bool>();
        p.chosen = c.value("chosen", false);
        if (auto st = c.find("step_seconds"); st != c.end() && st->is_object()) {
            p.compute = st->value("compute", NAN);
            p.exposed_comm = st->value("exposed_communication", NAN);
            p.overhead = st->value("overhead", NAN);
        }
        if (!std::isfinite(p.seconds) || !std::isfinite(p.cost)) continue;
        pts.push_back(p);
    }
    if (pts.empty()) throw Error("the plan has no candidate with a finite prediction to plot");
    return pts;
}

// The data file: one block per (partition, node count) (gnuplot `index`), then the Pareto front
// sorted by time, then the chosen point (columns: global_batch seconds cost), then the step's
// parts of the Pareto front's candidates in the same order (columns: compute, exposed
// communication and overhead in milliseconds per step, then a label "K x B" or "p:K x B").
// `labels` gets each block's title ("2 nodes", "2 nodes of gpu").
std::string data_file(const std::vector<Point>& pts, std::vector<std::string>* labels) {
    std::map<std::pair<std::string, int>, std::vector<const Point*>> by_nodes;
    for (const auto& p : pts) by_nodes[{p.partition, p.nodes}].push_back(&p);
    std::string d;
    char line[128];
    for (const auto& [key, v] : by_nodes) {
        const std::string label = nodes_phrase(key.second) + (key.first.empty() ? "" : " of " + key.first);
        labels->push_back(label);
        d += "# " + label + "\n";
        for (const Point* p : v) {
            std::snprintf(line, sizeof line, "%d %.9g %.9g\n", p->global_batch, p->seconds, p->cost);
            d += line;
        }
        d += "\n\n";
    }
    std::vector<const Point*> front;
    for (const auto& p : pts)
        if (p.pareto) front.push_back(&p);
    std::sort(front.begin(), front.end(), [](const Point* a, const Point* b) { return a->seconds < b->seconds; });
    d += "# Pareto front\n";
    for (const Point* p : front) {
        std::snprintf(line, sizeof line, "%d %.9g %.9g\n", p->global_batch, p->seconds, p->cost);
        d += line;
    }
    if (front.empty()) d += "NaN NaN NaN\n";
    d += "\n\n# chosen\n";
    bool any = false;
    for (const auto& p : pts)
        if (p.chosen) {
            std::snprintf(line, sizeof line, "%d %.9g %.9g\n", p.global_batch, p.seconds, p.cost);
            d += line;
            any = true;
        }
    if (!any) d += "NaN NaN NaN\n";
    d += "\n\n# step parts of the Pareto front (ms)\n";
    bool parts = false;
    for (const Point* p : front) {
        if (!std::isfinite(p->compute) || !std::isfinite(p->exposed_comm) || !std::isfinite(p->overhead)) continue;
        const std::string label = (p->partition.empty() ? "" : p->partition + ":") + std::to_string(p->nodes) + "x" +
                                  std::to_string(p->global_batch);
        std::snprintf(line, sizeof line, "%.9g %.9g %.9g \"%s\"\n", 1e3 * p->compute, 1e3 * p->exposed_comm,
                      1e3 * p->overhead, label.substr(0, 60).c_str());
        d += line;
        parts = true;
    }
    if (!parts) d += "NaN NaN NaN \"-\"\n";
    return d;
}

// The gnuplot script: two panels (time, cost) over a log2 global-batch axis.
std::string gnuplot_script(const PlotOptions& o, bool svg, const std::string& data, const std::string& out,
                           const std::vector<std::string>& node_counts, const Json& plan) {
    const std::string workload = plan.value("workload", std::string("?"));
    const std::string policy = plan.value("policy", std::string("auto"));
    const int epochs = plan.value("epochs", 0);
    std::string chosen;
    if (auto c = plan.find("choice"); c != plan.end() && c->is_object())
        chosen = nodes_phrase(c->value("nodes", 0)) +
                 (c->value("partition", std::string()).empty() ? "" : " of " + c->value("partition", std::string())) +
                 " x global batch " + std::to_string(c->value("global_batch", 0));
    const double price = plan.value("price_per_node_hour", 1.0);
    std::string s;
    s += "set encoding utf8\n";
    s += svg ? "set terminal svg size " + std::to_string(o.width) + "," + std::to_string(o.height) +
                   " dynamic enhanced font 'sans,11' background rgb 'white'\n"
             : "set terminal pngcairo size " + std::to_string(o.width) + "," + std::to_string(o.height) +
                   " enhanced font 'sans,10'\n";
    s += "set output " + gp_quote(out) + "\n";
    s += "set multiplot layout 1,3 title " +
         gp_quote(workload + ", " + std::to_string(epochs) + " epochs, policy " + policy +
                  (chosen.empty() ? "" : "; chosen: " + chosen)) +
         " noenhanced\n";
    s += "set logscale x 2\nset grid\nset key top right noenhanced\nset xlabel 'global batch (examples per step)'\n";
    auto panel = [&](int col, const std::string& ylabel) {
        s += "set ylabel " + gp_quote(ylabel) + "\n";
        s += "plot ";
        for (size_t i = 0; i < node_counts.size(); ++i)
            s += gp_quote(data) + " index " + std::to_string(i) + " using 1:" + std::to_string(col) +
                 " with linespoints pt 7 ps 0.6 title " + gp_quote(node_counts[i]) + ", \\\n     ";
        s += gp_quote(data) + " index " + std::to_string(node_counts.size()) + " using 1:" + std::to_string(col) +
             " with points pt 6 ps 1.8 lw 2 lc rgb 'black' title 'Pareto front (time, cost)', \\\n     ";
        s += gp_quote(data) + " index " + std::to_string(node_counts.size() + 1) + " using 1:" + std::to_string(col) +
             " with points pt 3 ps 3.5 lw 3 lc rgb 'red' title " + gp_quote("chosen (" + policy + ")") + "\n";
    };
    panel(2, "predicted time to target (s)");
    panel(3, "predicted cost to target (node-hours x " + format_number("%g", price) + ")");
    // where a step's time goes, per Pareto-front candidate (fastest first), stacked
    s += "unset logscale x\nset xlabel 'Pareto front: nodes x global batch (fastest first)'\n";
    s += "set ylabel 'predicted seconds per step (ms)'\nset xtics rotate by -45 noenhanced\nset yrange [0:*]\n";
    s += "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n";
    s += "set boxwidth 0.7\nset key top left noenhanced\n";
    const std::string parts = gp_quote(data) + " index " + std::to_string(node_counts.size() + 2);
    s += "plot " + parts + " using 1:xtic(4) title 'compute', \\\n     " + parts +
         " using 2 title 'exposed communication', \\\n     " + parts + " using 3 title 'overhead (start-up, evaluation)'\n";
    s += "unset multiplot\nset output\n";
    return s;
}

// Runs `tula plan --format json` with the plot's options; returns its parsed output. The
// child's own error message (one `tula:` line) has already gone to stderr when it fails;
// `*status` is then its exit status.
std::optional<Json> run_plan_child(const PlotOptions& o, TempDir& tmp, int* status) {
    std::vector<std::string> argv = {"/proc/self/exe", "plan", "--format", "json"};
    auto add = [&](const char* opt, const std::string& v) {
        argv.push_back(opt);
        argv.push_back(v);
    };
    if (!o.common.conf.empty()) add("--conf", o.common.conf);
    for (const auto& d : o.common.dbs) add("--db", d);
    if (!o.workload.empty()) add("--workload", o.workload);
    if (!o.script.empty()) add("--script", o.script);
    if (o.epochs > 0) add("--epochs", std::to_string(o.epochs));
    if (o.batch_size > 0) add("--batch-size", std::to_string(o.batch_size));
    if (o.fixed_epochs) argv.push_back("--fixed-epochs");
    if (o.max_nodes > 0) add("--max-nodes", std::to_string(o.max_nodes));
    if (o.nodes > 0) add("--nodes", std::to_string(o.nodes));
    add("--policy", o.policy);
    const std::string out = tmp.add("plan.json");
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw Error("cannot write " + out + ": " + std::strerror(errno));
    std::string err;
    const pid_t pid = start_process(argv, {}, fd, -1, &err);
    ::close(fd);
    if (pid < 0) throw Error(err);
    ProcessResult r;
    wait_process(pid, true, &r);
    if (!r.ok()) {
        *status = r.exit_code == kExitUsage ? kExitUsage : kExitError;
        if (r.signal != 0) print_error("planning " + describe_result(r, "tula plan"));
        return std::nullopt;
    }
    try {
        return Json::parse(read_text_file(out, kMaxPlanJsonBytes));
    } catch (const Json::exception& e) {
        throw Error(std::string("cannot read the plan: ") + e.what());
    }
}

int run_plot(const PlotOptions& o) {
    if (o.workload.empty() && o.script.empty())
        throw UsageError("give --workload MODEL@DATASET or --script PATH (or both)");
    if (o.output.empty()) throw UsageError("-o: the output path is empty");
    const bool svg = o.svg || ends_with(o.output, ".svg") || ends_with(o.output, ".SVG");
    const std::optional<std::string> gnuplot = find_in_path("gnuplot");
    if (!gnuplot)
        throw Error("gnuplot is not installed (not found in PATH); install it (Debian: apt-get install gnuplot-nox) "
                    "or use `tula plan --format json` for the numbers");
    TempDir tmp("", "tula-plot");
    int status = kExitError;
    const std::optional<Json> plan = run_plan_child(o, tmp, &status);
    if (!plan) return status;
    if (auto w = plan->find("warnings"); w != plan->end() && w->is_array())
        for (const auto& x : *w)
            if (x.is_string()) print_warning(x.get<std::string>());
    std::vector<Point> pts;
    try {
        pts = read_points(*plan);
    } catch (const Json::exception& e) {
        throw Error(std::string("cannot read the plan: ") + e.what());
    }
    std::vector<std::string> node_counts;  // the blocks' titles
    const std::string data = tmp.add("plan.dat");
    write_text(data, data_file(pts, &node_counts));
    const std::string image = tmp.add(svg ? "plot.svg" : "plot.png");
    const std::string script = tmp.add("plot.gp");
    write_text(script, gnuplot_script(o, svg, data, image, node_counts, *plan));

    const std::string log = tmp.add("gnuplot.log");
    const int lfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (lfd < 0) throw Error("cannot write " + log + ": " + std::strerror(errno));
    std::string err;
    const pid_t pid = start_process({*gnuplot, script}, {}, lfd, lfd, &err);
    ::close(lfd);
    if (pid < 0) throw Error(err);
    ProcessResult r;
    wait_process(pid, true, &r);
    struct stat st;
    if (!r.ok() || ::stat(image.c_str(), &st) != 0 || st.st_size == 0) {
        std::string first;
        try {
            first = one_line(read_text_file(log, 4096), 300);
        } catch (const std::exception&) {
        }
        throw Error("gnuplot " + (r.ok() ? std::string("wrote no image") : describe_result(r, "gnuplot")) +
                    (first.empty() ? "" : ": " + first));
    }
    // Copy into place through a temporary name next to the output, then rename.
    const std::string bytes = read_text_file(image, size_t(256) << 20);
    const std::string part = o.output + ".part" + std::to_string(::getpid());
    try {
        write_text(part, bytes);
    } catch (...) {
        ::unlink(part.c_str());
        throw;
    }
    if (::rename(part.c_str(), o.output.c_str()) != 0) {
        const int e = errno;
        ::unlink(part.c_str());
        throw Error("cannot write " + o.output + ": " + std::strerror(e));
    }
    std::printf("%s\n", o.output.c_str());
    return kExitOk;
}

}  // namespace

void add_plot_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<PlotOptions>();
    CLI::App* sub = app.add_subcommand(
        "plot", "draw the plan (predicted time and cost vs global batch per node count, Pareto front, choice) as PNG or SVG");
    sub->footer(
        "The options are those of tula plan; the plan is computed by it. Needs gnuplot (Debian gnuplot-nox). Prints the "
        "image's path. Exit status: 0 written, 1 error (no profile, gnuplot missing or failing, output not writable), "
        "2 usage error. See tula(1).");
    add_common_options(sub, &o->common, false);
    add_target_options(sub, o.get());
    sub->add_option("--policy", o->policy, "as for tula plan (auto, time, cost, ...)")->capture_default_str();
    sub->add_option("-o,--output", o->output, "image file to write; SVG when it ends in .svg")
        ->type_name("FILE")
        ->capture_default_str();
    sub->add_flag("--svg", o->svg, "write SVG instead of PNG");
    sub->add_option("--size", o->width, "image width in pixels (height is 5/12 of it)")
        ->type_name("PIXELS")
        ->check(CLI::Range(300, 8000))
        ->capture_default_str();
    sub->callback([o, action] {
        o->height = o->width * 5 / 12;
        *action = [o] { return run_plot(*o); };
    });
}

}  // namespace tula::cli
