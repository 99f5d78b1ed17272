/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.c - a program's command line from a table (see opts.h)
 *
 * The table becomes getopt_long's (a row's index is its return value, +
 * 256 so that no short letter collides); each value is checked and stored
 * by its row's kind, and a bad one is reported in one format with the
 * row's hint, or a hint made from the row (its range, its choices).
 * getopt's own messages (an unknown option, a missing value, an ambiguous
 * abbreviation) name @prog too: argv[0] is @prog while it scans.
 *
 * --help is written (to memory) before any option is taken, so that it
 * tells the defaults the program set, not what the options before it on
 * the line changed; the line is then taken in order, as before: a bad
 * value before --help or --version is bad usage.
 */
#include "opts.h"

#include "log.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define ROW0 256 /* getopt_long's value of row 0 */

static void store_int(const struct opt *o, long long v)
{
	if (o->size == sizeof(uint16_t))
		*(uint16_t *)o->dst = (uint16_t)v;
	else if (o->size == sizeof(int))
		*(int *)o->dst = (int)v;
	else if (o->size == sizeof(long))
		*(long *)o->dst = (long)v;
	else
		abort(); /* a row the macros would not have made */
}

/* the hint a row's kind gives when the row has none */
static const char *hint_of(const struct opt *o, char *buf, size_t len)
{
	size_t i, n;

	if (o->hint)
		return o->hint;
	switch (o->kind) {
	case OPT_INT:
	case OPT_ATOI:
		if (o->hi == INT_MAX || o->hi == LONG_MAX)
			snprintf(buf, len, "must be >= %lld", o->lo);
		else
			snprintf(buf, len, "must be %lld-%lld", o->lo, o->hi);
		return buf;
	case OPT_SECONDS:
		return "a number of seconds";
	case OPT_SIZE:
		return "a size: 4096, 512K, 1G...";
	case OPT_CHOICE:
		/* "one of a, b or c" */
		n = (size_t)snprintf(buf, len, "one of");
		for (i = 0; o->choices[i] && n < len; i++)
			n += (size_t)snprintf(buf + n, len - n, "%s %s",
					      !i		  ? ""
					      : o->choices[i + 1] ? ","
								  : " or",
					      o->choices[i]);
		return buf;
	case OPT_STR:
	case OPT_LIST:
		return "must not be empty";
	default:
		return "a bad value";
	}
}

/* check @arg by row @o and store it.  Return: 0, OPT_BAD (say it),
 * OPT_SAID, -ENOMEM */
static int take(const struct opt *o, const char *arg)
{
	struct opt_list *l;
	const char **v;
	long long n;
	uint64_t sz;
	double d;
	char *end;
	size_t i;
	int rc;

	if (o->kind == OPT_FLAG) {
		*(bool *)o->dst = true;
		return 0;
	}
	if (o->kind == OPT_SET) {
		*(int *)o->dst = o->set;
		return 0;
	}
	if ((o->flags & OPT_NONEMPTY) && !*arg)
		return OPT_BAD;
	switch (o->kind) {
	case OPT_STR:
		*(const char **)o->dst = arg;
		return 0;
	case OPT_INT:
	case OPT_ATOI:
		errno = 0;
		n = o->kind == OPT_ATOI ? atoi(arg) : strtoll(arg, &end, 10);
		if (o->kind == OPT_INT && (errno || end == arg || *end))
			return OPT_BAD;
		if (n < o->lo || n > o->hi)
			return OPT_BAD;
		store_int(o, n);
		return 0;
	case OPT_SIZE:
		if ((o->flags & OPT_ZERO_OK) && !strcmp(arg, "0"))
			sz = 0;
		else if (parse_size(arg, &sz) < 0 || sz < (uint64_t)o->lo)
			return OPT_BAD;
		*(uint64_t *)o->dst = sz;
		return 0;
	case OPT_SECONDS:
		errno = 0;
		d = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(d) || d < 0 ||
		    d > (o->hi ? (double)o->hi : 365.0 * 86400) ||
		    (d == 0 && (o->flags & OPT_POSITIVE)))
			return OPT_BAD;
		*(double *)o->dst = d;
		return 0;
	case OPT_CHOICE:
		for (i = 0; o->choices[i]; i++)
			if (!strcmp(arg, o->choices[i])) {
				if (o->values && o->size != sizeof(int))
					abort(); /* an int field, or none */
				if (o->values)
					*(int *)o->dst = o->values[i];
				else
					*(const char **)o->dst = o->choices[i];
				return 0;
			}
		return OPT_BAD;
	case OPT_LIST:
		l = o->dst;
		v = realloc(l->v, (l->n + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->v[l->n++] = arg;
		return 0;
	case OPT_CALL:
		rc = o->call(arg, o->dst);
		/* 0, OPT_SAID, -ENOMEM as they are; anything else is bad */
		return !rc || rc == OPT_SAID || rc == -ENOMEM ? rc : OPT_BAD;
	default:
		return OPT_BAD;
	}
}

/* the value a row's field holds (OPT_INT, OPT_ATOI) */
static long long load_int(const struct opt *o)
{
	if (o->size == sizeof(uint16_t))
		return *(const uint16_t *)o->dst;
	if (o->size == sizeof(int))
		return *(const int *)o->dst;
	return *(const long *)o->dst;
}

/* "1G", "512K", "4096" */
static void size_text(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (v && v % 1024 == 0 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
}

/* the default --help tells for row @o, or NULL for none */
static const char *dflt_of(const struct opt *o, char *buf, size_t len)
{
	size_t i;

	if (o->dflt)
		return *o->dflt ? o->dflt : NULL;
	switch (o->kind) {
	case OPT_STR:
		return *(const char *const *)o->dst;
	case OPT_INT:
	case OPT_ATOI:
		snprintf(buf, len, "%lld", load_int(o));
		return buf;
	case OPT_SIZE:
		size_text(*(const uint64_t *)o->dst, buf, len);
		return buf;
	case OPT_SECONDS:
		snprintf(buf, len, "%g", *(const double *)o->dst);
		return buf;
	case OPT_CHOICE:
		if (!o->values)
			return *(const char *const *)o->dst;
		for (i = 0; o->choices[i]; i++)
			if (o->values[i] == *(const int *)o->dst)
				return o->choices[i];
		return NULL;
	default:
		return NULL;
	}
}

/* the name of a row's value in --help */
static const char *arg_of(const struct opt *o)
{
	if (o->arg)
		return o->arg;
	switch (o->kind) {
	case OPT_FLAG:
	case OPT_SET:
	case OPT_HELP:
	case OPT_VERSION:
		return NULL;
	case OPT_INT:
	case OPT_ATOI:
		return "N";
	case OPT_SIZE:
		return "SIZE";
	case OPT_SECONDS:
		return "SEC";
	case OPT_CHOICE:
		return "MODE";
	default:
		return "VALUE";
	}
}

#define HELP_COL 26   /* where the rows' text starts */
#define HELP_WIDTH 79 /* and where it ends */

/* @text from column @at, its words wrapped at HELP_WIDTH, continued at
 * HELP_COL; "\n" in @text starts a line */
static void put_wrapped(FILE *f, int at, const char *text)
{
	const char *p = text;

	while (*p) {
		size_t w = strcspn(p, " \n");

		if (at > HELP_COL && at + 1 + (int)w > HELP_WIDTH) {
			fprintf(f, "\n%*s", HELP_COL, "");
			at = HELP_COL;
		} else if (at > HELP_COL) {
			fputc(' ', f);
			at++;
		}
		fwrite(p, 1, w, f);
		at += (int)w;
		p += w;
		if (*p == '\n') {
			fprintf(f, "\n%*s", HELP_COL, "");
			at = HELP_COL;
		}
		while (*p == ' ' || *p == '\n')
			p++;
	}
	fputc('\n', f);
}

int opts_host_port(const char *arg, void *dst)
{
	char host[256];
	uint16_t port;

	if (parse_host_port(arg, host, sizeof(host), &port) < 0)
		return OPT_BAD;
	*(const char **)dst = arg;
	return 0;
}

int opts_log_level(const char *arg, void *dst)
{
	if (log_level_parse(arg) < 0)
		return OPT_BAD;
	*(const char **)dst = arg;
	return 0;
}

void opts_usage(FILE *f, const char *prog, const struct opts_doc *doc,
		const struct opt *t)
{
	char left[128], text[1024], dbuf[64];
	bool letters = false;
	const char *d, *a;
	size_t i;
	int n;

	for (i = 0; t[i].name; i++)
		letters |= t[i].letter != 0;
	fprintf(f, "Usage: %s [OPTIONS]%s%s\n\n%s\nOptions:\n", prog,
		doc->operands ? " " : "", doc->operands ? doc->operands : "",
		doc->about ? doc->about : "");
	for (i = 0; t[i].name; i++) {
		const struct opt *o = &t[i];

		a = arg_of(o);
		if (o->letter)
			n = snprintf(left, sizeof(left), "  -%c, --%s%s%s",
				     o->letter, o->name, a ? " " : "",
				     a ? a : "");
		else
			n = snprintf(left, sizeof(left), "%s--%s%s%s",
				     letters ? "      " : "  ", o->name,
				     a ? " " : "", a ? a : "");
		d = dflt_of(o, dbuf, sizeof(dbuf));
		if (d)
			snprintf(text, sizeof(text), "%s%s(default %s%s%s)",
				 o->help ? o->help : "", o->help ? " " : "", d,
				 o->why ? ": " : "", o->why ? o->why : "");
		else
			snprintf(text, sizeof(text), "%s",
				 o->help ? o->help : "");
		fputs(left, f);
		if (!*text)
			fputc('\n', f);
		else if (n + 2 > HELP_COL)
			fprintf(f, "\n%*s", HELP_COL, "");
		else
			fprintf(f, "%*s", HELP_COL - n, "");
		if (*text)
			put_wrapped(f, HELP_COL, text);
	}
	if (doc->after)
		fprintf(f, "\n%s", doc->after);
}

/* getopt's tables for @t (n rows).  Return: the long options (free them),
 * or NULL */
static struct option *tables(const struct opt *t, size_t n, char *shorts,
			     size_t len)
{
	struct option *lo = calloc(n + 1, sizeof(*lo));
	size_t i, ns = 0;

	if (!lo)
		return NULL;
	for (i = 0; i < n; i++) {
		bool arg = t[i].kind != OPT_FLAG && t[i].kind != OPT_SET &&
			   t[i].kind != OPT_HELP && t[i].kind != OPT_VERSION;

		lo[i] = (struct option){t[i].name,
					arg ? required_argument : no_argument,
					NULL, ROW0 + (int)i};
		if (t[i].letter) {
			if (ns + 3 >= len)
				abort(); /* more short names than letters */
			shorts[ns++] = (char)t[i].letter;
			if (arg)
				shorts[ns++] = ':';
		}
	}
	shorts[ns] = '\0';
	return lo;
}

/* the row getopt_long returned @c for, or NULL */
static const struct opt *row_of(const struct opt *t, size_t n, int c)
{
	size_t i;

	if (c >= ROW0)
		return &t[c - ROW0];
	for (i = 0; c != '?' && c != ':' && i < n; i++)
		if (t[i].letter == c)
			return &t[i];
	return NULL;
}

int opts_parse(const char *prog, const struct opts_doc *doc,
	       const struct opt *t, int argc, char **argv)
{
	const struct opt *o;
	struct option *lo;
	char shorts[64], hint[160], *argv0, *help = NULL;
	size_t n, help_len = 0;
	FILE *hf;
	int c, rc = 0;

	for (n = 0; t[n].name; n++)
		;
	lo = tables(t, n, shorts, sizeof(shorts));
	/* --help as it is before any option changes a field */
	hf = lo ? open_memstream(&help, &help_len) : NULL;
	if (hf) {
		opts_usage(hf, prog, doc, t);
		if (fclose(hf)) {
			free(help);
			help = NULL;
		}
	}
	if (!help) {
		free(lo);
		fprintf(stderr, "%s: out of memory\n", prog);
		return -ENOMEM;
	}
	/* getopt names argv[0] in its messages: @prog, as ours do */
	argv0 = argc > 0 ? argv[0] : NULL;
	if (argv0)
		argv[0] = (char *)prog;
	optind = 0; /* from the start, also when called again (tests) */
	while (!rc && (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		o = row_of(t, n, c);
		if (!o) {
			rc = -EINVAL; /* getopt said which */
		} else if (o->kind == OPT_HELP) {
			fwrite(help, 1, help_len, stdout);
			rc = 1;
		} else if (o->kind == OPT_VERSION) {
			printf("%s %s\n", prog, MARU_VERSION);
			rc = 1;
		} else if ((rc = take(o, optarg)) == OPT_BAD) {
			fprintf(stderr, "%s: invalid %s: %s (%s)\n", prog,
				o->name, *optarg ? optarg : "''",
				hint_of(o, hint, sizeof(hint)));
		}
	}
	if (!rc && optind < argc &&
	    (!doc->operands || argc - optind > doc->max_operands)) {
		fprintf(stderr, "%s: unexpected argument: %s\n", prog,
			argv[doc->operands ? optind + doc->max_operands
					   : optind]);
		rc = -EINVAL;
	}
	if (argv0)
		argv[0] = argv0;
	free(lo);
	free(help);
	if (rc == -ENOMEM)
		fprintf(stderr, "%s: out of memory\n", prog);
	else if (rc < 0) {
		fprintf(stderr, "Try '%s --help'.\n", prog);
		rc = -EINVAL;
	}
	return rc;
}
