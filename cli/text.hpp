// tula CLI: text primitives of every command's output (one-line messages, numbers, durations,
// key=value lines, tables) and the checks of names the CLI accepts. Pure: no I/O, no global
// state; unit-tested.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tula::cli {

/// Ordered key=value pairs, the `--format kv` output (one `key=value` line each).
using KeyValues = std::vector<std::pair<std::string, std::string>>;

/// `msg` without a leading "tula: " (libtula's messages carry it; the CLI adds its own).
std::string bare_message(const std::string& msg);

/// One printable line: control characters (newlines, tabs, ESC ...) become spaces, leading
/// and trailing blanks are dropped, and the result is cut to at most `max_bytes` bytes
/// (then "..." is appended). Used for every kv value and every one-line message.
std::string one_line(const std::string& s, size_t max_bytes = 400);

/// printf-style formatting of one double, e.g. format_number("%.1f", 94.04) == "94.0".
/// Non-finite values give "nan" / "inf" as printf does.
std::string format_number(const char* fmt, double v);

/// A duration for people: "850 ms", "9.4 s", "94.2 s", "110 s", "12.5 min", "3.2 h", "2.1 d".
/// Seconds in; "n/a" for negative or non-finite input.
std::string format_duration(double seconds);

/// A Unix time (seconds) as local "YYYY-MM-DD HH:MM"; "" for 0 or negative.
std::string format_time(double unix_seconds);

/// "1 node" / "3 nodes".
std::string nodes_phrase(int nodes);

/// Comma list of integers, "16,32,64".
std::string join_ints(const std::vector<int>& v, const char* sep = ",");

/// True if `name` has the form MODEL@DATASET, both parts non-empty and made of letters,
/// digits, '_', '.', '-', at most 127 bytes in all (the form cli_filter.lua accepts).
bool valid_workload_name(const std::string& name);

/// Splits "MODEL@DATASET" (valid_workload_name must hold). Returns false otherwise.
bool split_workload(const std::string& name, std::string* model, std::string* dataset);

/// True for a Slurm job id as tula-train records it: 1..64 bytes of digits, letters, '_',
/// '.', '+', '-' (covers array jobs "123_4" and het jobs "123+0").
bool valid_job_id(const std::string& id);

/// `s` as one single-quoted POSIX shell word (safe for any byte except NUL).
std::string shell_quote(const std::string& s);

/// Seconds as Slurm's time format: "01:30:00" (HH:MM:SS, hours below 24), "1-02:00:00"
/// (D-HH:MM:SS) from one day on; rounded to whole seconds; "n/a" for negative or non-finite.
std::string format_hms(double seconds);

/// "key=value\n" per pair; every value passes through one_line().
std::string render_kv(const KeyValues& kv);

/// A text table: a header row and data rows; columns right-aligned when `right[i]` is true
/// (numbers), left-aligned otherwise. Every row has the header's column count (missing
/// cells print empty, extra cells are dropped). Columns are separated by two spaces and
/// each line starts with `indent`. Widths count bytes (the CLI prints ASCII only).
struct Table {
    std::vector<std::string> header;
    std::vector<bool> right;
    std::vector<std::vector<std::string>> rows;
};
/// Renders `t` as text, one line per row, the header first; ends with a newline.
std::string render_table(const Table& t, const std::string& indent = "  ");
/// The same lines without newlines: element 0 is the header, element i+1 data row i (so that
/// a caller can highlight a row on a terminal).
std::vector<std::string> render_table_lines(const Table& t, const std::string& indent = "  ");

}  // namespace tula::cli
