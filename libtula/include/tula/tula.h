/* libtula C API: the narrow interface the SPANK plugin uses.
 *
 * Every function here is noexcept from C's point of view: C++ exceptions are caught
 * inside and turned into a return value of -1 plus a one-line message that starts with
 * "tula: ". Nothing here calls exit(), abort() or prints.
 */
#ifndef TULA_TULA_H
#define TULA_TULA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TULA_MSG_MAX 512
#define TULA_NAME_MAX 128

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

/* What the job asks for. All strings may be NULL. */
typedef struct tula_job_query {
    const char *conf_path;      /* tula.conf; NULL or "" = TULA_DEFAULT_CONF */
    const char *system_db;      /* overrides tula.conf's system_db when non-empty */
    const char *xdg_data_home;  /* the job user's $XDG_DATA_HOME (user database) */
    const char *home;           /* the job user's $HOME */
    const char *workload;       /* "<model>@<dataset>"; NULL or "" = read script_path */
    const char *script_path;    /* batch script to read the tula-train line from */
    const char *policy;         /* "auto" | "time" | "cost"; NULL = "auto" */
    int nodes;                  /* nodes actually allocated (> 0) */
} tula_job_query;

/* The plan for the allocated node count. */
typedef struct tula_job_plan {
    int nodes;                       /* = query nodes */
    int global_batch;                /* examples per step over all ranks */
    int epochs;                      /* epochs the job trains: those its global batch needs to reach
                                        what the script's epochs reach at the script's batch (64
                                        without --batch-size), or the script's with fixed_epochs */
    double predicted_seconds;        /* predicted training time, seconds */
    char workload[TULA_NAME_MAX];    /* the workload planned for */
    char message[TULA_MSG_MAX];      /* on error: why; on success: a one-line summary */
    /* The shape of the chosen candidate (tula.conf partition sections, tula.conf(5)); appended
       after the fields above, which keep their offsets. */
    char partition[TULA_NAME_MAX];   /* its partition; "" for a tula.conf without sections */
    int ranks_per_node;              /* training processes per node (1 without sections) */
    int gpus_per_node;               /* GPUs of each node of the partition (0: CPU nodes) */
} tula_job_plan;

/* Plans the global batch for a job that has `q->nodes` nodes. The caller must already run
 * with the job user's privileges (files are opened as the caller). The script is read with
 * O_NOFOLLOW, at most 1 MiB. A missing tula.conf falls back to built-in defaults.
 * Returns 0 on success, -1 on any error (out->message says why). Never throws. */
int tula_plan_job(const tula_job_query *q, tula_job_plan *out);

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

/* A --tula-epochs value: "follow" (the epochs follow the planned global batch, the default)
 * or "fixed" (the job trains the epochs its script gives). Returns 1 for fixed, 0 for follow,
 * or -1 (NULL, empty or anything else) with a message listing the two. */
int tula_parse_epochs_mode(const char *value, char *err, size_t err_len);

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
