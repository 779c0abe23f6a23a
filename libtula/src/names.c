/* libtula: the one grammar of the values users type for Tula (tula.h): modes, workload names,
 * durations and budgets. Pure C with no dependency but libc, so that the SPANK plugin links
 * this object too (the plugin, the CLI and libtula cannot disagree); cli_filter.lua follows
 * the same grammar (tests/integration/test_local_cli_filter_lua.sh checks it). */
#include "tula/tula.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tula_set_error(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (!err || err_len == 0)
        return;
    n = snprintf(err, err_len, "tula: ");
    if (n < 0 || (size_t)n >= err_len)
        return;
    va_start(ap, fmt);
    vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

void tula_excerpt(const char *s, char out[72])
{
    size_t i;
    for (i = 0; s && s[i] && i < 64; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[i] = '\0';
    if (s && s[i])
        strcpy(out + i, "...");
}

int tula_parse_plain_decimal(const char *value, size_t max_len, double *out)
{
    size_t i, digits = 0, dots = 0, len;
    double v;
    if (!value)
        return -1;
    len = strnlen(value, max_len);
    if (len == 0 || len >= max_len)
        return -1;
    for (i = 0; i < len; i++) {
        if (value[i] >= '0' && value[i] <= '9')
            digits++;
        else if (value[i] == '.' && dots == 0)
            dots++;
        else
            return -1;
    }
    if (digits == 0)
        return -1;
    v = strtod(value, NULL);
    if (!isfinite(v))
        return -1;
    if (out)
        *out = v;
    return 0;
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
}

int tula_parse_mode(const char *value, char *mode, size_t mode_len, char *err, size_t err_len)
{
    static const char *const modes[] = {"auto", "time", "cost", "off", "dry-run"};
    char lower[16], shown[72];
    size_t i, len;

    if (err && err_len)
        err[0] = '\0';
    if (!mode || mode_len < 16) {
        tula_set_error(err, err_len, "internal error: the mode buffer must hold at least 16 bytes");
        return -1;
    }
    mode[0] = '\0';
    if (!value || value[0] == '\0') {
        strcpy(mode, "auto");
        return 0;
    }
    len = strnlen(value, 64);
    if (len < sizeof lower) {
        for (i = 0; i < len; i++)
            lower[i] = (value[i] >= 'A' && value[i] <= 'Z') ? (char)(value[i] - 'A' + 'a') : value[i];
        lower[len] = '\0';
        for (i = 0; i < sizeof modes / sizeof modes[0]; i++) {
            if (strcmp(lower, modes[i]) == 0) {
                strcpy(mode, modes[i]);
                return 0;
            }
        }
    }
    tula_excerpt(value, shown);
    tula_set_error(err, err_len, "invalid --tula value '%s'; valid values: auto, time, cost, off, dry-run", shown);
    return -1;
}

int tula_parse_two_words(const char *value, const char *one, const char *zero, const char *option,
                         const char *valid, char *err, size_t err_len)
{
    char shown[72];

    if (err && err_len)
        err[0] = '\0';
    if (value && strcmp(value, one) == 0)
        return 1;
    if (value && strcmp(value, zero) == 0)
        return 0;
    tula_excerpt(value ? value : "", shown);
    tula_set_error(err, err_len, "invalid --tula-%s value '%s'; valid values: %s", option, shown, valid);
    return -1;
}

int tula_parse_epochs_mode(const char *value, char *err, size_t err_len)
{
    return tula_parse_two_words(value, "fixed", "follow", "epochs",
                                "follow (the epochs follow the planned batch), fixed (train the script's epochs)", err,
                                err_len);
}

int tula_parse_time_min(const char *value, char *err, size_t err_len)
{
    return tula_parse_two_words(value, "yes", "no", "time-min",
                                "yes (ask for a --time-min, so that backfill may start the job early), no", err, err_len);
}

int tula_check_workload(const char *value, char *err, size_t err_len)
{
    char shown[72];
    size_t len, i, at = 0, ats = 0;

    if (err && err_len)
        err[0] = '\0';
    if (!value || value[0] == '\0') {
        tula_set_error(err, err_len, "empty workload; give --tula-workload=MODEL@DATASET, e.g. lenet5@fashion-mnist");
        return -1;
    }
    tula_excerpt(value, shown);
    len = strnlen(value, TULA_NAME_MAX);
    if (len >= TULA_NAME_MAX) {
        tula_set_error(err, err_len, "workload '%s' is too long (at most %d bytes)", shown, TULA_NAME_MAX - 1);
        return -1;
    }
    for (i = 0; i < len; i++) {
        if (value[i] == '@') {
            ats++;
            at = i;
        } else if (!name_char(value[i])) {
            tula_set_error(err, err_len,
                    "workload '%s' is not of the form MODEL@DATASET (letters, digits, _ . - and one @)", shown);
            return -1;
        }
    }
    if (ats != 1 || at == 0 || at == len - 1) {
        tula_set_error(err, err_len,
                "workload '%s' is not of the form MODEL@DATASET (letters, digits, _ . - and one @)", shown);
        return -1;
    }
    return 0;
}

/* Reads 1 .. max_digits decimal digits from *p (exactly `exact` when > 0); -1 otherwise. */
static long read_digits(const char **p, int max_digits, int exact)
{
    const char *s = *p;
    long v = 0;
    int n = 0;
    while (*s >= '0' && *s <= '9') {
        if (++n > max_digits)
            return -1;
        v = v * 10 + (*s - '0');
        s++;
    }
    if (n == 0 || (exact > 0 && n != exact))
        return -1;
    *p = s;
    return v;
}

long tula_parse_duration(const char *value, char *err, size_t err_len)
{
    char shown[72];
    const char *p = value;
    long days = 0, f[3];
    int nf = 0;

    if (err && err_len)
        err[0] = '\0';
    if (!value || value[0] == '\0') {
        tula_set_error(err, err_len, "empty duration; give HH:MM:SS, e.g. 02:00:00");
        return -1;
    }
    tula_excerpt(value, shown);
    if (strnlen(value, 32) >= 32)
        goto bad;
    if (strchr(value, '-')) {
        days = read_digits(&p, 4, 0);
        if (days < 0 || days > 3650 || *p != '-')
            goto bad;
        p++;
    }
    f[nf] = read_digits(&p, 7, 0); /* the leading field is unbounded (90:00 is 90 minutes) */
    if (f[nf] < 0 || f[nf] > 1000000)
        goto bad;
    nf++;
    while (*p == ':' && nf < 3) {
        p++;
        f[nf] = read_digits(&p, 2, 2);
        if (f[nf] < 0 || f[nf] > 59)
            goto bad;
        nf++;
    }
    if (*p != '\0' || nf < 2)
        goto bad;
    {
        const long secs = days * 86400 + (nf == 3 ? f[0] * 3600 + f[1] * 60 + f[2] : f[0] * 60 + f[1]);
        if (secs <= 0) {
            tula_set_error(err, err_len, "invalid duration '%s': it must be longer than zero", shown);
            return -1;
        }
        return secs;
    }
bad:
    tula_set_error(err, err_len, "invalid duration '%s'; give HH:MM:SS (or MM:SS, D-HH:MM:SS), e.g. 02:00:00", shown);
    return -1;
}

int tula_check_budget(const char *value, double *out, char *err, size_t err_len)
{
    char shown[72];
    double v;

    if (err && err_len)
        err[0] = '\0';
    if (!value || value[0] == '\0') {
        tula_set_error(err, err_len, "empty budget; give --tula-budget=X, a positive number in the site's cost unit");
        return -1;
    }
    tula_excerpt(value, shown);
    if (tula_parse_plain_decimal(value, 24, &v) != 0) {
        tula_set_error(err, err_len, "invalid budget '%s'; give a positive number in the site's cost unit, e.g. 2.5",
                shown);
        return -1;
    }
    if (v <= 0.0 || v >= 1e15) {
        tula_set_error(err, err_len, "invalid budget '%s': it must be above 0 and below 1e15", shown);
        return -1;
    }
    if (out)
        *out = v;
    return 0;
}
