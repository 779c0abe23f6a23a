/* The C declarations shared by the tula command and the SPANK plugin: Tula's version, the
 * site configuration directory, message sizes, the plan table's limits, and the grammar of what users type (names.c,
 * pure C, linked into both). Nothing here calls exit(), abort() or prints.
 */
#ifndef TULA_TULA_H
#define TULA_TULA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TULA_MSG_MAX 512
#define TULA_NAME_MAX 128

/* The plan table the submission filter answers and the plugin parses
 * (tula_plugin_plan_table, plugin/tula_plugin.h, gives its format): its longest accepted
 * form in bytes including the NUL, its most rows (node counts: the -N LO-HI ranges a plan
 * covers) and its most ranks per node in a row. */
#define TULA_PLAN_MAX 4096
#define TULA_PLAN_ROWS_MAX 64
#define TULA_PLAN_RANKS_MAX 1024

/* The decision record of one submission: what `tula submit-filter` decided (SubmitRecord,
 * cli/submit.hpp), which cli_filter.lua copies verbatim into the plugin's memory file and the
 * plugin hands to the job without deciding again (tula_plugin_record, plugin/tula_plugin.h).
 * Lines KEY=VALUE, each key at most once:
 *     mode=MODE            the canonical mode (auto, time, cost, dry-run); always there
 *     policy=deadline=HH:MM:SS | policy=budget=X
 *                          a deadline or budget policy; absent: the mode's
 *     workload=MODEL@DATASET  the workload given (--tula-workload, $TULA_WORKLOAD); absent: none
 *     table=PLAN           the plan table (above); absent: no plan reached the job
 * Its longest form and a policy's longest value, in bytes including the NUL. */
#define TULA_RECORD_MAX (TULA_PLAN_MAX + 256)
#define TULA_POLICY_MAX 48

/* Directory of the site configuration: `make sysconfdir=DIR` (default /etc/slurm). */
#ifndef TULA_SYSCONFDIR
#define TULA_SYSCONFDIR "/etc/slurm"
#endif

/* Default site configuration path. */
#define TULA_DEFAULT_CONF TULA_SYSCONFDIR "/tula.conf"

/* Tula's version (the file VERSION, passed by the Makefile). */
#ifndef TULA_VERSION
#define TULA_VERSION "unknown"
#endif

/* ---- The one grammar of what users type (names.c; pure C, also linked into the plugin).
 * Every function writes one line that starts with "tula: " to `err` (err_len bytes, always
 * NUL-terminated when err_len > 0) when it fails, never writes past the buffers it is given,
 * and never allocates. */

/* A --tula / $TULA_MODE value: NULL or "" (bare --tula) means "auto"; valid values are auto,
 * time, cost, off, dry-run in any letter case, shorter than 64 bytes. Writes the canonical
 * value to `mode` (mode_len >= 16). Returns 0, or -1 with a message listing the valid values. */
int tula_parse_mode(const char *value, char *mode, size_t mode_len, char *err, size_t err_len);

/* A workload name MODEL@DATASET: each part non-empty, of letters, digits, '_', '.', '-', the
 * whole shorter than TULA_NAME_MAX. Returns 0, or -1 (NULL, empty, bad form, too long). */
int tula_check_workload(const char *value, char *err, size_t err_len);

/* A duration, as Slurm writes time limits: HH:MM:SS, MM:SS or D-HH:MM:SS (also D-MM:SS); the
 * leading field 1 to 7 digits (at most 1000000: 90:00 is 90 minutes), the others exactly two
 * digits below 60, days 0 to 3650; no sign or space; not zero. Returns the duration in
 * seconds (> 0), or -1. */
long tula_parse_duration(const char *value, char *err, size_t err_len);

/* A budget in the site's cost unit: a plain decimal number (digits with an optional '.' and
 * fraction; no sign, exponent or space), shorter than 24 bytes, above 0 and below 1e15. Returns
 * 0 with the value in *out (when out is not NULL), or -1. */
int tula_check_budget(const char *value, double *out, char *err, size_t err_len);

/* A value of --tula-OPTION that is one of two words: returns 1 when value is `one`, 0 when it
 * is `zero` (exact, case-sensitive), or -1 (NULL, empty or anything else) with the message
 * "invalid --tula-OPTION value 'VALUE'; valid values: VALID" (VALUE shortened by
 * tula_excerpt) in err. `option` is the name without "--tula-". */
int tula_parse_two_words(const char *value, const char *one, const char *zero, const char *option,
                         const char *valid, char *err, size_t err_len);

/* A --tula-epochs value: "follow" (the epochs follow the planned global batch, the default)
 * or "fixed" (the job trains the epochs its script gives). Returns 1 for fixed, 0 for follow,
 * or -1 (NULL, empty or anything else) with a message listing the two. */
int tula_parse_epochs_mode(const char *value, char *err, size_t err_len);

/* A --tula-time-min value: "yes" (the job gets a --time-min, so that backfill may start it
 * early with a shorter limit) or "no". Returns 1 for yes, 0 for no, or -1 (NULL, empty or
 * anything else) with a message listing the two. */
int tula_parse_time_min(const char *value, char *err, size_t err_len);

/* A plain decimal number (digits with an optional '.' and fraction, or '.' and digits),
 * shorter than max_len bytes, into *out (when not NULL). Returns 0, or -1. No message. */
int tula_parse_plain_decimal(const char *value, size_t max_len, double *out);

/* One "tula: " + printf(fmt, ...) line into err (err_len > 0; truncated, NUL-terminated). */
void tula_set_error(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A printable excerpt of `s` for a message: at most 64 bytes, control characters as '?',
 * "..." when cut (out holds 72 bytes). */
void tula_excerpt(const char *s, char out[72]);

#ifdef __cplusplus
}
#endif

#endif /* TULA_TULA_H */
