/* Pure helpers of the Tula SPANK plugin: plugstack arguments, option values, the job's
 * environment. See tula_plugin.h; tested by tests/unit/test_plugin_config.cpp. */
#include "tula_plugin.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_control_chars(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return 1;
    return 0;
}

#define VALID_ARGS "conf=PATH, db=PATH, margin=FRACTION, strict"

/* 1 if s is a plain decimal number: digits with an optional '.' and fraction, or '.' and
 * digits; no sign, exponent or spaces. */
/* Stores margin=value into c. */
static int set_margin(const char *value, struct tula_plugin_config *c, char *err, size_t err_len)
{
    char shown[72];
    size_t len = strnlen(value, TULA_PLUGIN_MARGIN_MAX);
    double v;
    if (c->margin[0] != '\0') {
        tula_set_error(err, err_len, "plugstack argument margin= given twice; give it once");
        return -1;
    }
    tula_excerpt(value, shown);
    if (tula_parse_plain_decimal(value, TULA_PLUGIN_MARGIN_MAX, &v) != 0) {
        tula_set_error(err, err_len,
                "plugstack argument margin=%s is not a fraction like 0.25 (a plain decimal number, 0 to 100)",
                shown);
        return -1;
    }
    if (v < 0.0 || v > 100.0) {
        tula_set_error(err, err_len, "plugstack argument margin=%s is out of range (0 to 100, a fraction: 0.25 = +25 %%)",
                shown);
        return -1;
    }
    memcpy(c->margin, value, len + 1);
    c->margin_value = v;
    return 0;
}

/* Stores a path value for `key` into dst (TULA_PLUGIN_PATH_MAX bytes). */
static int set_path(const char *key, const char *value, char *dst, char *err, size_t err_len)
{
    char shown[72];
    size_t len = strnlen(value, TULA_PLUGIN_PATH_MAX);
    if (dst[0] != '\0') {
        tula_set_error(err, err_len, "plugstack argument %s= given twice; give it once", key);
        return -1;
    }
    if (len == 0) {
        tula_set_error(err, err_len, "plugstack argument %s= has an empty value; give an absolute path", key);
        return -1;
    }
    tula_excerpt(value, shown);
    if (len >= TULA_PLUGIN_PATH_MAX) {
        tula_set_error(err, err_len, "plugstack argument %s=%s is too long (at most %d bytes)", key, shown,
                TULA_PLUGIN_PATH_MAX - 1);
        return -1;
    }
    if (has_control_chars(value)) {
        tula_set_error(err, err_len, "plugstack argument %s=%s contains control characters", key, shown);
        return -1;
    }
    if (value[0] != '/') {
        tula_set_error(err, err_len, "plugstack argument %s=%s is not an absolute path", key, shown);
        return -1;
    }
    memcpy(dst, value, len + 1);
    return 0;
}

int tula_plugin_config_parse(struct tula_plugin_config *cfg, int ac, char *const *av,
                             char *err, size_t err_len)
{
    struct tula_plugin_config c;
    int i, seen_strict = 0;

    if (err && err_len)
        err[0] = '\0';
    if (!cfg) {
        tula_set_error(err, err_len, "internal error: no configuration to fill");
        return -1;
    }
    memset(cfg, 0, sizeof *cfg);
    memset(&c, 0, sizeof c);
    if (ac < 0 || (ac > 0 && !av)) {
        tula_set_error(err, err_len, "internal error: bad plugstack argument vector");
        return -1;
    }
    /* A strict site fails closed even when another argument is wrong. */
    for (i = 0; i < ac; i++)
        if (av[i] && strcmp(av[i], "strict") == 0)
            cfg->strict = 1;
    for (i = 0; i < ac; i++) {
        const char *a = av[i];
        const char *eq;
        char shown[72];
        size_t klen;

        if (!a) {
            tula_set_error(err, err_len, "internal error: plugstack argument %d is missing", i + 1);
            return -1;
        }
        tula_excerpt(a, shown);
        eq = strchr(a, '=');
        if (!eq) {
            if (strcmp(a, "strict") == 0) {
                if (seen_strict) {
                    tula_set_error(err, err_len, "plugstack argument strict given twice; give it once");
                    return -1;
                }
                seen_strict = 1;
                c.strict = 1;
                continue;
            }
            tula_set_error(err, err_len, "unknown plugstack argument '%s' (valid: " VALID_ARGS ")", shown);
            return -1;
        }
        klen = (size_t)(eq - a);
        if (klen == 4 && strncmp(a, "conf", 4) == 0) {
            if (set_path("conf", eq + 1, c.conf, err, err_len) != 0)
                return -1;
        } else if (klen == 2 && strncmp(a, "db", 2) == 0) {
            if (set_path("db", eq + 1, c.db, err, err_len) != 0)
                return -1;
        } else if (klen == 6 && strncmp(a, "margin", 6) == 0) {
            if (set_margin(eq + 1, &c, err, err_len) != 0)
                return -1;
        } else if (klen == 6 && strncmp(a, "strict", 6) == 0) {
            tula_set_error(err, err_len, "plugstack argument '%s': strict takes no value; write just strict", shown);
            return -1;
        } else if (klen == 0) {
            tula_set_error(err, err_len, "malformed plugstack argument '%s': no key before '=' (valid: " VALID_ARGS ")",
                    shown);
            return -1;
        } else {
            tula_set_error(err, err_len, "unknown plugstack argument '%s' (valid: " VALID_ARGS ")", shown);
            return -1;
        }
    }
    *cfg = c;
    return 0;
}

int tula_plugin_mode_active(const char *mode)
{
    return mode && (strcmp(mode, "auto") == 0 || strcmp(mode, "time") == 0 ||
                    strcmp(mode, "cost") == 0 || strcmp(mode, "dry-run") == 0);
}

int tula_plugin_mode_plans(const char *mode)
{
    return tula_plugin_mode_active(mode) && strcmp(mode, "dry-run") != 0;
}

int tula_plugin_parse_nodes(const char *s)
{
    long v = 0;
    size_t i;
    if (!s || s[0] == '\0')
        return -1;
    for (i = 0; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9' || i >= 7)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 1000000)
        return -1;
    return (int)v;
}

/* Reads a plain decimal integer of at most `max_digits` digits from *p, stopping at any
 * other byte; with `tenths`, also an optional '.' and one digit, and the value is in tenths.
 * Returns the value, or -1 when there is no digit, too many digits or a bad fraction. */
static long read_uint(const char **p, int max_digits, int tenths)
{
    const char *s = *p;
    long v = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9') {
        if (++digits > max_digits)
            return -1;
        v = v * 10 + (*s - '0');
        s++;
    }
    if (digits == 0)
        return -1;
    if (tenths) {
        v *= 10;
        if (*s == '.') {
            if (s[1] < '0' || s[1] > '9')
                return -1;
            v += s[1] - '0';
            s += 2;
        }
    }
    *p = s;
    return v;
}

int tula_plugin_plan_table(const char *table, int nodes, struct tula_plan_row *row, char *err, size_t err_len)
{
    char workload[TULA_NAME_MAX], werr[TULA_MSG_MAX];
    const char *p, *semi;
    size_t len, wlen;
    int rows = 0, found = 0, i;
    int seen[TULA_PLAN_ROWS_MAX];

    if (err && err_len)
        err[0] = '\0';
    if (!table || table[0] == '\0') {
        tula_set_error(err, err_len, "empty plan table");
        return -1;
    }
    len = strnlen(table, TULA_PLAN_MAX);
    if (len >= TULA_PLAN_MAX) {
        tula_set_error(err, err_len, "plan table longer than %d bytes", TULA_PLAN_MAX - 1);
        return -1;
    }
    semi = memchr(table, ';', len);
    wlen = semi ? (size_t)(semi - table) : len;
    if (!semi || wlen >= sizeof workload) {
        tula_set_error(err, err_len, "malformed plan table: no WORKLOAD; before the rows");
        return -1;
    }
    memcpy(workload, table, wlen);
    workload[wlen] = '\0';
    if (tula_check_workload(workload, werr, sizeof werr) != 0) {
        tula_set_error(err, err_len, "malformed plan table: %s", werr + 6);
        return -1;
    }
    p = semi + 1;
    for (;;) {
        struct tula_plan_row r;
        long v[4], rpn;
        static const int digits[4] = {7, 8, 7, 10};
        for (i = 0; i < 4; i++) {
            v[i] = read_uint(&p, digits[i], i == 3);
            if (v[i] < 0 || (i < 3 && *p != ':') || (i == 3 && *p != ';' && *p != ':' && *p != '\0')) {
                tula_set_error(err, err_len, "malformed plan table: row %d is not NODES:GLOBAL_BATCH:EPOCHS:SECONDS",
                        rows + 1);
                return -1;
            }
            if (i < 3)
                p++;
        }
        rpn = 1;
        if (*p == ':') { /* optional RANKS_PER_NODE */
            p++;
            rpn = read_uint(&p, 4, 0);
            if (rpn < 1 || rpn > TULA_PLAN_RANKS_MAX || (*p != ';' && *p != '\0')) {
                tula_set_error(err, err_len, "malformed plan table: row %d has a RANKS_PER_NODE that is not 1 .. %d",
                        rows + 1, TULA_PLAN_RANKS_MAX);
                return -1;
            }
        }
        if (v[0] < 1 || v[0] > 1000000 || v[1] < 1 || v[1] > 16777216 || v[2] < 1 || v[2] > 1000000 ||
            v[3] > 10000000000L) {
            tula_set_error(err, err_len, "plan table row %d is out of range (nodes %ld, global batch %ld, epochs %ld)",
                    rows + 1, v[0], v[1], v[2]);
            return -1;
        }
        if (rows >= TULA_PLAN_ROWS_MAX) {
            tula_set_error(err, err_len, "plan table has more than %d rows", TULA_PLAN_ROWS_MAX);
            return -1;
        }
        for (i = 0; i < rows; i++) {
            if (seen[i] == (int)v[0]) {
                tula_set_error(err, err_len, "plan table has two rows for %ld nodes", v[0]);
                return -1;
            }
        }
        seen[rows++] = (int)v[0];
        if (nodes > 0 && v[0] == nodes) {
            r.nodes = (int)v[0];
            r.global_batch = (int)v[1];
            r.epochs = (int)v[2];
            r.predicted_tenths = v[3];
            r.ranks_per_node = (int)rpn;
            memcpy(r.workload, workload, wlen + 1);
            if (row)
                *row = r;
            found = 1;
        }
        if (*p == '\0')
            break;
        p++; /* ';' */
    }
    if (nodes > 0 && !found) {
        tula_set_error(err, err_len, "the plan has no row for %d nodes", nodes);
        return 0;
    }
    return rows;
}

/* 1 if `v` is `prefix` followed by one or more characters of `allowed`. */
static int policy_form(const char *v, const char *prefix, const char *allowed)
{
    size_t n = strlen(prefix);
    return strncmp(v, prefix, n) == 0 && v[n] != '\0' && strspn(v + n, allowed) == strlen(v + n);
}

/* Stores one KEY=VALUE line of a record (`value` NUL-terminated, `seen` the keys so far). */
static int record_field(const char *key, size_t key_len, const char *value, struct tula_record *r, unsigned *seen,
                        char *err, size_t err_len)
{
    static const char *const keys[] = {"mode", "policy", "workload", "table"};
    char dst_err[TULA_MSG_MAX];
    unsigned i, bit;

    for (i = 0; i < 4; i++)
        if (strlen(keys[i]) == key_len && strncmp(key, keys[i], key_len) == 0)
            break;
    if (i == 4)
        return 0; /* a key of a newer tula */
    bit = 1u << i;
    if (*seen & bit) {
        tula_set_error(err, err_len, "the decision record gives %s twice", keys[i]);
        return -1;
    }
    *seen |= bit;
    switch (i) {
    case 0:
        if (tula_parse_mode(value, r->mode, sizeof r->mode, dst_err, sizeof dst_err) != 0) {
            tula_set_error(err, err_len, "the decision record's mode is invalid");
            return -1;
        }
        return 0;
    case 1:
        if (strlen(value) >= sizeof r->policy ||
            !(policy_form(value, "deadline=", "0123456789:-") || policy_form(value, "budget=", "0123456789."))) {
            tula_set_error(err, err_len, "the decision record's policy is not deadline=HH:MM:SS or budget=X");
            return -1;
        }
        memcpy(r->policy, value, strlen(value) + 1);
        return 0;
    case 2:
        if (tula_check_workload(value, dst_err, sizeof dst_err) != 0) {
            tula_set_error(err, err_len, "the decision record's workload is invalid");
            return -1;
        }
        memcpy(r->workload, value, strlen(value) + 1);
        return 0;
    default:
        if (tula_plugin_plan_table(value, 0, NULL, err, err_len) < 1)
            return -1;
        memcpy(r->table, value, strlen(value) + 1);
        return 0;
    }
}

int tula_plugin_record(const char *text, struct tula_record *r, char *err, size_t err_len)
{
    char line[TULA_RECORD_MAX];
    const char *p, *nl, *eq;
    size_t len;
    unsigned seen = 0;

    if (err && err_len)
        err[0] = '\0';
    if (!r) {
        tula_set_error(err, err_len, "no place for the decision record");
        return -1;
    }
    memset(r, 0, sizeof *r);
    if (!text || text[0] == '\0') {
        tula_set_error(err, err_len, "the decision record is empty");
        return -1;
    }
    if (strnlen(text, TULA_RECORD_MAX) >= TULA_RECORD_MAX) {
        tula_set_error(err, err_len, "the decision record is longer than %d bytes", TULA_RECORD_MAX - 1);
        return -1;
    }
    for (p = text; *p; p = nl ? nl + 1 : p + len) {
        nl = strchr(p, '\n');
        len = nl ? (size_t)(nl - p) : strlen(p);
        if (len == 0 && !nl)
            break;
        eq = memchr(p, '=', len);
        if (!eq || eq == p) {
            tula_set_error(err, err_len, "the decision record has a line that is not KEY=VALUE");
            memset(r, 0, sizeof *r);
            return -1;
        }
        memcpy(line, eq + 1, len - (size_t)(eq + 1 - p));
        line[len - (size_t)(eq + 1 - p)] = '\0';
        if (record_field(p, (size_t)(eq - p), line, r, &seen, err, err_len) != 0) {
            memset(r, 0, sizeof *r);
            return -1;
        }
        if (!nl)
            break;
    }
    if (!(seen & 1u)) {
        tula_set_error(err, err_len, "the decision record has no mode");
        memset(r, 0, sizeof *r);
        return -1;
    }
    return 0;
}

int tula_plugin_rank_batch(const struct tula_plan_row *row, int total_ranks)
{
    long planned, local, global;

    if (!row)
        return 0;
    if (total_ranks < 1 || row->nodes < 1 || row->ranks_per_node < 1)
        return row->global_batch;
    planned = (long)row->nodes * row->ranks_per_node;
    if (total_ranks == planned)
        return row->global_batch;
    local = row->global_batch / planned;
    if (local < 1)
        local = 1;
    global = local * total_ranks;
    if (global > 16777216L)
        global = (16777216L / total_ranks) * total_ranks;
    return global < 1 ? row->global_batch : (int)global;
}

int tula_plugin_plan_env(const struct tula_plan_row *row, struct tula_plugin_env out[TULA_PLUGIN_ENV_COUNT],
                         char *err, size_t err_len)
{
    char werr[TULA_MSG_MAX];
    char wl[TULA_NAME_MAX];

    if (err && err_len)
        err[0] = '\0';
    if (!row || !out) {
        tula_set_error(err, err_len, "internal error: no plan");
        return -1;
    }
    memset(out, 0, sizeof(struct tula_plugin_env) * TULA_PLUGIN_ENV_COUNT);
    if (row->nodes < 1 || row->nodes > 1000000 || row->global_batch < 1 || row->global_batch > 16777216 ||
        row->epochs < 1 || row->epochs > 1000000) {
        tula_set_error(err, err_len, "unusable plan: nodes %d, global batch %d, epochs %d", row->nodes,
                row->global_batch, row->epochs);
        return -1;
    }
    if (row->predicted_tenths < 0 || row->predicted_tenths > 10000000000L) {
        tula_set_error(err, err_len, "unusable plan: predicted time out of range");
        return -1;
    }
    /* the workload field may lack its NUL: bound it */
    memcpy(wl, row->workload, sizeof wl);
    wl[sizeof wl - 1] = '\0';
    if (tula_check_workload(wl, werr, sizeof werr) != 0) {
        tula_set_error(err, err_len, "unusable plan: %s", werr + 6);
        return -1;
    }
    out[0].name = "TULA_BATCH_SIZE";
    snprintf(out[0].value, sizeof out[0].value, "%d", row->global_batch);
    out[1].name = "TULA_NODES";
    snprintf(out[1].value, sizeof out[1].value, "%d", row->nodes);
    out[2].name = "TULA_EPOCHS";
    snprintf(out[2].value, sizeof out[2].value, "%d", row->epochs);
    out[3].name = "TULA_PREDICTED_SECONDS";
    snprintf(out[3].value, sizeof out[3].value, "%ld.%ld", row->predicted_tenths / 10, row->predicted_tenths % 10);
    out[4].name = "TULA_WORKLOAD";
    snprintf(out[4].value, sizeof out[4].value, "%s", wl);
    return 0;
}

void tula_plugin_one_line(const char *msg, char *out, size_t out_len)
{
    size_t i;
    if (!out || out_len == 0)
        return;
    for (i = 0; msg && msg[i] && i + 1 < out_len; i++) {
        unsigned char c = (unsigned char)msg[i];
        out[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    out[i] = '\0';
}
