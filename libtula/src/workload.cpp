// libtula: workload names and the batch-script scanner (see workload.hpp).
#include "tula/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "util.hpp"

namespace tula {
namespace {

// Largest prefix of a batch script that is scanned, bytes.
constexpr size_t kMaxScriptBytes = 1 << 20;

// The words and operators of one logical line: each token's text is buf[begin, begin + len).
struct Tokens {
    struct Token {
        size_t begin = 0, len = 0;
        bool op = false;  // one of ; & | < > ( )
    };
    std::string buf;
    std::vector<Token> list;
    std::string_view text(size_t i) const { return std::string_view(buf).substr(list[i].begin, list[i].len); }
    bool op(size_t i) const { return list[i].op; }
    size_t size() const { return list.size(); }
};

bool is_op_char(char c) { return c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')'; }

// Splits one logical shell line into words, close to what sh does for simple commands:
// blanks separate words, '...' and "..." quote, a backslash escapes the next character,
// an unquoted `#` at the start of a word starts a comment, and unquoted ; & | < > ( )
// are operators. No expansion: `$VAR` stays as written. Replaces the contents of `out`.
// Time and memory linear in the line's length: every character is looked at once and
// copied at most once.
void tokenize(const std::string& line, Tokens* out) {
    out->buf.clear();
    out->list.clear();
    std::string& buf = out->buf;
    size_t begin = 0;
    bool have = false;  // a word is in progress (possibly empty, e.g. '')
    auto flush = [&]() {
        if (have) out->list.push_back({begin, buf.size() - begin, false});
        begin = buf.size();
        have = false;
    };
    const size_t n = line.size();
    for (size_t i = 0; i < n; ++i) {
        const char c = line[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            flush();
        } else if (c == '#' && !have) {
            break;  // comment to the end of the line
        } else if (is_op_char(c)) {
            flush();
            buf += c;
            out->list.push_back({begin, 1, true});
            begin = buf.size();
        } else if (c == '\\') {
            if (i + 1 < n) buf += line[++i];
            have = true;
        } else if (c == '\'') {
            const size_t e = line.find('\'', i + 1);
            const size_t stop = e == std::string::npos ? n : e;
            buf.append(line, i + 1, stop - i - 1);
            i = stop;
            have = true;
        } else if (c == '"') {
            size_t j = i + 1;
            for (; j < n && line[j] != '"'; ++j) {
                if (line[j] == '\\' && j + 1 < n &&
                    (line[j + 1] == '"' || line[j + 1] == '\\' || line[j + 1] == '$' || line[j + 1] == '`')) {
                    buf += line[++j];
                } else {
                    buf += line[j];
                }
            }
            i = j;
            have = true;
        } else {
            buf += c;
            have = true;
        }
    }
    flush();
}

bool is_tula_train(std::string_view w) {
    constexpr std::string_view name = "tula-train";
    if (w == name) return true;
    return w.size() > name.size() && w.substr(w.size() - name.size()) == name && w[w.size() - name.size() - 1] == '/';
}

// Whether word `w` is `flag` or starts with `flag=`; then *value is what follows the `=`
// (empty for the bare flag).
bool flag_form(std::string_view w, std::string_view flag, bool* with_equals, std::string_view* value) {
    if (w.substr(0, flag.size()) != flag) return false;
    if (w.size() == flag.size()) {
        *with_equals = false;
        return true;
    }
    if (w[flag.size()] != '=') return false;
    *with_equals = true;
    *value = w.substr(flag.size() + 1);
    return true;
}

// A positive count from a flag value; 0 when it is absent, not a plain decimal number
// (for example "$EPOCHS") or out of range.
int count_value(std::string_view v) {
    int64_t n = 0;
    if (!detail::parse_int64(std::string(v), &n) || n < 1 || n > 100000000) return 0;
    return static_cast<int>(n);
}

// Reads the flags after the tula-train word at `start`, up to the next operator. Returns
// false when --model is absent or a name value is malformed. Linear in the words read.
bool read_flags(const Tokens& tok, size_t start, TrainCommand* cmd) {
    bool have_model = false;
    std::string model, data = "fashion-mnist", optimizer;
    int epochs = 0, batch = 0, limit = 0, limit_test = 0, val_split = 0, threads = 0;
    static constexpr std::string_view kFlags[] = {"--model",       "--data",       "--epochs",   "--batch-size",
                                                  "--limit-train", "--optimizer",  "--limit-test", "--val-split",
                                                  "--threads"};
    constexpr int kCount = static_cast<int>(sizeof kFlags / sizeof kFlags[0]);
    for (size_t i = start; i < tok.size() && !tok.op(i); ++i) {
        const std::string_view w = tok.text(i);
        for (int f = 0; f < kCount; ++f) {
            bool with_equals = false, missing = false;
            std::string_view value;
            if (!flag_form(w, kFlags[f], &with_equals, &value)) continue;
            if (!with_equals) {
                if (i + 1 < tok.size() && !tok.op(i + 1)) value = tok.text(++i);
                else missing = true;
            }
            switch (f) {
                case 0:
                    if (missing || !detail::is_plain_name(std::string(value))) return false;
                    model = value;
                    have_model = true;
                    break;
                case 1:
                    if (missing || !detail::is_plain_name(std::string(value))) return false;
                    data = value;
                    break;
                case 2: epochs = count_value(value); break;
                case 3: batch = count_value(value); break;
                case 4: limit = count_value(value); break;
                case 5:  // "$OPT" or another non-name: not known
                    optimizer = !missing && detail::is_plain_name(std::string(value)) ? std::string(value) : "";
                    break;
                case 6: limit_test = count_value(value); break;
                case 7: val_split = count_value(value); break;
                case 8: threads = count_value(value); break;
            }
            break;
        }
    }
    if (!have_model) return false;
    cmd->found = true;
    cmd->model = model;
    cmd->dataset = data;
    cmd->epochs = epochs;
    cmd->batch_size = batch;
    cmd->limit_train = limit;
    cmd->limit_test = limit_test;
    cmd->val_split = val_split;
    cmd->threads = threads;
    cmd->optimizer = optimizer;
    return true;
}

bool is_model_flag(std::string_view w) { return w.substr(0, 7) == "--model" && (w.size() == 7 || w[7] == '='); }

// The first tula-train invocation of a tokenized logical line that names a model (a
// --model word after it, before the next operator), read into *cmd; false when the line has
// none. One pass over the words of each simple command (the words between operators): the
// invocations before the command's last --model word are the ones that name a model.
bool find_in_line(const Tokens& tok, TrainCommand* cmd) {
    size_t seg = 0;
    while (seg < tok.size()) {
        size_t end = seg, last_model = std::string::npos;
        for (; end < tok.size() && !tok.op(end); ++end)
            if (is_model_flag(tok.text(end))) last_model = end;
        if (last_model != std::string::npos)
            for (size_t i = seg; i < last_model; ++i)
                if (is_tula_train(tok.text(i))) {
                    // the first invocation that names a model decides; a malformed value there
                    // means the workload cannot be known
                    read_flags(tok, i + 1, cmd);
                    return true;
                }
        seg = end + 1;  // past the operator
    }
    return false;
}

// Whether the physical line text[b, e) is a comment line: its first non-blank is `#`.
bool comment_line(const std::string& text, size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
        const char c = text[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f') continue;
        return c == '#';
    }
    return false;
}

// The directive of a physical comment line text[b, e): `# tula: workload=NAME epochs=N batch=B
// limit_train=M optimizer=NAME` (blanks around `#` and after `tula:` allowed). Returns false when the line is
// not a directive. A directive with a missing or malformed workload, an unknown key or a value
// that is not a count in [1, 10^8] sets *problem and leaves *d unchanged.
struct Directive {
    std::string model, dataset, optimizer;
    int epochs = 0, batch = 0, limit_train = 0;
};
bool read_directive(const std::string& text, size_t b, size_t e, Directive* d, std::string* problem) {
    std::string_view line(text.data() + b, e - b);
    auto skip_blanks = [&line]() {
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    };
    skip_blanks();
    if (line.empty() || line.front() != '#') return false;
    line.remove_prefix(1);
    skip_blanks();
    if (line.substr(0, 5) != "tula:") return false;
    line.remove_prefix(5);
    Directive out;
    bool have_workload = false;
    while (true) {
        skip_blanks();
        if (line.empty()) break;
        size_t n = 0;
        while (n < line.size() && line[n] != ' ' && line[n] != '\t') ++n;
        const std::string_view word = line.substr(0, n);
        line.remove_prefix(n);
        const size_t eq = word.find('=');
        const std::string_view key = word.substr(0, eq), value = eq == std::string_view::npos ? "" : word.substr(eq + 1);
        if (key == "workload") {
            const size_t at = value.find('@');
            const std::string model(value.substr(0, at)), dataset(at == std::string_view::npos ? "" : value.substr(at + 1));
            if (at == std::string_view::npos || !detail::is_plain_name(model) || !detail::is_plain_name(dataset)) {
                *problem = "the `# tula:` directive's workload '" + std::string(value.substr(0, 64)) +
                           "' is not of the form MODEL@DATASET (letters, digits, _ . -)";
                return true;
            }
            out.model = model;
            out.dataset = dataset;
            have_workload = true;
        } else if (key == "optimizer") {
            if (!detail::is_plain_name(std::string(value))) {
                *problem = "the `# tula:` directive's optimizer '" + std::string(value.substr(0, 32)) +
                           "' is not a name (letters, digits, _ . -)";
                return true;
            }
            out.optimizer = value;
        } else if (key == "epochs" || key == "batch" || key == "limit_train") {
            const int v = count_value(value);
            if (v == 0) {
                *problem = "the `# tula:` directive's " + std::string(key) + "='" + std::string(value.substr(0, 32)) +
                           "' is not a whole number from 1 to 100000000";
                return true;
            }
            (key == "epochs" ? out.epochs : key == "batch" ? out.batch : out.limit_train) = v;
        } else {
            *problem = "the `# tula:` directive has an unknown word '" + std::string(word.substr(0, 32)) +
                       "' (known: workload=MODEL@DATASET epochs=N batch=B limit_train=M optimizer=NAME)";
            return true;
        }
    }
    if (!have_workload) {
        *problem = "the `# tula:` directive names no workload (add workload=MODEL@DATASET)";
        return true;
    }
    *d = out;
    return true;
}

}  // namespace

std::string workload_name(const std::string& model, const std::string& dataset) { return model + "@" + dataset; }

double steps_per_epoch(double examples, double global_batch, LastBatch last) {
    if (!(examples > 0) || !(global_batch > 0)) return 0.0;
    const double q = examples / global_batch;
    return last == LastBatch::Keep ? std::ceil(q) : std::floor(q);
}

const char* last_batch_name(LastBatch last) { return last == LastBatch::Keep ? "keep" : "drop"; }

// One pass over the script: physical lines are joined at `\` continuations into a logical
// line (a comment line inside a continuation ends the command, as in sh; comment lines are
// only read for the `# tula:` directive), and each logical line is tokenized and searched as
// soon as it is complete. The scan stops once both a tula-train line and a directive were
// seen. Every byte is copied a bounded number of times, so the time is linear in the script's
// length.
TrainCommand parse_train_command(const std::string& script) {
    TrainCommand cmd;
    bool have_line = false, have_directive = false;
    Directive directive;
    std::string problem;
    try {
        const size_t size = std::min(script.size(), kMaxScriptBytes);
        std::string acc;  // the logical line being joined
        Tokens tok;
        bool cont = false;
        auto done = [&]() {  // a logical line is complete: search it
            tokenize(acc, &tok);
            acc.clear();
            cont = false;
            if (have_line) return false;
            have_line = find_in_line(tok, &cmd);
            return have_line && have_directive;
        };
        size_t pos = 0;
        while (pos < size) {
            const void* hit = std::memchr(script.data() + pos, '\n', size - pos);
            const size_t nl = hit ? static_cast<size_t>(static_cast<const char*>(hit) - script.data()) : size;
            size_t e = nl;  // the physical line is script[pos, e)
            const size_t b = pos;
            pos = nl + 1;
            if (e > b && script[e - 1] == '\r') --e;
            if (comment_line(script, b, e)) {
                if (cont && done()) break;
                if (!have_directive && problem.empty() && read_directive(script, b, e, &directive, &problem) &&
                    problem.empty()) {
                    have_directive = true;
                    if (have_line) break;
                }
                continue;
            }
            // A trailing backslash continues the line unless it is itself escaped.
            size_t n_bs = 0;
            while (n_bs < e - b && script[e - 1 - n_bs] == '\\') ++n_bs;
            if (n_bs % 2 == 1) {
                acc.append(script, b, e - 1 - b);
                acc += ' ';
                cont = true;
            } else {
                acc.append(script, b, e - b);
                if (done()) break;
            }
        }
        if (cont && !(have_line && have_directive)) done();
    } catch (...) {  // std::bad_alloc on absurd input: report "not found"
        return TrainCommand();
    }
    if (!problem.empty()) {  // a malformed directive: the workload cannot be known
        TrainCommand bad;
        bad.problem = problem;
        return bad;
    }
    if (have_directive) {  // the directive names the workload; its other values override the line's
        cmd.found = true;
        cmd.from_directive = true;
        cmd.model = directive.model;
        cmd.dataset = directive.dataset;
        if (directive.epochs > 0) cmd.epochs = directive.epochs;
        if (directive.batch > 0) cmd.batch_size = directive.batch;
        if (directive.limit_train > 0) cmd.limit_train = directive.limit_train;
        if (!directive.optimizer.empty()) cmd.optimizer = directive.optimizer;
    }
    return cmd;
}

}  // namespace tula
