/* spank_tula.c: the Tula SPANK plugin (tula.so), thin C glue between Slurm and libtula's
 * C API (tula/tula.h). See spank-tula(8).
 *
 * Contexts and what happens in each (Slurm 22.05):
 *   allocator (sbatch, salloc)
 *     slurm_spank_init       parses the plugstack arguments, registers --tula[=MODE],
 *                            --tula-workload=NAME, --tula-deadline=HH:MM:SS and --tula-budget=X
 *                            with spank_option_register (sbatch ignores a static spank_options
 *                            table), and hands the site settings (conf=, db=, margin=, strict)
 *                            to cli_filter.lua through sbatch's own environment
 *                            (TULA_PLUGSTACK_CONF, _DB, _MARGIN, _STRICT; the hook runs in the
 *                            same process after this and cannot see plugstack.conf).
 *     option callbacks       validate and store the value (idempotent: Slurm may call them
 *                            for #SBATCH lines and again for the command line); an invalid
 *                            --tula value makes sbatch refuse the job with one message that
 *                            lists the valid values.
 *     slurm_spank_init_post_opt
 *                            when the mode (option, else $TULA_MODE) is auto/time/cost/dry-run:
 *                            spank_job_control_setenv TULA_MODE and TULA_WORKLOAD, which reach
 *                            the job as SLURM_SPANK_TULA_MODE / SLURM_SPANK_TULA_WORKLOAD.
 *                            and, with a deadline or budget, TULA_POLICY=deadline=HH:MM:SS or
 *                            budget=X. Removes the TULA_PLUGSTACK_* variables again first,
 *                            so that they never reach the job (sbatch takes the job's
 *                            environment after this callback).
 *                            The node count and time limit are set by cli_filter.lua, not here
 *                            (no SPANK call can change them).
 *   remote (slurmstepd, root)
 *     slurm_spank_init       the same options, so that their values are accepted there.
 *     slurm_spank_user_init  (privileges already dropped to the job user) batch step only:
 *                            plans the global batch for the nodes actually allocated with
 *                            tula_plan_job and exports TULA_BATCH_SIZE, TULA_NODES,
 *                            TULA_EPOCHS, TULA_PREDICTED_SECONDS, TULA_WORKLOAD to the batch
 *                            script (other steps inherit them from it); on failure
 *                            TULA_WARNING with the reason. Runs only with the job user's
 *                            effective uid (checked): the batch script and the user's database
 *                            are opened with the user's privileges; the plugin writes no file
 *                            as root. Every string from the job's environment is read into a
 *                            fixed buffer; longer ones are refused, not truncated.
 *   local (srun), slurmd, prolog/epilog: nothing.
 *
 * Failure policy: Tula never breaks a submission or a job; every problem is one "tula: ..."
 * line (TULA_WARNING in the job). With `strict` on the plugstack line, bad plugstack
 * arguments or a mode that cannot be passed to the job make the sbatch callbacks fail (which
 * stops the submission when the line is `required`); in slurmstepd the plugin never fails,
 * because a failing SPANK plugin there drains the node. libtula's C API never throws.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "tula_plugin.h"
#include "tula/tula.h"

SPANK_PLUGIN(tula, 1);

/* Longest $XDG_DATA_HOME / $HOME taken from the job's environment, bytes with the NUL. */
#define ENV_PATH_MAX 1024

static struct tula_plugin_config g_cfg;  /* plugstack arguments */
static int g_disabled;                    /* 1: bad plugstack arguments, the plugin does nothing */
static char g_cfg_err[TULA_MSG_MAX];      /* why it is disabled */
static char g_opt_mode[16];               /* canonical --tula value; "" = option not given */
static char g_opt_workload[TULA_NAME_MAX]; /* --tula-workload value; "" = not given */
static char g_opt_deadline[16];           /* --tula-deadline value (HH:MM:SS); "" = not given */
static char g_opt_budget[24];             /* --tula-budget value; "" = not given */

enum { OPT_TULA = 1, OPT_WORKLOAD = 2, OPT_DEADLINE = 3, OPT_BUDGET = 4 };

/* The variables that carry the plugstack's site settings to cli_filter.lua inside sbatch. */
static const char *const g_site_vars[] = {"TULA_PLUGSTACK_CONF", "TULA_PLUGSTACK_DB", "TULA_PLUGSTACK_MARGIN",
                                          "TULA_PLUGSTACK_STRICT"};

static void site_env_clear(void)
{
    size_t i;
    for (i = 0; i < sizeof g_site_vars / sizeof g_site_vars[0]; i++)
        unsetenv(g_site_vars[i]);
}

/* sbatch only: the site settings for cli_filter.lua (any value the user had set is dropped). */
static void site_env_export(void)
{
    site_env_clear();
    if (g_disabled)
        return;
    if (g_cfg.conf[0])
        setenv("TULA_PLUGSTACK_CONF", g_cfg.conf, 1);
    if (g_cfg.db[0])
        setenv("TULA_PLUGSTACK_DB", g_cfg.db, 1);
    if (g_cfg.margin[0])
        setenv("TULA_PLUGSTACK_MARGIN", g_cfg.margin, 1);
    if (g_cfg.strict)
        setenv("TULA_PLUGSTACK_STRICT", "1", 1);
}

/* --tula[=MODE]: bare --tula (optarg NULL or "") means auto. */
static int opt_mode_cb(int val, const char *optarg, int remote)
{
    char mode[16], err[TULA_MSG_MAX];
    (void)val;
    if (tula_parse_mode(optarg, mode, sizeof mode, err, sizeof err) != 0) {
        if (!remote)
            slurm_error("%s", err);
        else
            slurm_info("%s", err);
        return -1;
    }
    memcpy(g_opt_mode, mode, sizeof g_opt_mode);
    return 0;
}

/* --tula-workload=MODEL@DATASET */
static int opt_workload_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_plugin_check_workload(optarg, err, sizeof err) != 0) {
        if (!remote)
            slurm_error("%s", err);
        else
            slurm_info("%s", err);
        return -1;
    }
    snprintf(g_opt_workload, sizeof g_opt_workload, "%s", optarg);
    return 0;
}

/* --tula-deadline=HH:MM:SS */
static int opt_deadline_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_plugin_check_deadline(optarg, err, sizeof err) < 0) {
        if (!remote)
            slurm_error("%s", err);
        else
            slurm_info("%s", err);
        return -1;
    }
    snprintf(g_opt_deadline, sizeof g_opt_deadline, "%s", optarg);
    return 0;
}

/* --tula-budget=X */
static int opt_budget_cb(int val, const char *optarg, int remote)
{
    char err[TULA_MSG_MAX];
    (void)val;
    if (tula_plugin_check_budget(optarg, err, sizeof err) != 0) {
        if (!remote)
            slurm_error("%s", err);
        else
            slurm_info("%s", err);
        return -1;
    }
    snprintf(g_opt_budget, sizeof g_opt_budget, "%s", optarg);
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
        /* In sbatch, only users who ask for --tula hear about it (init_post_opt). */
        if (ctx == S_CTX_REMOTE || g_cfg.strict)
            slurm_error("%s; the Tula plugin is disabled", g_cfg_err);
        else
            slurm_verbose("%s; the Tula plugin is disabled", g_cfg_err);
    }

    if (ctx == S_CTX_ALLOCATOR)
        site_env_export();

    /* Registered even when disabled: sbatch must still accept --tula in scripts. */
    for (i = 0; g_options[i].name; i++) {
        spank_err_t rc = spank_option_register(sp, &g_options[i]);
        if (rc != ESPANK_SUCCESS)
            slurm_error("tula: cannot register option --%s: %s", g_options[i].name, spank_strerror(rc));
    }
    /* strict fails the submission (a `required` line then stops sbatch), never a job step:
     * a failing plugin in slurmstepd drains the node. */
    return (g_disabled && g_cfg.strict && ctx == S_CTX_ALLOCATOR) ? -1 : 0;
}

/* The mode for this submission: --tula, else $TULA_MODE, else off. 0 and the canonical
 * mode in `mode` (16 bytes), or -1 when $TULA_MODE is invalid (cli_filter.lua tells the user). */
static int submission_mode(char *mode)
{
    char err[TULA_MSG_MAX];
    const char *env;

    if (g_opt_mode[0] != '\0') {
        memcpy(mode, g_opt_mode, 16);
        return 0;
    }
    env = getenv("TULA_MODE");
    if (!env || env[0] == '\0') {
        /* a deadline or budget given as an option turns Tula on (as in cli_filter.lua) */
        snprintf(mode, 16, "%s", (g_opt_deadline[0] || g_opt_budget[0]) ? "auto" : "off");
        return 0;
    }
    if (tula_parse_mode(env, mode, 16, err, sizeof err) != 0) {
        slurm_verbose("%s (from $TULA_MODE); Tula is off for this job", err);
        return -1;
    }
    return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    char mode[16], err[TULA_MSG_MAX];
    const char *workload = NULL;
    spank_err_t rc;

    char policy[48];
    const char *deadline = NULL, *budget = NULL;

    (void)ac;
    (void)av;
    /* spank_job_control_setenv crashes in prolog/epilog context: allocator only. */
    if (spank_context() != S_CTX_ALLOCATOR)
        return 0;
    /* cli_filter.lua has run: the site settings must not reach the job's environment. */
    site_env_clear();
    if (submission_mode(mode) != 0 || !tula_plugin_mode_active(mode))
        return 0;
    if (g_disabled) {
        slurm_error("%s; the Tula plugin is disabled (tell your administrator)", g_cfg_err);
        return g_cfg.strict ? -1 : 0;
    }

    if (g_opt_workload[0] != '\0') {
        workload = g_opt_workload;
    } else {
        const char *env = getenv("TULA_WORKLOAD");
        if (env && env[0] != '\0') {
            if (tula_plugin_check_workload(env, err, sizeof err) != 0) {
                /* cli_filter.lua reports it and leaves the job unchanged; so do we. */
                slurm_verbose("%s (from $TULA_WORKLOAD); Tula is off for this job", err);
                return 0;
            }
            workload = env;
        }
    }

    /* deadline / budget: option, else environment; invalid or both -> cli_filter.lua warns and
     * leaves the job unchanged; the batch size is then planned with the mode alone. */
    deadline = g_opt_deadline[0] ? g_opt_deadline : getenv("TULA_DEADLINE");
    budget = g_opt_budget[0] ? g_opt_budget : getenv("TULA_BUDGET");
    if (deadline && deadline[0] == '\0')
        deadline = NULL;
    if (budget && budget[0] == '\0')
        budget = NULL;
    policy[0] = '\0';
    if (deadline && !budget && tula_plugin_check_deadline(deadline, err, sizeof err) > 0)
        snprintf(policy, sizeof policy, "deadline=%s", deadline);
    else if (budget && !deadline && tula_plugin_check_budget(budget, err, sizeof err) == 0)
        snprintf(policy, sizeof policy, "budget=%s", budget);
    if (policy[0]) {
        rc = spank_job_control_setenv(sp, "TULA_POLICY", policy, 1);
        if (rc != ESPANK_SUCCESS)
            slurm_verbose("tula: cannot pass the policy to the job: %s", spank_strerror(rc));
    } else {
        spank_job_control_unsetenv(sp, "TULA_POLICY");
    }

    rc = spank_job_control_setenv(sp, "TULA_MODE", mode, 1);
    if (rc != ESPANK_SUCCESS) {
        slurm_error("tula: cannot pass the mode to the job: %s", spank_strerror(rc));
        return g_cfg.strict ? -1 : 0;
    }
    if (workload) {
        rc = spank_job_control_setenv(sp, "TULA_WORKLOAD", workload, 1);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("tula: cannot pass the workload to the job: %s", spank_strerror(rc));
            spank_job_control_unsetenv(sp, "TULA_MODE");
            return g_cfg.strict ? -1 : 0;
        }
    } else {
        /* idempotent: a value from an earlier pass (e.g. a het job component) must not stay */
        spank_job_control_unsetenv(sp, "TULA_WORKLOAD");
    }
    return 0;
}

/* spank_getenv into buf; 1 when the variable exists and fits, 0 when it is absent, -1 when
 * it is longer than the buffer (logged). */
static int job_getenv(spank_t sp, const char *name, char *buf, int len)
{
    spank_err_t rc = spank_getenv(sp, name, buf, len);
    if (rc == ESPANK_SUCCESS)
        return 1;
    buf[0] = '\0';
    if (rc == ESPANK_NOSPACE) {
        slurm_info("tula: ignoring $%s: longer than %d bytes", name, len - 1);
        return -1;
    }
    return 0;
}

/* Tells the job why it did not get a plan: $TULA_WARNING and a line in slurmd's log. */
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
    char raw_mode[32], mode[16], err[TULA_MSG_MAX], policy[48];
    uid_t job_uid = 0;
    char nodes_s[32], workload[TULA_NAME_MAX];
    char xdg[ENV_PATH_MAX], home[ENV_PATH_MAX];
    uint32_t stepid = 0, jobid = 0, nnodes = 0;
    int argc = 0, nodes, i, prc;
    char **argv = NULL;
    tula_job_query q;
    tula_job_plan plan;
    struct tula_plugin_env env[TULA_PLUGIN_ENV_COUNT];

    (void)ac;
    (void)av;
    if (!spank_remote(sp) || g_disabled)
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS || stepid != SLURM_BATCH_SCRIPT)
        return 0;  /* other steps inherit the batch script's environment */
    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        jobid = 0;

    /* Only a job submitted with an active --tula has SLURM_SPANK_TULA_MODE. */
    if (job_getenv(sp, "SLURM_SPANK_TULA_MODE", raw_mode, sizeof raw_mode) != 1)
        return 0;
    if (tula_parse_mode(raw_mode, mode, sizeof mode, err, sizeof err) != 0) {
        slurm_info("%s (SLURM_SPANK_TULA_MODE of job %u); nothing done", err, jobid);
        return 0;
    }
    if (!tula_plugin_mode_plans(mode))
        return 0;

    /* Files of the user are opened below: only with the user's privileges (Slurm drops them
     * before user_init; if a Slurm ever did not, do nothing rather than read as root). */
    if (spank_get_item(sp, S_JOB_UID, &job_uid) != ESPANK_SUCCESS || geteuid() != job_uid)
        return plan_failed(sp, jobid, "tula: not running with the job user's privileges; no batch size planned");
    if (job_getenv(sp, "SLURM_SPANK_TULA_POLICY", policy, sizeof policy) != 1)
        policy[0] = '\0';

    /* S_JOB_NNODES is 0 in the batch step: the allocation is in SLURM_JOB_NUM_NODES. */
    nodes = -1;
    if (job_getenv(sp, "SLURM_JOB_NUM_NODES", nodes_s, sizeof nodes_s) == 1)
        nodes = tula_plugin_parse_nodes(nodes_s);
    if (nodes < 1 && spank_get_item(sp, S_JOB_NNODES, &nnodes) == ESPANK_SUCCESS && nnodes > 0 &&
        nnodes <= 1000000)
        nodes = (int)nnodes;
    if (nodes < 1)
        return plan_failed(sp, jobid, "tula: cannot tell how many nodes the job has (SLURM_JOB_NUM_NODES); "
                                      "no batch size planned");

    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS) {
        argc = 0;
        argv = NULL;
    }
    if (job_getenv(sp, "SLURM_SPANK_TULA_WORKLOAD", workload, sizeof workload) == -1)
        return plan_failed(sp, jobid, "tula: the workload name is too long; no batch size planned");
    if (job_getenv(sp, "XDG_DATA_HOME", xdg, sizeof xdg) != 1)
        xdg[0] = '\0';
    if (job_getenv(sp, "HOME", home, sizeof home) != 1)
        home[0] = '\0';

    memset(&q, 0, sizeof q);
    q.conf_path = g_cfg.conf[0] ? g_cfg.conf : NULL;
    q.system_db = g_cfg.db[0] ? g_cfg.db : NULL;
    q.xdg_data_home = xdg[0] ? xdg : NULL;
    q.home = home[0] ? home : NULL;
    q.workload = workload[0] ? workload : NULL;
    q.script_path = (argc > 0 && argv && argv[0] && argv[0][0]) ? argv[0] : NULL;
    q.policy = policy[0] ? policy : mode;
    q.nodes = nodes;

    prc = tula_plan_job(&q, &plan);
    if (prc != 0 && policy[0]) {
        /* a libtula without that policy, or no plan meets it on this allocation: the mode */
        q.policy = mode;
        prc = tula_plan_job(&q, &plan);
    }
    if (prc != 0) {
        plan.message[sizeof plan.message - 1] = '\0';
        return plan_failed(sp, jobid, plan.message[0] ? plan.message : "tula: planning failed");
    }
    if (tula_plugin_plan_env(&plan, env, err, sizeof err) != 0)
        return plan_failed(sp, jobid, err);
    for (i = 0; i < TULA_PLUGIN_ENV_COUNT; i++) {
        spank_err_t rc = spank_setenv(sp, env[i].name, env[i].value, 1);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("tula: cannot set %s for job %u: %s", env[i].name, jobid, spank_strerror(rc));
            return 0;
        }
    }
    plan.message[sizeof plan.message - 1] = '\0';
    tula_plugin_one_line(plan.message, err, sizeof err);
    slurm_info("%s (job %u)", err, jobid);
    return 0;
}
