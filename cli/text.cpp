// tula CLI: text primitives and name checks (see text.hpp).
#include "text.hpp"
#include "tula/tula.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace tula::cli {

std::string bare_message(const std::string& msg) {
    std::string m = msg;
    while (m.rfind("tula: ", 0) == 0) m = m.substr(6);
    return m;
}

std::string one_line(const std::string& s, size_t max_bytes) {
    std::string out;
    out.reserve(s.size());
    for (unsigned char c : s) out += (c < 0x20 || c == 0x7f) ? ' ' : static_cast<char>(c);
    const size_t a = out.find_first_not_of(' ');
    if (a == std::string::npos) return "";
    const size_t b = out.find_last_not_of(' ');
    out = out.substr(a, b - a + 1);
    if (out.size() > max_bytes) {
        // Do not cut a UTF-8 sequence in the middle: back up over continuation bytes.
        size_t n = max_bytes;
        while (n > 0 && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) --n;
        out = out.substr(0, n) + "...";
    }
    return out;
}

std::string format_number(const char* fmt, double v) {
    char buf[128];
    std::snprintf(buf, sizeof buf, fmt, v);
    return buf;
}

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "n/a";
    if (s < 1.0) return format_number("%.0f ms", s * 1e3);
    if (s < 100.0) return format_number("%.1f s", s);
    if (s < 120.0) return format_number("%.0f s", s);
    if (s < 7200.0) return format_number("%.1f min", s / 60.0);
    if (s < 172800.0) return format_number("%.1f h", s / 3600.0);
    return format_number("%.1f d", s / 86400.0);
}

std::string format_time(double t) {
    if (!(t > 0) || !std::isfinite(t)) return "";
    const std::time_t tt = static_cast<std::time_t>(t);
    std::tm tm{};
    if (!localtime_r(&tt, &tm)) return "";
    char buf[64];
    if (std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm) == 0) return "";
    return buf;
}

std::string nodes_phrase(int nodes) { return std::to_string(nodes) + (nodes == 1 ? " node" : " nodes"); }

std::string join_ints(const std::vector<int>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
    return s;
}

namespace {
bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}
}  // namespace

bool valid_workload_name(const std::string& name) {
    return name.find('\0') == std::string::npos && tula_check_workload(name.c_str(), nullptr, 0) == 0;
}

bool split_workload(const std::string& name, std::string* model, std::string* dataset) {
    if (!valid_workload_name(name)) return false;
    const size_t at = name.find('@');
    if (model) *model = name.substr(0, at);
    if (dataset) *dataset = name.substr(at + 1);
    return true;
}

bool valid_job_id(const std::string& id) {
    if (id.empty() || id.size() > 64) return false;
    for (char c : id)
        if (!name_char(c) && c != '+') return false;
    return true;
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

std::string format_hms(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) return "n/a";
    const long long t = std::llround(seconds);
    const long long d = t / 86400, h = (t % 86400) / 3600, m = (t % 3600) / 60, s = t % 60;
    char buf[64];
    if (d > 0) std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", d, h, m, s);
    else std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", h, m, s);
    return buf;
}

std::string render_kv(const KeyValues& kv) {
    std::string out;
    for (const auto& [k, v] : kv) out += k + "=" + one_line(v, 2000) + "\n";
    return out;
}

std::vector<std::string> render_table_lines(const Table& t, const std::string& indent) {
    const size_t ncol = t.header.size();
    std::vector<size_t> width(ncol, 0);
    auto cell = [&](const std::vector<std::string>& row, size_t i) -> const std::string& {
        static const std::string empty;
        return i < row.size() ? row[i] : empty;
    };
    for (size_t i = 0; i < ncol; ++i) {
        width[i] = t.header[i].size();
        for (const auto& row : t.rows) width[i] = std::max(width[i], cell(row, i).size());
    }
    auto line = [&](const std::vector<std::string>& row) {
        std::string s = indent;
        for (size_t i = 0; i < ncol; ++i) {
            const std::string& c = cell(row, i);
            const std::string pad(width[i] - c.size(), ' ');
            const bool right = i < t.right.size() && t.right[i];
            if (i) s += "  ";
            s += right ? pad + c : c + pad;
        }
        const size_t end = s.find_last_not_of(' ');
        return end == std::string::npos ? std::string() : s.substr(0, end + 1);
    };
    std::vector<std::string> out;
    out.push_back(line(t.header));
    for (const auto& row : t.rows) out.push_back(line(row));
    return out;
}

std::string render_table(const Table& t, const std::string& indent) {
    std::string s;
    for (const auto& l : render_table_lines(t, indent)) s += l + "\n";
    return s;
}

}  // namespace tula::cli
