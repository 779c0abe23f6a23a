// libtula: workload names and the batch-script scanner (see workload.hpp).
#include "tula/workload.hpp"

#include <vector>

#include "util.hpp"

namespace tula {
namespace {

// Largest prefix of a batch script that is scanned, bytes.
constexpr size_t kMaxScriptBytes = 1 << 20;

// A shell word or a control/redirection operator.
struct Token {
    std::string text;
    bool op = false;  // one of ; & | < > ( )
};

bool is_op_char(char c) { return c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')'; }

// Splits one logical shell line into words, close to what sh does for simple commands:
// blanks separate words, '...' and "..." quote, a backslash escapes the next character,
// an unquoted `#` at the start of a word starts a comment, and unquoted ; & | < > ( )
// are operators. No expansion: `$VAR` stays as written.
std::vector<Token> tokenize(const std::string& line) {
    std::vector<Token> out;
    std::string cur;
    bool have = false;  // a word is in progress (possibly empty, e.g. '')
    auto flush = [&]() {
        if (have) out.push_back({cur, false});
        cur.clear();
        have = false;
    };
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            flush();
        } else if (c == '#' && !have) {
            break;  // comment to the end of the line
        } else if (is_op_char(c)) {
            flush();
            out.push_back({std::string(1, c), true});
        } else if (c == '\\') {
            if (i + 1 < line.size()) cur += line[++i];
            have = true;
        } else if (c == '\'') {
            const size_t e = line.find('\'', i + 1);
            const size_t stop = e == std::string::npos ? line.size() : e;
            cur += line.substr(i + 1, stop - i - 1);
            i = stop;
            have = true;
        } else if (c == '"') {
            size_t j = i + 1;
            for (; j < line.size() && line[j] != '"'; ++j) {
                if (line[j] == '\\' && j + 1 < line.size() &&
                    (line[j + 1] == '"' || line[j + 1] == '\\' || line[j + 1] == '$' || line[j + 1] == '`')) {
                    cur += line[++j];
                } else {
                    cur += line[j];
                }
            }
            i = j;
            have = true;
        } else {
            cur += c;
            have = true;
        }
    }
    flush();
    return out;
}

// Joins `\`-continued physical lines into logical lines; drops comment lines. A comment
// line inside a continuation ends the command, as in sh.
std::vector<std::string> logical_lines(const std::string& text) {
    std::vector<std::string> out;
    std::string acc;
    bool cont = false;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const std::string t = detail::trim(line);
        if (!t.empty() && t[0] == '#') {
            if (cont) {
                out.push_back(acc);
                acc.clear();
                cont = false;
            }
            continue;
        }
        // A trailing backslash continues the line unless it is itself escaped.
        size_t n_bs = 0;
        while (n_bs < line.size() && line[line.size() - 1 - n_bs] == '\\') ++n_bs;
        if (n_bs % 2 == 1) {
            line.pop_back();
            acc += line;
            acc += ' ';
            cont = true;
        } else {
            acc += line;
            out.push_back(acc);
            acc.clear();
            cont = false;
        }
    }
    if (cont) out.push_back(acc);
    return out;
}

bool is_tula_train(const std::string& w) {
    static const std::string name = "tula-train";
    if (w == name) return true;
    return w.size() > name.size() && w.compare(w.size() - name.size(), name.size(), name) == 0 &&
           w[w.size() - name.size() - 1] == '/';
}

// A positive count from a flag value; 0 when it is absent, not a plain decimal number
// (for example "$EPOCHS") or out of range.
int count_value(const std::string& v) {
    int64_t n = 0;
    if (!detail::parse_int64(v, &n) || n < 1 || n > 100000000) return 0;
    return static_cast<int>(n);
}

// Reads the flags after the tula-train word at `start`. Returns false when --model is absent
// or a name value is malformed.
bool read_flags(const std::vector<Token>& tok, size_t start, TrainCommand* cmd) {
    bool have_model = false;
    std::string model, data = "fashion-mnist";
    int epochs = 0, batch = 0;
    for (size_t i = start; i < tok.size() && !tok[i].op; ++i) {
        const std::string& w = tok[i].text;
        static const char* const kFlags[] = {"--model", "--data", "--epochs", "--batch-size"};
        for (int f = 0; f < 4; ++f) {
            const std::string flag = kFlags[f];
            std::string value;
            bool hit = false, missing = false;
            if (w == flag) {
                hit = true;
                if (i + 1 < tok.size() && !tok[i + 1].op) value = tok[++i].text;
                else missing = true;
            } else if (w.compare(0, flag.size() + 1, flag + "=") == 0) {
                hit = true;
                value = w.substr(flag.size() + 1);
            }
            if (!hit) continue;
            switch (f) {
                case 0:
                    if (missing || !detail::is_plain_name(value)) return false;
                    model = value;
                    have_model = true;
                    break;
                case 1:
                    if (missing || !detail::is_plain_name(value)) return false;
                    data = value;
                    break;
                case 2: epochs = count_value(value); break;
                case 3: batch = count_value(value); break;
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
    return true;
}

}  // namespace

std::string workload_name(const std::string& model, const std::string& dataset) { return model + "@" + dataset; }

TrainCommand parse_train_command(const std::string& script) {
    TrainCommand cmd;
    try {
        const std::string text = script.size() > kMaxScriptBytes ? script.substr(0, kMaxScriptBytes) : script;
        for (const std::string& line : logical_lines(text)) {
            const std::vector<Token> tok = tokenize(line);
            for (size_t i = 0; i < tok.size(); ++i) {
                if (tok[i].op || !is_tula_train(tok[i].text)) continue;
                // The first invocation that names a model decides; a malformed value there
                // means the workload cannot be known.
                bool named = false;
                for (size_t j = i + 1; j < tok.size() && !tok[j].op; ++j)
                    if (tok[j].text == "--model" || tok[j].text.compare(0, 8, "--model=") == 0) named = true;
                if (!named) continue;
                read_flags(tok, i + 1, &cmd);
                return cmd;
            }
        }
    } catch (...) {  // std::bad_alloc on absurd input: report "not found"
        cmd = TrainCommand();
    }
    return cmd;
}

int64_t activation_floats_per_example(const std::string& model) {
    if (model == "lenet5") {
        // input 1x28x28; conv1 6x28x28 and its ReLU; pool 6x14x14; conv2 16x10x10 and ReLU;
        // pool 16x5x5; fc 120 + ReLU, 84 + ReLU, 10.
        return 784 + 2 * 6 * 28 * 28 + 6 * 14 * 14 + 2 * 16 * 10 * 10 + 16 * 5 * 5 + 2 * 120 + 2 * 84 + 10;
    }
    if (model == "fmnist-cnn") {
        // input; two 32x28x28 conv-BN-ReLU blocks (3 tensors each); pool 32x14x14; two
        // 64x14x14 blocks; pool 64x7x7; fc 256 + ReLU, 10.
        return 784 + 2 * 3 * 32 * 28 * 28 + 32 * 14 * 14 + 2 * 3 * 64 * 14 * 14 + 64 * 7 * 7 + 2 * 256 + 10;
    }
    return 0;
}

}  // namespace tula
