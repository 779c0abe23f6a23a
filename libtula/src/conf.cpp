// libtula: tula.conf parsing (see conf.hpp and tula.conf(5)).
#include "tula/conf.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "tula/error.hpp"
#include "tula/tula.h"
#include "util.hpp"

namespace tula {
namespace {

constexpr const char* kValidKeys =
    "system_db, admin_uid, price_per_node_hour, gpus_per_node, price_per_gpu_hour, watts_per_node, max_nodes, global_batches, "
    "time_margin, time_overhead, default_epochs, device_memory_bytes, noise_scale, max_accuracy_loss, fixed_epochs, "
    "time_min, queue_estimate, queue_timeout, exclusive";

constexpr const char* kPartitionKeys =
    "nodes, cpus_per_node, gpus_per_node, ranks_per_node, price_per_node_hour, price_per_gpu_hour, watts_per_node, "
    "hardware_class, peak_flops, memory_bandwidth, link_bandwidth, intra_node_bandwidth, exclusive";

// Largest tula.conf load_config reads, bytes. A site configuration is a few hundred bytes.
constexpr size_t kMaxConfigBytes = 1 << 20;

std::string fmt_g(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

// Strips a comment: `#` at the start of the line or after a blank starts one.
std::string strip_comment(const std::string& line) {
    for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) return line.substr(0, i);
    }
    return line;
}

// A Slurm partition or hardware class name: 1..63 of letters, digits, '_', '.', '-'.
bool valid_name(const std::string& s) {
    if (s.empty() || s.size() > 63) return false;
    for (unsigned char c : s)
        if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') return false;
    return true;
}

// A section being read: its partition, the keys it set, where its header was.
struct Section {
    PartitionConf part;
    std::set<std::string> seen;
    int line = 0;
};

// Checks a finished section and resolves its defaults (ranks per node from the GPUs).
void finish_section(Section& sec, const std::string& source, std::vector<PartitionConf>* out) {
    const std::string where = source + " line " + std::to_string(sec.line) + ": [partition " + sec.part.name + "]";
    if (!sec.seen.count("nodes"))
        throw Error(where + " has no nodes; add `nodes = N` (the nodes of the partition Tula may use)");
    if (!sec.seen.count("ranks_per_node")) sec.part.ranks_per_node = sec.part.gpus_per_node > 0 ? sec.part.gpus_per_node : 1;
    if (sec.part.price_per_gpu_hour > 0 && sec.part.gpus_per_node == 0)
        throw Error(where + ": price_per_gpu_hour is set but gpus_per_node is 0; set gpus_per_node to the GPUs of a node");
    out->push_back(sec.part);
}

// One `key = value` line of tula.conf: its key, its value (quotes removed) and the messages of
// its errors, which name the file and the line.
struct KeyLine {
    const std::string& source;
    int lineno;
    std::string key, value;

    Error fail(const std::string& what) const { return Error(source + " line " + std::to_string(lineno) + ": " + what); }
    // A finite number in [lo, hi]; `unit` names it in messages.
    double number(double lo, double hi, const char* unit) const {
        double v = 0;
        if (!detail::parse_finite_double(value, &v)) throw fail(key + " = '" + value + "' is not a number (" + unit + ")");
        if (v < lo || v > hi)
            throw fail(key + " = " + value + " is out of range [" + fmt_g(lo) + ", " + fmt_g(hi) + "] (" + unit + ")");
        return v;
    }
    // An integer in [lo, hi].
    int integer(int64_t lo, int64_t hi, const char* unit) const {
        int64_t v = 0;
        if (!detail::parse_int64(value, &v)) throw fail(key + " = '" + value + "' is not an integer (" + unit + ")");
        if (v < lo || v > hi)
            throw fail(key + " = " + value + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "] (" + unit + ")");
        return static_cast<int>(v);
    }
    // yes or no; `meaning` says what yes does.
    bool yes_no(const char* meaning) const {
        if (value == "yes") return true;
        if (value == "no") return false;
        throw fail(key + " = '" + value + "' is not yes or no (" + meaning + ")");
    }
};

// The keys of the top level (before the first section).
const std::set<std::string> kSiteKeys = {"system_db",   "price_per_node_hour", "max_nodes",
                                         "global_batches", "time_margin",     "time_overhead",
                                         "default_epochs", "device_memory_bytes",  "noise_scale",
                                         "gpus_per_node",  "price_per_gpu_hour", "watts_per_node",
                                         "max_accuracy_loss", "admin_uid", "fixed_epochs",
                                         "time_min", "queue_estimate", "queue_timeout", "exclusive"};

// A `[partition NAME]` header line: a new section, the top-level node description its default.
Section section_header(const std::string& line, const KeyLine& at, const std::vector<Section>& sections,
                       const Config& cfg) {
    const std::string inner = line.back() == ']' ? detail::trim(line.substr(1, line.size() - 2)) : std::string();
    const size_t sp = inner.find_first_of(" \t");
    const std::string kind = inner.substr(0, sp);
    const std::string name = sp == std::string::npos ? std::string() : detail::trim(inner.substr(sp));
    if (line.back() != ']' || kind != "partition" || !valid_name(name))
        throw at.fail("expected a section header `[partition NAME]` (NAME: 1 to 63 letters, digits, '_', '.', '-'), found '" +
                      line.substr(0, 80) + "'");
    for (const Section& o : sections)
        if (o.part.name == name)
            throw at.fail("partition '" + name + "' is described twice (first on line " + std::to_string(o.line) +
                          "); keep one section");
    Section sec;
    sec.line = at.lineno;
    sec.part.name = name;
    sec.part.hardware_class = name;
    sec.part.gpus_per_node = cfg.gpus_per_node;
    sec.part.price_per_node_hour = cfg.price_per_node_hour;
    sec.part.price_per_gpu_hour = cfg.price_per_gpu_hour;
    sec.part.watts_per_node = cfg.watts_per_node;
    sec.part.exclusive = cfg.exclusive;
    return sec;
}

// A key of a [partition] section.
void set_partition_key(Section& sec, const KeyLine& k) {
    PartitionConf& p = sec.part;
    const std::string& key = k.key;
    static const std::set<std::string> kPart = {"nodes", "cpus_per_node", "gpus_per_node", "ranks_per_node",
                                                "price_per_node_hour", "price_per_gpu_hour", "watts_per_node",
                                                "hardware_class", "peak_flops", "memory_bandwidth",
                                                "link_bandwidth", "intra_node_bandwidth", "exclusive"};
    if (!kPart.count(key)) {
        if (kSiteKeys.count(key))
            throw k.fail("'" + key + "' is a site-wide key and belongs before the first [partition] section (keys of a section: " +
                         kPartitionKeys + ")");
        throw k.fail("unknown key '" + key + "' in [partition " + p.name + "] (keys of a section: " + kPartitionKeys + ")");
    }
    if (!sec.seen.insert(key).second) throw k.fail("key '" + key + "' is set twice in [partition " + p.name + "]; keep one");
    if (key == "nodes") p.nodes = k.integer(1, 1000000, "nodes");
    else if (key == "cpus_per_node") p.cpus_per_node = k.integer(1, 1 << 20, "CPUs per node");
    else if (key == "gpus_per_node") p.gpus_per_node = k.integer(0, 1024, "GPUs per node");
    else if (key == "ranks_per_node") p.ranks_per_node = k.integer(1, 1024, "ranks (Slurm tasks) per node");
    else if (key == "price_per_node_hour") p.price_per_node_hour = k.number(0.0, 1e9, "currency units per node-hour");
    else if (key == "price_per_gpu_hour") p.price_per_gpu_hour = k.number(0.0, 1e9, "currency units per GPU-hour");
    else if (key == "watts_per_node") p.watts_per_node = k.number(0.0, 1e7, "watts per node");
    else if (key == "peak_flops") p.peak_flops = k.number(0.0, 1e20, "FLOP/s of one rank's device");
    else if (key == "memory_bandwidth") p.memory_bandwidth = k.number(0.0, 1e16, "bytes/s of one rank's device memory");
    else if (key == "link_bandwidth") p.link_bandwidth = k.number(0.0, 1e16, "bytes/s one node injects into the network");
    else if (key == "intra_node_bandwidth") p.intra_node_bandwidth = k.number(0.0, 1e16, "bytes/s between the ranks of a node");
    else if (key == "exclusive") p.exclusive = k.yes_no("yes: the partition's jobs get whole nodes (sbatch --exclusive)");
    else if (key == "hardware_class") {
        if (!valid_name(k.value))
            throw k.fail("hardware_class = '" + k.value.substr(0, 64) +
                         "' is not a class name (1 to 63 letters, digits, '_', '.', '-'), e.g. h100-sxm");
        p.hardware_class = k.value;
    }
}

// global_batches: a comma list of batch sizes in [1, 2^24], sorted, without repeats.
std::vector<int> batch_list(const KeyLine& k) {
    std::vector<int> list;
    const std::string& value = k.value;
    size_t p = 0;
    while (p <= value.size()) {
        size_t c = value.find(',', p);
        if (c == std::string::npos) c = value.size();
        const std::string item = detail::trim(value.substr(p, c - p));
        int64_t v = 0;
        if (!detail::parse_int64(item, &v) || v < 1 || v > (1 << 24))
            throw k.fail("global_batches: '" + item + "' is not a batch size in [1, 16777216]; write a comma list such as 64,128,256");
        list.push_back(static_cast<int>(v));
        p = c + 1;
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    return list;
}

// device_memory_bytes: an integer with an optional K, M, G or T suffix (powers of 1024), e.g. 16G.
double byte_count(const KeyLine& k) {
    std::string digits = k.value;
    double mult = 1;
    if (!digits.empty()) {
        const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
        const char* units = "KMGT";
        if (const char* q = std::strchr(units, u); q && u != '\0') {
            mult = std::pow(1024.0, static_cast<double>(q - units + 1));
            digits.pop_back();
        }
    }
    int64_t v = 0;
    if (!detail::parse_int64(digits, &v) || v < 0 || v > (int64_t(1) << 50))
        throw k.fail("device_memory_bytes = '" + k.value +
                     "' is not a byte count in [0, 2^50] (write e.g. 17179869184 or 16G; 0 = no limit)");
    const double bytes = static_cast<double>(v) * mult;
    if (bytes > std::pow(2.0, 50)) throw k.fail("device_memory_bytes = " + k.value + " is more than 2^50 bytes");
    return bytes;
}

// A top-level key (the site and its default node description).
void set_site_key(Config& cfg, const KeyLine& k) {
    const std::string& key = k.key;
    const std::string& value = k.value;
    if (key == "system_db") {
        if (value.empty()) throw k.fail("system_db is empty; give the path of the system profile database");
        cfg.system_db = value;
    } else if (key == "admin_uid") {
        // a numeric uid (not a name: the planner must not depend on the name service)
        int64_t v = 0;
        if (!detail::parse_int64(value, &v) || v < 0 || v > 4294967294LL)
            throw k.fail("admin_uid = '" + value +
                         "' is not a numeric user id in [0, 4294967294] (write the uid, e.g. `id -u tulaadm`; 0 = root)");
        cfg.admin_uid = static_cast<uint32_t>(v);
    } else if (key == "price_per_node_hour") {
        cfg.price_per_node_hour = k.number(0.0, 1e9, "currency units per node-hour");
    } else if (key == "gpus_per_node") {
        cfg.gpus_per_node = k.integer(0, 1024, "GPUs per node");
    } else if (key == "price_per_gpu_hour") {
        cfg.price_per_gpu_hour = k.number(0.0, 1e9, "currency units per GPU-hour");
    } else if (key == "watts_per_node") {
        cfg.watts_per_node = k.number(0.0, 1e7, "watts per node");
    } else if (key == "max_nodes") {
        cfg.max_nodes = k.integer(1, 100000, "nodes");
        cfg.max_nodes_set = true;
    } else if (key == "global_batches") {
        cfg.global_batches = batch_list(k);
    } else if (key == "time_margin") {
        cfg.time_margin = k.number(0.0, 100.0, "fraction of the predicted time");
    } else if (key == "time_overhead") {
        cfg.time_overhead = k.number(0.0, 1e7, "seconds");
    } else if (key == "default_epochs") {
        cfg.default_epochs = k.integer(1, 1000000, "epochs");
    } else if (key == "device_memory_bytes") {
        cfg.device_memory_bytes = byte_count(k);
    } else if (key == "noise_scale") {
        cfg.noise_scale = k.number(1e-3, 1e12, "examples");
        if (!(cfg.noise_scale > 0)) throw k.fail("noise_scale must be > 0 (examples)");
    } else if (key == "max_accuracy_loss") {
        cfg.max_accuracy_loss = k.number(0.0, 1.0, "fraction of test accuracy, 0.01 = 1 point");
    } else if (key == "fixed_epochs") {
        cfg.fixed_epochs = k.yes_no("yes: every job trains the epochs its script gives");
    } else if (key == "time_min") {
        cfg.time_min = k.yes_no("yes: every Tula job gets a --time-min, so that backfill may start it early");
    } else if (key == "queue_estimate") {
        cfg.queue_estimate = k.yes_no("no: plan as if the queue were empty");
    } else if (key == "exclusive") {
        cfg.exclusive = k.yes_no("yes: every Tula job gets whole nodes (sbatch --exclusive)");
    } else if (key == "queue_timeout") {
        cfg.queue_timeout = k.number(0.05, 4.0, "seconds to wait for slurmctld");
    } else {
        throw k.fail("unknown key '" + key + "' (valid keys: " + kValidKeys + ")");
    }
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source) {
    Config cfg;
    std::set<std::string> seen;
    std::vector<Section> sections;  // the [partition NAME] sections read so far; the last is open
    size_t pos = 0;
    int lineno = 0;
    while (pos <= text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        const std::string raw = text.substr(pos, nl - pos);
        pos = nl + 1;
        ++lineno;
        const std::string line = detail::trim(strip_comment(raw));
        if (line.empty()) {
            if (nl == text.size()) break;
            continue;
        }
        KeyLine k{source, lineno, "", ""};
        if (line.front() == '[') {
            sections.push_back(section_header(line, k, sections, cfg));
            if (nl == text.size()) break;
            continue;
        }
        const size_t eq = line.find('=');
        if (eq == std::string::npos) throw k.fail("expected `key = value`, found '" + line + "'");
        k.key = detail::trim(line.substr(0, eq));
        k.value = detail::trim(line.substr(eq + 1));
        if (k.key.empty()) throw k.fail("missing key before '='");
        if (k.value.size() >= 2 && k.value.front() == '"' && k.value.back() == '"') k.value = k.value.substr(1, k.value.size() - 2);
        if (!sections.empty()) {
            set_partition_key(sections.back(), k);
        } else {
            if (!kSiteKeys.count(k.key)) throw k.fail("unknown key '" + k.key + "' (valid keys: " + kValidKeys + ")");
            // Strict: a repeated key is almost always an editing mistake.
            if (!seen.insert(k.key).second) throw k.fail("key '" + k.key + "' is set twice; keep one");
            set_site_key(cfg, k);
        }
        if (nl == text.size()) break;
    }
    if (sections.empty() && cfg.price_per_gpu_hour > 0 && cfg.gpus_per_node == 0)
        throw Error(source + ": price_per_gpu_hour is set but gpus_per_node is 0; set gpus_per_node to the GPUs of a node");
    for (Section& sec : sections) finish_section(sec, source, &cfg.partitions);
    return cfg;
}


std::vector<PartitionConf> Config::site_partitions() const {
    std::vector<PartitionConf> out = partitions;
    const bool implicit = out.empty();
    if (implicit) {
        PartitionConf p;  // the implicit partition: today's single-partition file
        p.nodes = max_nodes;
        p.gpus_per_node = gpus_per_node;
        p.ranks_per_node = 1;
        p.price_per_node_hour = price_per_node_hour;
        p.price_per_gpu_hour = price_per_gpu_hour;
        p.watts_per_node = watts_per_node;
        p.exclusive = exclusive;
        out.push_back(p);
    }
    if (implicit || max_nodes_set)
        for (PartitionConf& p : out) p.nodes = std::min(p.nodes, max_nodes);
    return out;
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot read " + path + ": " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error("cannot read " + path + ": not a regular file");
    }
    std::string text;
    char buf[65536];
    while (text.size() < max_bytes) {
        const ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - text.size()));
        if (n < 0) {
            if (errno == EINTR) continue;
            const int e = errno;
            ::close(fd);
            throw Error("cannot read " + path + ": " + std::strerror(e));
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

Config load_config(const std::string& path) {
    const std::string text = read_text_file(path, kMaxConfigBytes + 1);
    if (text.size() > kMaxConfigBytes) throw Error(path + " is larger than 1 MiB; it is not a tula.conf");
    return parse_config(text, path);
}

std::string user_db_path(const char* xdg_data_home, const char* home) {
    // The XDG base directory specification says relative paths in $XDG_DATA_HOME are invalid
    // and must be ignored.
    if (xdg_data_home && xdg_data_home[0] == '/') return std::string(xdg_data_home) + "/tula/profiles.db";
    if (home && home[0] != '\0') return std::string(home) + "/.local/share/tula/profiles.db";
    throw Error(
        "neither XDG_DATA_HOME nor HOME is set, so the per-user profile database cannot be located; set HOME "
        "or pass the database path explicitly");
}

bool valid_class_name(const std::string& s) { return valid_name(s); }

std::string partition_class(const Config& cfg, const std::string& partition) {
    for (const PartitionConf& p : cfg.partitions)
        if (p.name == partition) return p.hardware_class;
    return "";
}

std::string hardware_class_from_env(std::string* warning) {
    if (const char* c = std::getenv("TULA_HARDWARE_CLASS")) {
        if (!*c || valid_name(c)) return c;
        if (warning)
            *warning = "ignoring TULA_HARDWARE_CLASS='" + std::string(c).substr(0, 64) +
                       "' (not a class name: 1 to 63 letters, digits, '_', '.', '-'); recording the unknown class";
        return "";
    }
    const char* part = std::getenv("SLURM_JOB_PARTITION");
    if (!part || !*part) return "";
    const std::optional<Config> cfg = site_config_from_env();
    return cfg ? partition_class(*cfg, part) : "";  // no readable tula.conf: the class is not known
}

std::optional<Config> site_config_from_env() {
    const char* conf = std::getenv("TULA_CONF");
    try {
        return load_config(conf && *conf ? conf : TULA_DEFAULT_CONF);
    } catch (const Error&) {
        return std::nullopt;
    }
}

}  // namespace tula
