/*
 * slurm-gavel.so - SPANK plugin: `sbatch/srun/salloc --gavel` (or --gavel-job-type=TYPE)
 * and friends.
 *
 * At submit time (allocator context: sbatch, salloc; local context: srun outside an
 * allocation) it refuses the options with salloc and srun (an interactive job has no
 * batch script to checkpoint and requeue: it could never be preempted) and for sbatch
 *   - validates --gavel-job-type (an optional hint: --gavel alone makes a managed job
 *     whose speeds the daemon learns as it runs) against the site's list of known job
 *     types and refuses an unknown type, printing the known ones;
 *   - makes the job visible to the slurm-gavel daemon by setting the job's comment to
 *     "gavel:[type=<TYPE>,][scale=N,][weight=W,]..." ("gavel:" alone for --gavel), the
 *     form a site without this plugin writes with --comment=... (parsed by
 *     slurm_gavel/domain/comment_grammar.py);
 *   - optionally holds the job (hold=yes) so Slurm never starts it before the daemon
 *     has placed it (conf/slurm/job_submit.lua does this better, on the controller);
 *   - exports GAVEL_JOB_TYPE, GAVEL_SCALE, GAVEL_PRIORITY, GAVEL_TOTAL_STEPS and
 *     GAVEL_CHECKPOINT_DIR into the submitting environment (the job sees them with the
 *     default --export=ALL) and into the job control environment (the job always sees
 *     SLURM_SPANK_GAVEL_*, also with --export=NONE; prolog/epilog see SPANK_GAVEL_*).
 *     Setting GAVEL_* from slurmstepd (user_init/task_init + spank_setenv) was tried on
 *     22.05 and does not reach the batch step's environment, hence the two names.
 *
 * Plugstack arguments: types=FILE (one type per line, '#' comments; default:
 * job-types.txt beside the plugin if present; with neither, any type is accepted),
 * hold=yes|no (default no), progress_dir=DIR (the spool folder where slurm_gavel.job
 * writes progress reports; exported to managed jobs as GAVEL_PROGRESS_DIR) and
 * max_weight=W (default 1: the cap on --gavel-priority and weight=; a user may only
 * lower their own share; keep it equal to the daemon's weights.max_user_weight and
 * MAX_USER_WEIGHT in job_submit.lua).
 *
 * The comment grammar (gavel_grammar.h) is the one slurm_gavel/domain/comment_grammar.py and
 * conf/slurm/job_submit.lua enforce: every --gavel-* value is checked against it, the
 * comment built from them is checked whole, and a --comment=gavel:... written by hand
 * is refused here when the daemon would refuse it.
 *
 * WHY the comment is set through slurm_option_set(): SPANK 22.05 has no call that
 * changes a job descriptor field, and the job control environment is not visible in
 * squeue/scontrol output, which is all the daemon reads. sbatch, salloc and srun
 * export their option struct as the dynamic symbol `opt`, and libslurmfull exports
 * slurm_option_set()/slurm_option_get(); slurm_spank_init_post_opt runs after option
 * parsing and before the job descriptor is filled, so a value set there is submitted.
 * Only the two symbol names are relied on, never the struct layout. If either symbol
 * is missing (another Slurm build) the plugin says so and submission fails, rather
 * than silently submitting a job the daemon would not recognise.
 *
 * plugstack.conf line:
 *   optional /usr/lib/slurm-gavel/slurm-gavel.so types=/etc/slurm/gavel-job-types.txt hold=no
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "gavel_grammar.h"

SPANK_PLUGIN(slurm_gavel, 1);

#define MAX_VALUE 256
#define MAX_TYPES 1024

enum { OPT_TYPE = 1, OPT_SCALE, OPT_PRIORITY, OPT_CKPT_DIR, OPT_STEPS, OPT_GRACE, OPT_GAVEL };

static char job_type[MAX_VALUE];
static bool opted_in; /* --gavel: managed without naming a type */
static char scale[32];
static char priority[32];
static char steps[32];
static char grace[32];
static long long max_weight_micro = GAVEL_DEFAULT_MAX_WEIGHT_MICRO;
static char ckpt_dir[4096];

static char types_file[4096];
static char progress_dir[4096];
static bool hold_on_submit;
static char *known_types[MAX_TYPES];
static int n_known_types = -1; /* -1: no types= argument, accept any type */

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option gavel_options[] = {
	{"gavel", NULL,
	 "make this job managed by slurm-gavel; it learns the job's speed on each GPU type as "
	 "it runs (no job type needed; --gavel-job-type names one as a hint)",
	 0, OPT_GAVEL, opt_cb},
	{"gavel-job-type", "TYPE",
	 "slurm-gavel job type (a row of the site's throughput table, e.g. "
	 "'ResNet-50 (batch size 64)'); makes the job managed by slurm-gavel",
	 1, OPT_TYPE, opt_cb},
	{"gavel-scale", "N|MIN-MAX",
	 "GPUs the job uses (slurm-gavel scale factor; default 1), or a range MIN-MAX the "
	 "daemon may choose from at each (re)start (placed at MIN until it chooses)", 1,
	 OPT_SCALE, opt_cb},
	{"gavel-priority", "W",
	 "lower this job's slurm-gavel share: a weight in (0, 1] (default 1; the admin may allow "
	 "more); shares themselves come from the job's QOS and account",
	 1, OPT_PRIORITY, opt_cb},
	{"gavel-steps", "S",
	 "total training steps (read by finish-time policies; exported as GAVEL_TOTAL_STEPS)",
	 1, OPT_STEPS, opt_cb},
	{"gavel-grace", "SECONDS",
	 "seconds this job needs to checkpoint and exit after the signal (whole seconds, "
	 "1-86400; the admin's checkpoint.max_grace_seconds caps it; default: the site's grace)",
	 1, OPT_GRACE, opt_cb},
	{"gavel-checkpoint-dir", "DIR",
	 "where slurm_gavel.job saves and finds checkpoints (exported as GAVEL_CHECKPOINT_DIR)",
	 1, OPT_CKPT_DIR, opt_cb},
	SPANK_OPTIONS_TABLE_END};

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	size_t lead = strspn(s, " \t");
	if (lead)
		memmove(s, s + lead, strlen(s + lead) + 1);
}

static int load_known_types(void)
{
	FILE *f = fopen(types_file, "r");
	char line[MAX_VALUE * 2];

	if (!f) {
		slurm_error("slurm-gavel: cannot read the job type list %s (%s); the admin "
			    "generates it with `make -C spank job-types` and installs it",
			    types_file, strerror(errno));
		return -1;
	}
	n_known_types = 0;
	while (fgets(line, sizeof(line), f) && n_known_types < MAX_TYPES) {
		trim(line);
		if (line[0] == '\0' || line[0] == '#')
			continue;
		known_types[n_known_types++] = strdup(line);
	}
	fclose(f);
	return 0;
}

/* Exact match first; then a unique case-insensitive match, which is canonicalised. */
static const char *find_type(const char *t)
{
	const char *found = NULL;
	int i, hits = 0;

	for (i = 0; i < n_known_types; i++)
		if (strcmp(known_types[i], t) == 0)
			return known_types[i];
	for (i = 0; i < n_known_types; i++)
		if (strcasecmp(known_types[i], t) == 0) {
			found = known_types[i];
			hits++;
		}
	return hits == 1 ? found : NULL;
}

static int refuse_type(const char *t)
{
	int i;
	slurm_error("slurm-gavel: unknown job type '%s' (--gavel-job-type). Known types:", t);
	for (i = 0; i < n_known_types; i++)
		slurm_error("slurm-gavel:   %s", known_types[i]);
	slurm_error("slurm-gavel: pick one of those (quote it: --gavel-job-type='...'), or "
		    "submit with --gavel and no type: slurm-gavel learns your model's speeds "
		    "as it runs (types listed in %s)", types_file);
	return -1;
}

static int copy_value(char *dst, size_t size, const char *src, const char *name)
{
	if (!src || !*src) {
		slurm_error("slurm-gavel: --%s needs a value", name);
		return -1;
	}
	if (strlen(src) >= size) {
		slurm_error("slurm-gavel: --%s value is longer than %zu characters", name,
			    size - 1);
		return -1;
	}
	strcpy(dst, src);
	return 0;
}

/* One --gavel-* value against the comment grammar (gavel_grammar.h): what the daemon
 * accepts, no more (no inf, hex, exponent, sign or spaces; the weight cap). */
static int check_value(const char *key, const char *value, const char *option)
{
	char why[512];

	if (gavel_check_value(key, strlen(key), value, strlen(value), max_weight_micro, why,
			      sizeof(why)))
		return 0;
	slurm_error("slurm-gavel: --%s: %s", option, why);
	return -1;
}

static int opt_cb(int val, const char *optarg, int remote)
{
	switch (val) {
	case OPT_GAVEL:
		opted_in = true;
		return 0;
	case OPT_TYPE:
		if (copy_value(job_type, sizeof(job_type), optarg, "gavel-job-type"))
			return -1;
		trim(job_type);
		if (check_value("type", job_type, "gavel-job-type"))
			return -1;
		if (!remote && n_known_types >= 0) {
			const char *canon = find_type(job_type);
			if (!canon)
				return refuse_type(job_type);
			strcpy(job_type, canon);
		}
		return 0;
	case OPT_SCALE:
		if (copy_value(scale, sizeof(scale), optarg, "gavel-scale"))
			return -1;
		return check_value("scale", scale, "gavel-scale");
	case OPT_PRIORITY:
		if (copy_value(priority, sizeof(priority), optarg, "gavel-priority"))
			return -1;
		return check_value("weight", priority, "gavel-priority");
	case OPT_STEPS:
		if (copy_value(steps, sizeof(steps), optarg, "gavel-steps"))
			return -1;
		return check_value("steps", steps, "gavel-steps");
	case OPT_GRACE:
		if (copy_value(grace, sizeof(grace), optarg, "gavel-grace"))
			return -1;
		return check_value("grace", grace, "gavel-grace");
	case OPT_CKPT_DIR:
		return copy_value(ckpt_dir, sizeof(ckpt_dir), optarg, "gavel-checkpoint-dir");
	}
	return -1;
}

static int parse_args(int ac, char **av)
{
	int i;
	for (i = 0; i < ac; i++) {
		if (strncmp(av[i], "types=", 6) == 0) {
			snprintf(types_file, sizeof(types_file), "%s", av[i] + 6);
		} else if (strncmp(av[i], "progress_dir=", 13) == 0) {
			snprintf(progress_dir, sizeof(progress_dir), "%s", av[i] + 13);
		} else if (strncmp(av[i], "max_weight=", 11) == 0) {
			const char *v = av[i] + 11;
			if (!gavel_parse_decimal(v, strlen(v), &max_weight_micro) ||
			    max_weight_micro <= 0) {
				slurm_error("slurm-gavel: plugstack argument max_weight=%s: expected a "
					    "decimal > 0 such as 1 or 2.5", v);
				return -1;
			}
		} else if (strncmp(av[i], "hold=", 5) == 0) {
			const char *v = av[i] + 5;
			hold_on_submit = !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "true");
		} else {
			slurm_error("slurm-gavel: unknown plugstack argument '%s' (known: "
				    "types=FILE, hold=yes|no, progress_dir=DIR, max_weight=W)", av[i]);
			return -1;
		}
	}
	return 0;
}

/* Without types=: job-types.txt next to the plugin, if there (`make -C spank` puts
 * both in spank/build/, so a development cluster validates without extra config). */
static void default_types_file(void)
{
	Dl_info info;
	char *slash;

	if (!dladdr((void *)default_types_file, &info) || !info.dli_fname)
		return;
	snprintf(types_file, sizeof(types_file), "%s", info.dli_fname);
	slash = strrchr(types_file, '/');
	if (!slash || (size_t)(slash - types_file) + sizeof("/job-types.txt") > sizeof(types_file)) {
		types_file[0] = '\0';
		return;
	}
	strcpy(slash, "/job-types.txt");
	if (access(types_file, R_OK) != 0)
		types_file[0] = '\0';
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct spank_option *o;
	spank_context_t ctx = spank_context();

	if (parse_args(ac, av))
		return -1;
	if (!types_file[0])
		default_types_file();
	/* Only the submitting side validates: compute nodes need not have the list. */
	if (types_file[0] && (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL) &&
	    load_known_types())
		return -1;
	/* 22.05: sbatch only sees options registered here, not the static table. */
	for (o = gavel_options; o->name; o++)
		if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
			slurm_error("slurm-gavel: cannot register --%s", o->name);
			return -1;
		}
	return 0;
}

/* ",key=value" onto a comment ("key=value" right after the "gavel:" prefix); nothing
 * for an empty value. A value never ends in ':' (the grammar has no such character). */
static void add_key(char *buf, size_t size, const char *key, const char *value)
{
	size_t n = strlen(buf);

	if (!value[0] || n >= size)
		return;
	snprintf(buf + n, size - n, "%s%s=%s", buf[n - 1] == ':' ? "" : ",", key, value);
}

typedef char *(*option_get_f)(void *opt, const char *name);
typedef int (*option_set_f)(void *opt, const char *name, const char *value, bool early);

/*
 * Output kept across preemptions: every run of a managed job opens its output files
 * again, and Slurm's default (JobFileAppend=0) truncates them, so a job preempted three
 * times kept only its last run's output. Append unless the user chose a mode
 * (--open-mode, SBATCH_OPEN_MODE or #SBATCH: slurm_option_get gives NULL while unset).
 * job_submit.lua cannot do this: Slurm's Lua (22.05-26.05) does not expose the open mode.
 */
static int append_output(void *opt, option_get_f get, option_set_f set)
{
	if (get(opt, "open-mode"))
		return 0;
	if (set(opt, "open-mode", "append", false)) {
		slurm_error("slurm-gavel: could not set --open-mode=append");
		return -1;
	}
	return 0;
}

/* Set the job's comment (and hold) in sbatch/salloc/srun's own option struct. */
static int set_submit_options(void)
{
	void *opt = dlsym(RTLD_DEFAULT, "opt");
	option_get_f get = (option_get_f)dlsym(RTLD_DEFAULT, "slurm_option_get");
	option_set_f set = (option_set_f)dlsym(RTLD_DEFAULT, "slurm_option_set");
	char comment[MAX_VALUE + 200];
	char why[512];
	char *old;

	if (!opt || !get || !set) {
		slurm_error("slurm-gavel: this Slurm build does not export opt/slurm_option_set; "
			    "cannot mark the job as managed. Submit with "
			    "--comment='gavel:%s%s' instead", job_type[0] ? "type=" : "", job_type);
		return -1;
	}
	/* Keys as slurm_gavel/domain/comment_grammar.py reads them: type, scale, weight, steps, grace;
	 * "gavel:" alone when none is given (--gavel). */
	snprintf(comment, sizeof(comment), GAVEL_PREFIX);
	add_key(comment, sizeof(comment), "type", job_type);
	add_key(comment, sizeof(comment), "scale", scale);
	add_key(comment, sizeof(comment), "weight", priority);
	add_key(comment, sizeof(comment), "steps", steps);
	add_key(comment, sizeof(comment), "grace", grace);
	/* The daemon reads the comment whole: it must follow the grammar as a whole too. */
	if (gavel_check_comment(comment, max_weight_micro, why, sizeof(why)) != GAVEL_MANAGED) {
		slurm_error("slurm-gavel: the job comment '%s' would be refused: %s", comment, why);
		return -1;
	}
	old = get(opt, "comment");
	/* A user's own comment would be lost: refuse rather than overwrite it silently.
	 * A gavel: comment (e.g. from a wrapper) is replaced by the option's value. */
	if (old && *old && strncmp(old, "gavel:", 6) != 0) {
		slurm_error("slurm-gavel: --comment='%s' is taken: slurm-gavel stores the job type "
			    "in the job's comment. Drop --comment or use "
			    "--comment='%s' without --gavel-job-type", old, comment);
		return -1;
	}
	if (set(opt, "comment", comment, false)) {
		slurm_error("slurm-gavel: could not set the job comment to '%s'", comment);
		return -1;
	}
	if (hold_on_submit && set(opt, "hold", NULL, false)) {
		slurm_error("slurm-gavel: could not hold the job on submission");
		return -1;
	}
	return append_output(opt, get, set);
}

static int export_local(spank_t sp)
{
	if ((job_type[0] && setenv("GAVEL_JOB_TYPE", job_type, 1)) ||
	    (scale[0] && setenv("GAVEL_SCALE", scale, 1)) ||
	    (priority[0] && setenv("GAVEL_PRIORITY", priority, 1)) ||
	    (steps[0] && setenv("GAVEL_TOTAL_STEPS", steps, 1)) ||
	    (ckpt_dir[0] && setenv("GAVEL_CHECKPOINT_DIR", ckpt_dir, 1)) ||
	    (progress_dir[0] && setenv("GAVEL_PROGRESS_DIR", progress_dir, 1))) {
		slurm_error("slurm-gavel: setenv failed: %s", strerror(errno));
		return -1;
	}
	/* The job control environment reaches the job as SLURM_SPANK_GAVEL_* even with
	 * --export=NONE (and the prolog/epilog as SPANK_GAVEL_*); slurm_gavel.job reads
	 * GAVEL_* first, then SLURM_SPANK_GAVEL_*. */
	if ((job_type[0] && spank_job_control_setenv(sp, "GAVEL_JOB_TYPE", job_type, 1)) ||
	    (scale[0] && spank_job_control_setenv(sp, "GAVEL_SCALE", scale, 1)) ||
	    (priority[0] && spank_job_control_setenv(sp, "GAVEL_PRIORITY", priority, 1)) ||
	    (steps[0] && spank_job_control_setenv(sp, "GAVEL_TOTAL_STEPS", steps, 1)) ||
	    (ckpt_dir[0] && spank_job_control_setenv(sp, "GAVEL_CHECKPOINT_DIR", ckpt_dir, 1)) ||
	    (progress_dir[0] &&
	     spank_job_control_setenv(sp, "GAVEL_PROGRESS_DIR", progress_dir, 1)))
		slurm_error("slurm-gavel: could not set the job control environment");
	return 0;
}

/*
 * Without --gavel-job-type: a --comment=gavel:... written by hand is checked here, so
 * the user hears at once what the daemon and job_submit.lua would refuse. Plain
 * comments pass. Where sbatch does not export its options this check is skipped
 * (job_submit.lua still refuses the job on the controller).
 */
static bool interactive(spank_context_t ctx);

static int check_user_comment(spank_context_t ctx)
{
	void *opt = dlsym(RTLD_DEFAULT, "opt");
	option_get_f get = (option_get_f)dlsym(RTLD_DEFAULT, "slurm_option_get");
	option_set_f set = (option_set_f)dlsym(RTLD_DEFAULT, "slurm_option_set");
	char why[512];
	char *comment;
	int verdict;

	if (!opt || !get)
		return 0;
	comment = get(opt, "comment");
	verdict = gavel_check_comment(comment, max_weight_micro, why, sizeof(why));
	/* a managed sbatch job written by hand keeps its output as --gavel's does */
	if (verdict == GAVEL_MANAGED && set && ctx == S_CTX_ALLOCATOR && !interactive(ctx))
		return append_output(opt, get, set);
	if (verdict != GAVEL_REFUSED)
		return 0;
	slurm_error("slurm-gavel: --comment refused: %s; write --comment='" GAVEL_FORM "'", why);
	return -1;
}

/*
 * SPANK ignores a failing init_post_opt of a plugin loaded as "optional" (only
 * "required" plugins abort), which would submit a job the daemon does not recognise.
 * sbatch/salloc/srun have not contacted slurmctld yet at this point, so exiting here
 * refuses the submission whatever keyword the plugstack line uses.
 */
static int refuse_submit(void)
{
	slurm_error("slurm-gavel: job not submitted");
	exit(1);
	return -1;
}

/*
 * An interactive job (salloc, or srun outside a job: both make an allocation with no
 * batch script) cannot be managed: the daemon preempts a job by signalling its batch
 * script to checkpoint and requeueing it. job_submit.lua refuses one on the
 * controller; this refuses it here, before anything is sent, with the same reason.
 * sbatch and salloc both run in the allocator context: the program's name tells them
 * apart (a renamed salloc still meets the Lua).
 */
static bool interactive(spank_context_t ctx)
{
	if (ctx == S_CTX_LOCAL)
		return !getenv("SLURM_JOB_ID");
	return ctx == S_CTX_ALLOCATOR && strcmp(program_invocation_short_name, "salloc") == 0;
}

static int refuse_interactive(void)
{
	slurm_error("slurm-gavel: salloc and srun jobs cannot be managed by the gavel "
		    "scheduler: it preempts a job by signalling its batch script to checkpoint "
		    "and requeueing it, and an interactive allocation has no script to requeue; "
		    "submit the work with sbatch, or drop the gavel option for a plain "
		    "interactive allocation");
	return refuse_submit();
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	(void)ac;
	(void)av;

	if (!job_type[0] && !opted_in) {
		bool submits = ctx == S_CTX_ALLOCATOR || (ctx == S_CTX_LOCAL && !getenv("SLURM_JOB_ID"));
		if (scale[0] || priority[0] || ckpt_dir[0] || steps[0] || grace[0]) {
			if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL) {
				slurm_error("slurm-gavel: --gavel-scale/--gavel-priority/--gavel-steps/"
					    "--gavel-grace/--gavel-checkpoint-dir need --gavel "
					    "(or --gavel-job-type=TYPE)");
				return refuse_submit();
			}
		}
		return submits && check_user_comment(ctx) ? refuse_submit() : 0;
	}
	if (interactive(ctx))
		return refuse_interactive();
	if (ctx == S_CTX_ALLOCATOR)
		return export_local(sp) || set_submit_options() ? refuse_submit() : 0;
	if (ctx == S_CTX_LOCAL) {
		if (export_local(sp))
			return refuse_submit();
		/* srun inside an existing allocation starts a step, not a job. */
		return getenv("SLURM_JOB_ID") ? 0 : (set_submit_options() ? refuse_submit() : 0);
	}
	return 0;
}
