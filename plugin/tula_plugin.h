/* Pure helpers of the Tula SPANK plugin (see spank-tula(8)): plugstack arguments, option
 * values, environment values. No Slurm calls and no I/O here, so that everything is
 * unit-tested (tests/unit/test_plugin_config.cpp); plugin/spank_tula.c is the Slurm glue.
 *
 * Every function writes one line that starts with "tula: " to `err` (err_len bytes, always
 * NUL-terminated when err_len > 0) when it fails, and never writes past the buffers it is
 * given. Strings longer than the limits below are rejected, not truncated.
 */
#ifndef TULA_PLUGIN_H
#define TULA_PLUGIN_H

#include <stddef.h>

/* TULA_MSG_MAX, TULA_NAME_MAX and the grammar of user values (names.c, the one object of
 * libtula the plugin links). */
#include "tula/tula.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest path accepted in a plugstack argument, bytes including the NUL. */
#define TULA_PLUGIN_PATH_MAX 1024

/* Longest margin= value, bytes including the NUL. */
#define TULA_PLUGIN_MARGIN_MAX 32

/* What the plugstack.conf line says:
 *     optional /usr/lib/x86_64-linux-gnu/slurm-wlm/tula.so conf=/etc/slurm/tula.conf db=/var/lib/tula/profiles.db margin=0.5 strict
 */
struct tula_plugin_config {
    char conf[TULA_PLUGIN_PATH_MAX]; /* conf=PATH: tula.conf; "" = TULA_DEFAULT_CONF */
    char db[TULA_PLUGIN_PATH_MAX];   /* db=PATH: system profile database; "" = tula.conf's system_db */
    char margin[TULA_PLUGIN_MARGIN_MAX]; /* margin=FRACTION as written; "" = tula.conf's time_margin */
    double margin_value;             /* margin= as a number (fraction, 0.25 = +25 %); 0 when unset */
    int strict;                      /* `strict`: 1 = Tula problems in sbatch fail the submission */
};

/* Parses the plugstack arguments av[0..ac-1] into *cfg (reset to the defaults first).
 * Accepted: `conf=PATH`, `db=PATH` (absolute, non-empty, shorter than TULA_PLUGIN_PATH_MAX,
 * no control characters), `margin=FRACTION` (safety margin on the predicted time for the
 * time limit, overriding tula.conf's time_margin: plain decimal digits with an optional
 * fraction, 0 .. 100, shorter than TULA_PLUGIN_MARGIN_MAX), each key at most once, and the
 * bare word `strict`.
 * Errors (return -1, message in err): an unknown key, a word without '=' other than
 * `strict`, `strict=...`, an empty, relative, over-long or repeated value, a margin that is
 * not a plain decimal number in 0 .. 100 (signs, exponents, inf, nan), a NULL argument.
 * Returns 0 on success. On error *cfg holds the defaults, except that strict is 1 when the
 * bare word `strict` is among the arguments (a strict site fails closed). Pure. */
int tula_plugin_config_parse(struct tula_plugin_config *cfg, int ac, char *const *av,
                             char *err, size_t err_len);

/* 1 if `mode` (a canonical value from tula_parse_mode) asks Tula to do anything at all
 * (auto, time, cost, dry-run); 0 for "off", "", NULL or anything else. Pure. */
int tula_plugin_mode_active(const char *mode);

/* 1 if `mode` asks Tula to change the job (auto, time, cost); 0 for dry-run, off and
 * anything else. Pure. */
int tula_plugin_mode_plans(const char *mode);

/* Parses a node count as Slurm writes it in SLURM_JOB_NUM_NODES: decimal digits only,
 * 1 .. 1000000. Returns the count, or -1 for NULL, empty, signs, spaces, junk or out of
 * range. Pure. */
int tula_plugin_parse_nodes(const char *s);

/* One row of the plan table: what a job on `nodes` nodes trains. */
struct tula_plan_row {
    int nodes;                   /* node count, 1 .. 1000000 */
    int ranks_per_node;          /* ranks (MPI processes) per node the plan assumed, 1 .. TULA_PLAN_RANKS_MAX */
    int global_batch;            /* examples per optimizer step over all ranks, 1 .. 16777216 */
    int epochs;                  /* epochs, 1 .. 1000000 */
    long predicted_tenths;       /* predicted training time, tenths of a second, 0 .. 10^10 */
    char workload[TULA_NAME_MAX]; /* MODEL@DATASET */
};

/* Parses the plan table that `tula submit-filter` answers as `table=`, that cli_filter.lua
 * writes into the plugin's memory file and that reaches the job as SLURM_SPANK_TULA_PLAN:
 *
 *     WORKLOAD;NODES:GLOBAL_BATCH:EPOCHS:SECONDS[:RANKS_PER_NODE][;NODES:...]
 *
 * e.g. "lenet5@fashion-mnist;2:128:12:95.5;3:192:12:71:2". WORKLOAD as for
 * tula_check_workload; every field a plain decimal integer in the range of struct
 * tula_plan_row, SECONDS with at most one decimal; RANKS_PER_NODE (1 when absent) 1 ..
 * TULA_PLAN_RANKS_MAX with at most 4 digits; 1 .. TULA_PLAN_ROWS_MAX rows, each node count
 * once; shorter than TULA_PLAN_MAX. One pass over at most TULA_PLAN_MAX bytes, no
 * allocation.
 * With nodes > 0, copies the row for that node count to *row (when row is not NULL).
 * Returns the number of rows when the table is valid and (nodes <= 0 or) it has a row for
 * `nodes`; 0 when it is valid but has no row for `nodes` (message in err); -1 when it is
 * malformed (NULL, empty, too long, bad field, out of range, repeated node count; message in
 * err). Pure. */
int tula_plugin_plan_table(const char *table, int nodes, struct tula_plan_row *row, char *err, size_t err_len);

/* The decision record (TULA_RECORD_MAX, tula/tula.h): the fields present, "" for an absent
 * one. */
struct tula_record {
    char mode[16];                /* canonical mode (tula_parse_mode) */
    char policy[TULA_POLICY_MAX]; /* deadline=HH:MM:SS or budget=X */
    char workload[TULA_NAME_MAX]; /* MODEL@DATASET */
    char table[TULA_PLAN_MAX];    /* the plan table (tula_plugin_plan_table) */
};

/* Parses a decision record as cli_filter.lua wrote it: KEY=VALUE lines (a last newline
 * optional), keys mode, policy, workload and table, each at most once, mode required; a key
 * the plugin does not know (a newer tula) is skipped. Each value is checked, not interpreted:
 * the mode with tula_parse_mode (stored canonical), the policy's characters (deadline= then
 * digits, ':' and '-'; budget= then digits and '.'), the workload with tula_check_workload,
 * the table with tula_plugin_plan_table. Returns 0 with *r filled, or -1 with a message in err
 * (NULL, empty, TULA_RECORD_MAX bytes or more, a line without '=', a repeated key, no mode, a
 * bad or over-long value). One pass, no allocation. Pure. */
int tula_plugin_record(const char *text, struct tula_record *r, char *err, size_t err_len);

/* The global batch (examples per step over all ranks) for the ranks the job actually has:
 * the row's local batch, global_batch / (nodes x ranks_per_node) rounded down and at least 1,
 * times total_ranks, so that every rank keeps the local batch that was planned. The row's
 * global_batch unchanged when total_ranks is what the row planned or is < 1 (unknown); at
 * most 16777216 (then rounded down to a multiple of total_ranks). 0 for a NULL row. Pure. */
int tula_plugin_rank_batch(const struct tula_plan_row *row, int total_ranks);
/* One environment variable the plugin gives the job's tasks. */
struct tula_plugin_env {
    const char *name;  /* TULA_BATCH_SIZE, TULA_NODES, TULA_EPOCHS, TULA_PREDICTED_SECONDS, TULA_WORKLOAD */
    char value[TULA_NAME_MAX];
};

#define TULA_PLUGIN_ENV_COUNT 5

/* The variables for one row of the plan, in this order: TULA_BATCH_SIZE (global batch,
 * examples per step over all ranks), TULA_NODES (node count), TULA_EPOCHS,
 * TULA_PREDICTED_SECONDS (predicted training time in seconds, one decimal), TULA_WORKLOAD.
 * Returns 0, or -1 with a message in err when the row is unusable (NULL, a field out of the
 * ranges of struct tula_plan_row, an invalid workload name). Pure. */
int tula_plugin_plan_env(const struct tula_plan_row *row, struct tula_plugin_env out[TULA_PLUGIN_ENV_COUNT],
                         char *err, size_t err_len);

/* Copies a one-line message for the job's environment or a log: at most out_len - 1 bytes,
 * control characters (newlines included) replaced by spaces, NUL-terminated (out_len > 0).
 * Pure. */
void tula_plugin_one_line(const char *msg, char *out, size_t out_len);

#ifdef __cplusplus
}
#endif

#endif /* TULA_PLUGIN_H */
