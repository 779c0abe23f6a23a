/* spank_tula.c: the Tula SPANK plugin (tula.so), thin C glue between Slurm and the plan that
 * the submission filter (cli_filter.lua, `tula submit-filter`) made at submission. See
 * spank-tula(8), SECURITY. It links nothing but libc: no libtula, SQLite, GSL or C++ runtime,
 * and it never opens a file of the user's.
 *
 * Contexts and what happens in each (Slurm 22.05):
 *   allocator (sbatch, salloc; runs as the submitting user)
 *     slurm_spank_init       parses the plugstack arguments, registers --tula[=MODE],
 *                            --tula-workload=NAME, --tula-epochs=follow|fixed,
 *                            --tula-time-min=yes|no,
 *                            --tula-deadline=HH:MM:SS and --tula-budget=X
 *                            with spank_option_register (sbatch ignores a static spank_options
 *                            table), and hands cli_filter.lua (which runs in the same process
 *                            after this and cannot see plugstack.conf) the site settings through
 *                            sbatch's own environment: TULA_PLUGSTACK_LOADED=1, _CONF, _DB,
 *                            _MARGIN, _STRICT, _DISABLED (why the arguments were refused; set
 *                            even then, with _STRICT when the word strict was there), and
 *                            _PLAN, the name (/proc/self/fd/N) of an anonymous memory file
 *                            (memfd_create) into which cli_filter.lua writes the submission's
 *                            decision record (tula/tula.h: mode, policy, workload, plan table).
 *     option callbacks       validate the value (idempotent: Slurm may call them for #SBATCH
 *                            lines and again for the command line; --tula's is stored); an
 *                            invalid value makes sbatch refuse the job with one message that
 *                            lists the valid values.
 *     slurm_spank_init_post_opt
 *                            reads the decision record from the memory file (at most
 *                            TULA_RECORD_MAX bytes), checks it (tula_plugin_record) and, when
 *                            its mode is auto/time/cost/dry-run, passes what it holds with
 *                            spank_job_control_setenv as TULA_MODE, TULA_POLICY, TULA_PLAN and
 *                            TULA_WORKLOAD, deciding nothing again; the job sees
 *                            SLURM_SPANK_TULA_*. Without a record (no cli_filter ran), an
 *                            active --tula option's mode alone, so that the job says no plan
 *                            reached it. Removes the
 *                            TULA_PLUGSTACK_* variables first, so that they never reach the job
 *                            (sbatch takes the job's environment after this callback), and
 *                            closes the memory file. The node count and time limit are set by
 *                            cli_filter.lua, not here (no SPANK call can change them).
 *   remote (slurmstepd, root)
 *     slurm_spank_init       the same options, so that their values are accepted there.
 *     slurm_spank_user_init  batch step only: picks the row of SLURM_SPANK_TULA_PLAN for
 *                            SLURM_JOB_NUM_NODES and exports TULA_BATCH_SIZE, TULA_NODES,
 *                            TULA_EPOCHS, TULA_PREDICTED_SECONDS and TULA_WORKLOAD to the batch
 *                            script (other steps inherit them from it). Every value comes from
 *                            the job's environment into a fixed buffer and is checked as bounded
 *                            integers and a name of [A-Za-z0-9_.-@]; nothing else is parsed, no
 *                            file is opened and no model runs here. A missing or malformed table
 *                            leaves the job unchanged with one TULA_WARNING.
 *   local (srun), slurmd, prolog/epilog: nothing.
 *
 * Failure policy: Tula never breaks a submission or a job: every problem is one "tula: ..."
 * line (TULA_WARNING in the job), and every callback returns 0 but an option callback given an
 * invalid value. A site's `strict` is enforced by cli_filter.lua, which refuses that one
 * submission; it never makes the plugin fail, so non-Tula jobs are never affected, and a
 * failing plugin in slurmstepd (which would drain the node) cannot happen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "tula_plugin.h"

SPANK_PLUGIN(tula, 1);

static struct tula_plugin_config g_cfg;  /* plugstack arguments */
static int g_disabled;                    /* 1: bad plugstack arguments, the plugin does nothing */
static char g_cfg_err[TULA_MSG_MAX];      /* why it is disabled */
static char g_opt_mode[16];               /* canonical --tula value; "" = option not given */
static int g_plan_fd = -1;                /* sbatch: the memory file cli_filter.lua writes the decision record to */

enum { OPT_TULA = 1, OPT_WORKLOAD = 2, OPT_DEADLINE = 3, OPT_BUDGET = 4, OPT_EPOCHS = 5, OPT_TIME_MIN = 6 };

/* The variables that carry the plugstack's site settings to cli_filter.lua inside sbatch. */
static const char *const g_site_vars[] = {"TULA_PLUGSTACK_LOADED", "TULA_PLUGSTACK_CONF", "TULA_PLUGSTACK_DB",
                                          "TULA_PLUGSTACK_MARGIN", "TULA_PLUGSTACK_STRICT",
                                          "TULA_PLUGSTACK_DISABLED", "TULA_PLUGSTACK_PLAN"};

static void site_env_clear(void)
{
    size_t i;
    for (i = 0; i < sizeof g_site_vars / sizeof g_site_vars[0]; i++)
        unsetenv(g_site_vars[i]);
}

static void plan_fd_close(void)
{
    if (g_plan_fd >= 0)
        close(g_plan_fd);
    g_plan_fd = -1;
}

/* sbatch only: the site settings for cli_filter.lua (any value the user had set is dropped),
 * and the memory file for the plan table. */
static void site_env_export(void)
{
    char name[64];
    site_env_clear();
    plan_fd_close();
    setenv("TULA_PLUGSTACK_LOADED", "1", 1);
    if (g_cfg.strict)
        setenv("TULA_PLUGSTACK_STRICT", "1", 1);
    if (g_disabled) {
        char line[TULA_MSG_MAX];
        tula_plugin_one_line(g_cfg_err, line, sizeof line);
        setenv("TULA_PLUGSTACK_DISABLED", line, 1);
        return;
    }
    if (g_cfg.conf[0])
        setenv("TULA_PLUGSTACK_CONF", g_cfg.conf, 1);
    if (g_cfg.db[0])
        setenv("TULA_PLUGSTACK_DB", g_cfg.db, 1);
    if (g_cfg.margin[0])
        setenv("TULA_PLUGSTACK_MARGIN", g_cfg.margin, 1);
    /* Close-on-exec: only this process (cli_filter.lua runs in it) sees the file. */
    g_plan_fd = memfd_create("tula-plan", MFD_CLOEXEC);
    if (g_plan_fd < 0) {
        slurm_verbose("tula: cannot create the plan's memory file: %s", strerror(errno));
        return;
    }
    snprintf(name, sizeof name, "/proc/self/fd/%d", g_plan_fd);
    setenv("TULA_PLUGSTACK_PLAN", name, 1);
}

/* An option value the callback refused: sbatch (local) prints `err` as an error and refuses the
 * job; slurmstepd (remote) only logs it. Returns -1, the callback's refusal. */
static int opt_refused(const char *err, int remote)
{
    if (!remote)
        slurm_error("%s", err);
    else
        slurm_info("%s", err);
    return -1;
}

/* --tula[=MODE]: bare --tula (optarg NULL or "") means auto. */
static int opt_mode_cb(int val, const char *optarg, int remote)
{
    char mode[16], err[TULA_MSG_MAX];
    (void)val;
    if (tula_parse_mode(optarg, mode, sizeof mode, err, sizeof err) != 0)
        return opt_refused(err, remote);
    memcpy(g_opt_mode, mode, sizeof g_opt_mode);
    return 0;
}

/* --tula-workload=MODEL@DATASET: validated here, read by cli_filter.lua */
static int opt_workload_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_check_workload(optarg, err, sizeof err) != 0)
        return opt_refused(err, remote);
    return 0;
}

/* --tula-epochs=follow|fixed: validated here, read by cli_filter.lua */
static int opt_epochs_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_parse_epochs_mode(optarg, err, sizeof err) < 0)
        return opt_refused(err, remote);
    return 0;
}

/* --tula-time-min=yes|no: validated here, read by cli_filter.lua */
static int opt_time_min_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_parse_time_min(optarg, err, sizeof err) < 0)
        return opt_refused(err, remote);
    return 0;
}

/* --tula-deadline=HH:MM:SS: validated here, read by cli_filter.lua */
static int opt_deadline_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_parse_duration(optarg, err, sizeof err) < 0)
        return opt_refused(err, remote);
    return 0;
}

/* --tula-budget=X: validated here, read by cli_filter.lua */
static int opt_budget_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_check_budget(optarg, NULL, err, sizeof err) != 0)
        return opt_refused(err, remote);
    return 0;
}

static struct spank_option g_options[] = {
    {"tula", "auto|time|cost|off|dry-run",
     "Let Tula choose the node count, time limit and batch size of a training job "
     "(auto: knee of the time/cost curve, time: fastest, cost: cheapest; dry-run: only "
     "print the plan). Default auto. See spank-tula(8).",
     2, OPT_TULA, opt_mode_cb},
    {"tula-workload", "MODEL@DATASET",
     "The workload Tula plans for (e.g. lenet5@fashion-mnist); default: read from the "
     "script's tula-train line.",
     1, OPT_WORKLOAD, opt_workload_cb},
    {"tula-epochs", "follow|fixed",
     "follow (default): train the epochs the planned global batch needs to reach the accuracy "
     "the script's --epochs reach at its own batch; fixed: train the script's epochs. "
     "See spank-tula(8).",
     1, OPT_EPOCHS, opt_epochs_cb},
    {"tula-time-min", "yes|no",
     "yes: also ask for a --time-min (the shortest useful part), so that Slurm's backfill may "
     "start the job early with a shorter limit; it checkpoints and requeues itself before the "
     "limit. Default: tula.conf's time_min. See spank-tula(8).",
     1, OPT_TIME_MIN, opt_time_min_cb},
    {"tula-deadline", "HH:MM:SS",
     "Let Tula choose the cheapest plan that finishes within this time (turns --tula on). "
     "See spank-tula(8).",
     1, OPT_DEADLINE, opt_deadline_cb},
    {"tula-budget", "X",
     "Let Tula choose the fastest plan that costs at most X (site cost unit; turns --tula on). "
     "See spank-tula(8).",
     1, OPT_BUDGET, opt_budget_cb},
    SPANK_OPTIONS_TABLE_END};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    size_t i;

    if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;

    g_disabled = 0;
    g_cfg_err[0] = '\0';
    if (tula_plugin_config_parse(&g_cfg, ac, av, g_cfg_err, sizeof g_cfg_err) != 0) {
        g_disabled = 1;
        /* In sbatch, only users who ask for --tula hear about it (cli_filter.lua). */
        if (ctx == S_CTX_REMOTE)
            slurm_info("%s; the Tula plugin is disabled", g_cfg_err);
        else
            slurm_verbose("%s; the Tula plugin is disabled", g_cfg_err);
    }

    if (ctx == S_CTX_ALLOCATOR)
        site_env_export();

    /* Registered even when disabled: sbatch must still accept --tula in scripts. */
    for (i = 0; g_options[i].name; i++) {
        spank_err_t rc = spank_option_register(sp, &g_options[i]);
        if (rc != ESPANK_SUCCESS)
            slurm_info("tula: cannot register option --%s: %s", g_options[i].name, spank_strerror(rc));
    }
    return 0;
}

/* The decision record cli_filter.lua wrote into the memory file, checked; 0 and the record in
 * *rec, or -1 when there is none (the filter did not run, or Tula is off for the submission)
 * or it is unusable (logged). */
static int read_record(struct tula_record *rec)
{
    char text[TULA_RECORD_MAX], err[TULA_MSG_MAX];
    ssize_t n;
    size_t got = 0;

    if (g_plan_fd < 0)
        return -1;
    while (got < TULA_RECORD_MAX) {
        n = pread(g_plan_fd, text + got, TULA_RECORD_MAX - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got == 0)
        return -1;
    if (got >= TULA_RECORD_MAX) {
        slurm_verbose("tula: the decision record is longer than %d bytes; nothing passed to the job",
                      TULA_RECORD_MAX - 1);
        return -1;
    }
    text[got] = '\0';
    if (tula_plugin_record(text, rec, err, sizeof err) != 0) {
        slurm_verbose("%s; nothing passed to the job", err);
        return -1;
    }
    return 0;
}

/* spank_job_control_setenv of one variable for the job; logs a failure. */
static int job_setenv(spank_t sp, const char *name, const char *value)
{
    spank_err_t rc = spank_job_control_setenv(sp, name, value, 1);
    if (rc != ESPANK_SUCCESS)
        slurm_info("tula: cannot pass %s to the job: %s", name, spank_strerror(rc));
    return rc == ESPANK_SUCCESS ? 0 : -1;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    struct tula_record rec;
    int have_record;

    (void)ac;
    (void)av;
    /* spank_job_control_setenv crashes in prolog/epilog context: allocator only. */
    if (spank_context() != S_CTX_ALLOCATOR)
        return 0;
    /* cli_filter.lua has run: the site settings must not reach the job's environment. */
    site_env_clear();
    have_record = read_record(&rec) == 0;
    plan_fd_close();
    if (g_disabled)
        return 0;

    /* idempotent: values from an earlier pass (e.g. a het job component) must not stay */
    spank_job_control_unsetenv(sp, "TULA_PLAN");
    spank_job_control_unsetenv(sp, "TULA_WORKLOAD");
    spank_job_control_unsetenv(sp, "TULA_POLICY");

    if (!have_record) {
        /* No cli_filter ran (or it gave no answer): the job gets only the --tula option's
         * mode, so that it says that no plan reached it. */
        if (tula_plugin_mode_active(g_opt_mode))
            job_setenv(sp, "TULA_MODE", g_opt_mode);
        return 0;
    }
    /* What cli_filter.lua decided, as it decided it. */
    if (!tula_plugin_mode_active(rec.mode))
        return 0;
    if (rec.policy[0])
        job_setenv(sp, "TULA_POLICY", rec.policy);
    if (job_setenv(sp, "TULA_MODE", rec.mode) != 0)
        return 0;
    if (rec.table[0])
        job_setenv(sp, "TULA_PLAN", rec.table);
    if (rec.workload[0])
        job_setenv(sp, "TULA_WORKLOAD", rec.workload);
    return 0;
}

/* spank_getenv into buf; 1 when the variable exists and fits, 0 when it is absent, -1 when
 * it is longer than the buffer. */
static int job_getenv(spank_t sp, const char *name, char *buf, int len)
{
    spank_err_t rc = spank_getenv(sp, name, buf, len);
    if (rc == ESPANK_SUCCESS)
        return 1;
    buf[0] = '\0';
    return rc == ESPANK_NOSPACE ? -1 : 0;
}

/* Tells the job why it got no plan: $TULA_WARNING and a line in slurmd's log. */
static int plan_failed(spank_t sp, uint32_t jobid, const char *why)
{
    char line[TULA_MSG_MAX];
    tula_plugin_one_line(why, line, sizeof line);
    slurm_info("%s (job %u)", line, jobid);
    if (spank_setenv(sp, "TULA_WARNING", line, 1) != ESPANK_SUCCESS)
        slurm_info("tula: cannot set TULA_WARNING for job %u", jobid);
    return 0; /* never fail the step: slurmstepd would drain the node */
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    char raw_mode[32], mode[16], err[TULA_MSG_MAX], msg[TULA_MSG_MAX + 32];
    char nodes_s[32], table[TULA_PLAN_MAX];
    uint32_t stepid = 0, jobid = 0, nnodes = 0;
    int nodes, i, rc, ranks, planned_batch;
    char ntasks_s[16];
    struct tula_plan_row row;
    struct tula_plugin_env env[TULA_PLUGIN_ENV_COUNT];

    (void)ac;
    (void)av;
    if (!spank_remote(sp) || g_disabled)
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS || stepid != SLURM_BATCH_SCRIPT)
        return 0;  /* other steps inherit the batch script's environment */
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        jobid = 0;

    /* Only a job that Tula is on for (its decision record, or an active --tula) has
     * SLURM_SPANK_TULA_MODE. */
    if (job_getenv(sp, "SLURM_SPANK_TULA_MODE", raw_mode, sizeof raw_mode) != 1)
        return 0;
    if (tula_parse_mode(raw_mode, mode, sizeof mode, err, sizeof err) != 0 || !tula_plugin_mode_plans(mode))
        return 0;

    /* S_JOB_NNODES is 0 in the batch step: the allocation is in SLURM_JOB_NUM_NODES. */
    nodes = -1;
    if (job_getenv(sp, "SLURM_JOB_NUM_NODES", nodes_s, sizeof nodes_s) == 1)
        nodes = tula_plugin_parse_nodes(nodes_s);
    if (nodes < 1 && spank_get_item(sp, S_JOB_NNODES, &nnodes) == ESPANK_SUCCESS && nnodes > 0 &&
        nnodes <= 1000000)
        nodes = (int)nnodes;
    if (nodes < 1)
        return plan_failed(sp, jobid, "tula: cannot tell how many nodes the job has (SLURM_JOB_NUM_NODES); "
                                      "the job runs unchanged");

    rc = job_getenv(sp, "SLURM_SPANK_TULA_PLAN", table, sizeof table);
    if (rc == 0)
        return plan_failed(sp, jobid, "tula: no plan reached the job (tula plan failed or timed out at "
                                      "submission, see sbatch's message); the job runs unchanged");
    if (rc < 0)
        return plan_failed(sp, jobid, "tula: the job's plan table is too long; the job runs unchanged");
    rc = tula_plugin_plan_table(table, nodes, &row, err, sizeof err);
    if (rc <= 0) {
        snprintf(msg, sizeof msg, "%s; the job runs unchanged", err);
        return plan_failed(sp, jobid, msg);
    }
    /* The ranks the job has (SLURM_NTASKS, a bounded integer; unset: the planned ranks per node
     * on every node): each rank keeps the planned local batch. */
    ranks = -1;
    if (job_getenv(sp, "SLURM_NTASKS", ntasks_s, sizeof ntasks_s) == 1)
        ranks = tula_plugin_parse_nodes(ntasks_s);
    planned_batch = row.global_batch;
    row.global_batch = tula_plugin_rank_batch(&row, ranks);
    if (row.global_batch != planned_batch)
        slurm_info("tula: job %u has %d ranks where the plan had %d x %d: global batch %d -> %d (the planned "
                   "local batch on every rank)", jobid, ranks, row.nodes, row.ranks_per_node, planned_batch,
                   row.global_batch);
    if (tula_plugin_plan_env(&row, env, err, sizeof err) != 0) {
        snprintf(msg, sizeof msg, "%s; the job runs unchanged", err);
        return plan_failed(sp, jobid, msg);
    }
    for (i = 0; i < TULA_PLUGIN_ENV_COUNT; i++) {
        spank_err_t src = spank_setenv(sp, env[i].name, env[i].value, 1);
        if (src != ESPANK_SUCCESS) {
            slurm_info("tula: cannot set %s for job %u: %s", env[i].name, jobid, spank_strerror(src));
            return 0;
        }
    }
    slurm_info("tula: %s on %d node%s: global batch %d, %d epochs, predicted %s s (job %u)", row.workload,
               row.nodes, row.nodes == 1 ? "" : "s", row.global_batch, row.epochs, env[3].value, jobid);
    return 0;
}
