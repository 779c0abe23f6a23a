// libtula private helpers: strict number parsing, string trimming and the small formatting of
// messages. Not installed.
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tula {
namespace detail {

/// `s` without leading and trailing blanks (space, tab, CR, LF, VT, FF).
inline std::string trim(const std::string& s) {
    const char* ws = " \t\r\n\v\f";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    const size_t e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

/// Parses all of `s` (already trimmed) as a base-10 integer. False on empty input,
/// trailing characters or overflow of int64_t.
inline bool parse_int64(const std::string& s, int64_t* out) {
    if (s.empty()) return false;
    const char c0 = s[0];
    if (!(c0 == '-' || c0 == '+' || (c0 >= '0' && c0 <= '9'))) return false;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || end == s.c_str() || *end != '\0') return false;
    *out = static_cast<int64_t>(v);
    return true;
}

/// Parses all of `s` (already trimmed) as a finite decimal number (no hex, inf or nan).
inline bool parse_finite_double(const std::string& s, double* out) {
    if (s.empty()) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) return false;
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v)) return false;
    *out = v;
    return true;
}

/// True when `s` is non-empty and made only of [A-Za-z0-9_.-] (model and data set names).
inline bool is_plain_name(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s) {
        const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '.' || c == '-';
        if (!ok) return false;
    }
    return true;
}

/// printf of one double into a string (`f` a format with one double conversion, as "%.3g").
inline std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

/// "1 node", "N nodes".
inline std::string nodes_str(int n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

}  // namespace detail
}  // namespace tula
