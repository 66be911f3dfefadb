/*
 * gavel_grammar.h - the slurm-gavel job comment grammar, for the SPANK plugin.
 *
 * One grammar, three enforcers: slurm_gavel/domain/comment_grammar.py (the daemon), conf/slurm/
 * job_submit.lua (slurmctld) and this file (sbatch/srun/salloc) must accept exactly
 * the same strings. The spec is in comment_grammar.py's docstring and docs/admin-guide.md;
 * tests/data/comment_grammar.json is the shared table, run against this code through
 * tests/spank/grammar_harness.c (plain gcc, no Slurm needed).
 *
 * Header-only and free of Slurm and locale dependencies (no ctype, no strtod): the
 * verdict must not change with the user's LC_ALL. Numbers are compared exactly, in
 * millionths, as the Python and Lua enforcers do.
 */
#ifndef GAVEL_GRAMMAR_H
#define GAVEL_GRAMMAR_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GAVEL_PREFIX "gavel:"
#define GAVEL_MAX_COMMENT_BYTES 256
#define GAVEL_MAX_TYPE_CHARS 64
#define GAVEL_MICRO 1000000LL
#define GAVEL_MAX_SCALE 1024LL
#define GAVEL_MAX_STEPS 1000000000000LL
#define GAVEL_MAX_GRACE 86400LL
#define GAVEL_MAX_SLO_MICRO (1000000000LL * GAVEL_MICRO)
#define GAVEL_DEFAULT_MAX_WEIGHT_MICRO GAVEL_MICRO /* a user may lower, never raise */
#define GAVEL_FORM \
	"gavel:[key=value,...] with keys type=<job type> (optional), scale=N or MIN-MAX, weight=W, steps=S, slo=SECONDS, grace=SECONDS"

enum gavel_verdict { GAVEL_REFUSED = -1, GAVEL_PLAIN = 0, GAVEL_MANAGED = 1 };

static inline bool gavel_is_digit(char c) { return c >= '0' && c <= '9'; }

static inline bool gavel_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static inline bool gavel_type_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || gavel_is_digit(c) ||
	       c == ' ' || c == '.' || c == '_' || c == '(' || c == ')' || c == '-';
}

/* integer = "0" / [1-9][0-9]{0,12} */
static inline bool gavel_parse_integer(const char *s, size_t n, long long *out)
{
	long long v = 0;
	size_t i;

	if (n == 0 || n > 13 || (s[0] == '0' && n > 1))
		return false;
	for (i = 0; i < n; i++) {
		if (!gavel_is_digit(s[i]))
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* decimal = integer ["." 1-6 digits], integer part at most 10 digits; in millionths */
static inline bool gavel_parse_decimal(const char *s, size_t n, long long *micro)
{
	const char *dot = memchr(s, '.', n);
	size_t whole_n = dot ? (size_t)(dot - s) : n;
	size_t frac_n = dot ? n - whole_n - 1 : 0;
	long long whole, frac = 0;
	size_t i;

	if (whole_n > 10 || !gavel_parse_integer(s, whole_n, &whole))
		return false;
	if (dot && (frac_n < 1 || frac_n > 6))
		return false;
	for (i = 0; i < 6; i++) {
		char c = i < frac_n ? dot[1 + i] : '0';
		if (!gavel_is_digit(c))
			return false;
		frac = frac * 10 + (c - '0');
	}
	*micro = whole * GAVEL_MICRO + frac;
	return true;
}

/* "1.5" from 1500000 (for messages) */
static inline void gavel_format_micro(long long micro, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%lld.%06lld", micro / GAVEL_MICRO, micro % GAVEL_MICRO);
	while (n > 0 && (size_t)n < size && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && (size_t)n < size && buf[n - 1] == '.')
		buf[--n] = '\0';
}

/*
 * One key=value of the comment (also used for the SPANK options). max_weight_micro < 0:
 * no cap. Returns false with the problem in why.
 */
static inline bool gavel_check_value(const char *key, size_t key_n, const char *val,
				     size_t val_n, long long max_weight_micro, char *why,
				     size_t why_size)
{
	long long v;
	size_t i;

#define GAVEL_KEY(k) (key_n == sizeof(k) - 1 && memcmp(key, k, key_n) == 0)
	if (GAVEL_KEY("type")) {
		for (i = 0; i < val_n; i++)
			if (!gavel_type_char(val[i])) {
				snprintf(why, why_size, "the job type has a character outside "
					 "A-Z a-z 0-9 space ._()- (byte 0x%02x)",
					 (unsigned char)val[i]);
				return false;
			}
		if (val_n > GAVEL_MAX_TYPE_CHARS) {
			snprintf(why, why_size, "the job type is %zu characters, more than %d", val_n,
				 GAVEL_MAX_TYPE_CHARS);
			return false;
		}
		if (val[0] == ' ' || val[val_n - 1] == ' ') {
			snprintf(why, why_size, "the job type starts or ends with a space");
			return false;
		}
		return true;
	}
	if (GAVEL_KEY("scale") && memchr(val, '-', val_n)) {
		/* a range MIN-MAX (moldable), each a grammar integer 1..1024 */
		const char *dash = memchr(val, '-', val_n);
		size_t lo_n = (size_t)(dash - val);
		long long lo, hi;
		if (!gavel_parse_integer(val, lo_n, &lo) ||
		    !gavel_parse_integer(dash + 1, val_n - lo_n - 1, &hi) || lo < 1 ||
		    hi > GAVEL_MAX_SCALE || lo > hi) {
			snprintf(why, why_size, "scale=%.*s must be a whole number from 1 to %lld, "
				 "or a range MIN-MAX of them with MIN <= MAX (e.g. 1-8)",
				 val_n > 40 ? 40 : (int)val_n, val, GAVEL_MAX_SCALE);
			return false;
		}
		return true;
	}
	if (GAVEL_KEY("scale") || GAVEL_KEY("steps") || GAVEL_KEY("grace")) {
		long long max = GAVEL_KEY("scale")   ? GAVEL_MAX_SCALE
				: GAVEL_KEY("steps") ? GAVEL_MAX_STEPS
						     : GAVEL_MAX_GRACE;
		if (!gavel_parse_integer(val, val_n, &v) || v < 1 || v > max) {
			snprintf(why, why_size, "%.*s=%.*s must be a whole number from 1 to %lld",
				 (int)key_n, key, val_n > 40 ? 40 : (int)val_n, val, max);
			return false;
		}
		return true;
	}
	if (GAVEL_KEY("hold")) {
		/* hold=user: held by its owner (sbatch --hold, scontrol hold/uhold), written
		 * by job_submit.lua; the daemon never places such a job */
		if (val_n != 4 || memcmp(val, "user", 4) != 0) {
			snprintf(why, why_size, "hold=%.*s must be hold=user (or leave it out)",
				 val_n > 40 ? 40 : (int)val_n, val);
			return false;
		}
		return true;
	}
	if (GAVEL_KEY("slo")) {
		if (!gavel_parse_decimal(val, val_n, &v) || v <= 0 || v > GAVEL_MAX_SLO_MICRO) {
			snprintf(why, why_size, "slo=%.*s must be seconds, a decimal > 0 and <= "
				 "1000000000", val_n > 40 ? 40 : (int)val_n, val);
			return false;
		}
		return true;
	}
	if (GAVEL_KEY("weight")) {
		char cap[40];
		if (!gavel_parse_decimal(val, val_n, &v) || v <= 0) {
			snprintf(why, why_size, "weight=%.*s must be a decimal number > 0 (e.g. 0.5)",
				 val_n > 40 ? 40 : (int)val_n, val);
			return false;
		}
		if (max_weight_micro >= 0 && v > max_weight_micro) {
			gavel_format_micro(max_weight_micro, cap, sizeof(cap));
			snprintf(why, why_size, "weight=%.*s is above the cap %s set by the admin: "
				 "a job may only lower its own weight; the admin sets shares by QOS "
				 "and account", val_n > 40 ? 40 : (int)val_n, val, cap);
			return false;
		}
		return true;
	}
#undef GAVEL_KEY
	snprintf(why, why_size, "unknown key '%.*s' (known, in lower case: type, scale, weight, "
		 "steps, slo, grace)", key_n > 40 ? 40 : (int)key_n, key);
	return false;
}

/* The verdict on a whole job comment; why says what is wrong when GAVEL_REFUSED. */
static inline int gavel_check_comment(const char *comment, long long max_weight_micro,
				      char *why, size_t why_size)
{
	static const char *const keys[] = {"type", "scale", "weight", "steps", "slo", "grace",
						     "hold"};
	const size_t prefix_n = sizeof(GAVEL_PREFIX) - 1;
	const char *p = comment, *part;
	unsigned seen = 0;
	size_t i, n;

	why[0] = '\0';
	if (!comment || !*comment)
		return GAVEL_PLAIN;
	if (strncmp(comment, GAVEL_PREFIX, prefix_n) != 0) {
		/* a near miss (" gavel:", "GAVEL:") is refused, never left plain */
		while (gavel_is_space(*p))
			p++;
		for (i = 0; i < prefix_n; i++) {
			char c = p[i];
			if (c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			if (c != GAVEL_PREFIX[i])
				return GAVEL_PLAIN;
		}
		snprintf(why, why_size, "'gavel:' must open the comment, in lower case, with "
			 "nothing before it");
		return GAVEL_REFUSED;
	}
	n = strlen(comment);
	if (n > GAVEL_MAX_COMMENT_BYTES) {
		snprintf(why, why_size, "the comment is %zu bytes, more than %d", n,
			 GAVEL_MAX_COMMENT_BYTES);
		return GAVEL_REFUSED;
	}
	if (n == prefix_n)
		return GAVEL_MANAGED; /* "gavel:" alone: no type named, the daemon learns it */
	for (part = comment + prefix_n;; part = p + 1) {
		const char *eq;
		size_t part_n, key_n, k;

		p = strchr(part, ',');
		if (!p)
			p = part + strlen(part);
		part_n = (size_t)(p - part);
		eq = memchr(part, '=', part_n);
		if (!eq) {
			snprintf(why, why_size, "'%.*s' is not key=value",
				 part_n > 40 ? 40 : (int)part_n, part);
			return GAVEL_REFUSED;
		}
		key_n = (size_t)(eq - part);
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (strlen(keys[k]) == key_n && memcmp(keys[k], part, key_n) == 0)
				break;
		if (k == sizeof(keys) / sizeof(keys[0])) {
			snprintf(why, why_size, "unknown key '%.*s' (known, in lower case: type, "
				 "scale, weight, steps, slo, grace)", key_n > 40 ? 40 : (int)key_n, part);
			return GAVEL_REFUSED;
		}
		if (seen & (1u << k)) {
			snprintf(why, why_size, "key '%s' appears twice", keys[k]);
			return GAVEL_REFUSED;
		}
		seen |= 1u << k;
		if (eq + 1 == p) {
			snprintf(why, why_size, "key '%s' has no value", keys[k]);
			return GAVEL_REFUSED;
		}
		if (!gavel_check_value(part, key_n, eq + 1, (size_t)(p - eq - 1),
				       max_weight_micro, why, why_size))
			return GAVEL_REFUSED;
		if (!*p)
			break;
	}
	return GAVEL_MANAGED; /* type= is optional: a hint that picks the prior */
}

#endif /* GAVEL_GRAMMAR_H */
