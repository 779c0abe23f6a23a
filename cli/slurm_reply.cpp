// tula CLI: the pure half of slurm_query.hpp: the child's line protocol and the AllowGroups
// check, with no libslurm, so that the unit tests link it alone.
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "slurm_query.hpp"

namespace tula::cli {
namespace {

// Text fields travel in one tab-separated line: tabs and line breaks become spaces.
std::string field(const std::string& s) {
    std::string r = s;
    for (char& c : r)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return r;
}

std::vector<std::string> split(const std::string& line, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : line) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

// A non-negative integer field; false if it is not one (or exceeds int).
bool to_int(const std::string& s, int* v) {
    if (s.empty() || s.size() > 9) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    *v = std::atoi(s.c_str());
    return true;
}

}  // namespace

std::string encode_partition(const SlurmPartition& p) {
    std::ostringstream o;
    o << "P\t" << field(p.name) << '\t' << p.total_nodes << '\t' << p.up_nodes << '\t' << p.max_nodes << '\t'
      << p.max_time_minutes << '\t' << (p.usable ? 1 : 0) << '\t' << (p.is_default ? 1 : 0) << '\t' << field(p.why_not)
      << '\n';
    return o.str();
}

std::string encode_start(size_t index, const StartEstimate& s) {
    std::ostringstream o;
    if (s.answered)
        o << "S\t" << index << '\t' << static_cast<long long>(s.wait_seconds < 0 ? 0 : s.wait_seconds) << '\n';
    else
        o << "E\t" << index << '\t' << field(s.error) << '\n';
    return o.str();
}

std::string encode_hole(size_t index, const HoleFound& h) {
    std::ostringstream o;
    o << "H\t" << index << '\t' << static_cast<long long>(h.wait_seconds < 0 ? 0 : h.wait_seconds) << '\t' << h.minutes
      << '\n';
    return o.str();
}

HoleFound find_hole(int time_min, int time_limit, double full_wait_seconds, const StartOracle& start,
                    int max_probes) {
    HoleFound h;
    if (time_min < 1 || time_min >= time_limit || max_probes < 1) return h;
    const std::optional<double> w = start(time_min);
    h.probes = 1;
    if (!w || !(*w + kHoleEarlierSeconds <= full_wait_seconds)) return h;
    h.wait_seconds = std::max(0.0, *w);
    // lo starts in the hole, hi does not (the full limit starts at full_wait_seconds)
    int lo = time_min, hi = time_limit;
    while (hi - lo > 1 && h.probes < max_probes) {
        const int mid = lo + (hi - lo) / 2;
        const std::optional<double> m = start(mid);
        ++h.probes;
        if (m && *m <= h.wait_seconds + kHoleSlackSeconds) lo = mid;
        else hi = mid;
    }
    h.minutes = lo;
    return h;
}

std::optional<double> wait_after_reservations(const BeginOracle& start, std::vector<time_t> reservation_ends,
                                              time_t now, int max_tries, int* asked) {
    std::sort(reservation_ends.begin(), reservation_ends.end());
    reservation_ends.erase(std::unique(reservation_ends.begin(), reservation_ends.end()), reservation_ends.end());
    int n = 0;
    std::optional<double> w;
    for (time_t end : reservation_ends) {
        if (end <= now) continue;
        if (n >= max_tries) break;
        ++n;
        w = start(end);
        if (w) break;
    }
    if (asked) *asked = n;
    return w;
}

std::string encode_failure(const std::string& message) { return "X\t" + field(message) + "\n"; }

std::string encode_done() { return "D\n"; }

bool reply_complete(const std::string& text) {
    return text == "D\n" || (text.size() >= 3 && text.compare(text.size() - 3, 3, "\nD\n") == 0);
}

bool decode_reply(const std::string& text, SlurmSite* site, std::vector<StartEstimate>* starts) {
    bool ok = true;
    for (const std::string& line : split(text, '\n')) {
        const auto f = split(line, '\t');
        if (f.size() == 2 && f[0] == "X") {
            ok = false;
            if (site) site->error = f[1];
            continue;
        }
        if (f.size() == 9 && f[0] == "P" && site) {
            SlurmPartition p;
            int usable = 0, is_default = 0;
            p.name = f[1];
            p.why_not = f[8];
            if (!p.name.empty() && to_int(f[2], &p.total_nodes) && to_int(f[3], &p.up_nodes) &&
                to_int(f[4], &p.max_nodes) && to_int(f[5], &p.max_time_minutes) && to_int(f[6], &usable) && usable <= 1 &&
                to_int(f[7], &is_default) && is_default <= 1) {
                p.usable = usable == 1;
                p.is_default = is_default == 1;
                site->partitions.push_back(p);
            }
            continue;
        }
        if (f.size() == 4 && f[0] == "H" && starts) {
            int idx = 0, wait = 0, minutes = 0;
            if (!to_int(f[1], &idx) || static_cast<size_t>(idx) >= starts->size() || !to_int(f[2], &wait) ||
                !to_int(f[3], &minutes) || minutes < 1)
                continue;
            (*starts)[idx].hole_wait_seconds = wait;
            (*starts)[idx].hole_minutes = minutes;
            continue;
        }
        if (f.size() == 3 && (f[0] == "S" || f[0] == "E") && starts) {
            int idx = 0;
            if (!to_int(f[1], &idx) || static_cast<size_t>(idx) >= starts->size()) continue;
            StartEstimate& s = (*starts)[idx];
            int wait = 0;
            if (f[0] == "S" && to_int(f[2], &wait)) {
                s.answered = true;
                s.wait_seconds = wait;
                s.error.clear();
            } else if (f[0] == "E") {
                s.answered = false;
                s.error = f[2];
            }
        }
    }
    if (site) site->answered = ok;
    return ok;
}

bool groups_allowed(const std::string& allow_groups, const std::vector<std::string>& user_groups) {
    if (allow_groups.empty() || allow_groups == "ALL") return true;
    for (const std::string& g : split(allow_groups, ','))
        for (const std::string& u : user_groups)
            if (!g.empty() && g == u) return true;
    return false;
}

}  // namespace tula::cli
