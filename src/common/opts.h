/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.h - a program's command line from a table
 *
 * Each option is one row: its names, what its value must be, where the
 * value goes and the hint its error gives, so that an option's rules
 * live in one place and every program says a bad value the same way:
 *
 *   maru-server: invalid port: x (must be 1-65535)
 *   Try 'maru-server --help'.
 *
 * Every program with options parses them here: the two daemons and the
 * tools (marutop, pool_monitor, maru-keygen).  Their --help (and so their
 * man page) is printed from the same rows: each row says what the option
 * does, its default, read from the field before parsing so that the value
 * set in code is the one told, and why the default is what it is.
 *
 * getopt_long does the scanning (GNU conventions: --name=value, --name
 * value, -p value, "--" ends the options; its own messages for an unknown
 * option or a missing value, which name @prog as ours do).  Operands
 * (arguments that are not options) are refused unless the program names
 * them (struct opts_doc).
 * Integers are parsed whole (strtol) unless the row asks for upstream's
 * atoi() (the resource manager's classic options).
 *
 * Context: start-up, one thread (getopt's globals).
 */
#ifndef MARU_COMMON_OPTS_H
#define MARU_COMMON_OPTS_H

#include <stddef.h>
#include <stdio.h>

enum opt_kind {
	OPT_FLAG,    /* no value: bool = true */
	OPT_SET,     /* no value: an int field = @set (rows that share a
		      * field: the last one given wins, e.g. --csv, --json) */
	OPT_STR,     /* const char * (borrows argv) */
	OPT_INT,     /* an integer field (int, long, uint16_t...) in [lo, hi] */
	OPT_ATOI,    /* the same, parsed with atoi() as upstream does */
	OPT_SIZE,    /* uint64_t, parse_size(): "4096", "512K", "1G"; >= lo */
	OPT_SECONDS, /* double, 0 to @hi seconds (@hi 0: a year) */
	OPT_CHOICE,  /* int: @values[i] of the name @choices[i]; without
		      * @values the name itself (const char *) */
	OPT_LIST,    /* struct opt_list: every value, in order */
	OPT_CALL,    /* @call(arg, dst): 0, OPT_BAD (the message with
		      * @hint), OPT_SAID (it said why itself), -ENOMEM */
	OPT_HELP,    /* print the usage to stdout, exit 0 */
	OPT_VERSION, /* print "<prog> <MARU_VERSION>", exit 0 */
};

/* what an OPT_CALL callback returns for a bad value (far from -errno) */
#define OPT_BAD (-4096)	 /* opts says it, with the row's hint */
#define OPT_SAID (-4097) /* the callback said why */

/* OPT_STR, OPT_LIST: the empty string is refused; OPT_SIZE: "0" is 0;
 * OPT_SECONDS: 0 is refused */
#define OPT_NONEMPTY 1u
#define OPT_ZERO_OK 2u
#define OPT_POSITIVE 4u

struct opt {
	const char *name; /* long name, without "--" */
	int letter;	  /* short name, or 0 */
	enum opt_kind kind;
	void *dst;
	size_t size;	  /* OPT_INT, OPT_ATOI: sizeof the field: uint16_t, int
			   * or long (checked at compile time by the macros) */
	long long lo, hi; /* OPT_SIZE: lo >= 0; OPT_SECONDS: hi */
	unsigned flags;	  /* OPT_NONEMPTY, OPT_ZERO_OK, OPT_POSITIVE */
	const char *hint; /* "(...)" of the error; NULL: from lo/hi */
	const char *const *choices; /* OPT_CHOICE: NULL-terminated */
	const int *values;
	int (*call)(const char *arg, void *dst);
	int set; /* OPT_SET: the value stored */

	/* --help, which is also the man page (help2man) */
	const char *arg;  /* the value's name: "HOST"; NULL: from the kind */
	const char *help; /* what it does, words wrapped by opts_usage() */
	const char *dflt; /* the default as said; NULL: the field's value
			   * before parsing (kinds with a value), "": none */
	const char *why;  /* why the default is what it is */
};

/* what --help says around the options, and the operands taken */
struct opts_doc {
	const char *operands; /* "NAME": up to @max_operands arguments after
			       * the options, left at argv[optind..argc)
			       * (getopt's); NULL: none (refused) */
	int max_operands;
	const char *about; /* after "Usage: PROG [OPTIONS] OPERANDS" */
	const char *after; /* after the options: signals, exit status,
			    * environment, files (preformatted) */
};

/* the values of an OPT_LIST option; free(v) when done */
struct opt_list {
	const char **v;
	size_t n;
};

/* rows, in brief (a compound literal each; @f: a field of the config) */
#define OPTS_FLAG(nm, f, ...)                                                  \
	{                                                                      \
		.name = (nm), .kind = OPT_FLAG, .dst = &(f), __VA_ARGS__       \
	}
#define OPTS_STR(nm, l, f, fl, ...)                                            \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_STR, .dst = &(f),     \
		.flags = (fl), __VA_ARGS__                                     \
	}
/* sizeof(f), which must be one opts.c stores (else it does not compile) */
#define OPTS_SIZEOF_INT(f)                                                     \
	(sizeof(f) + 0 * sizeof(char[sizeof(f) == 2 || sizeof(f) == 4 ||       \
						     sizeof(f) == sizeof(long) \
					     ? 1                               \
					     : -1]))
#define OPTS_INT(nm, l, f, min, max, ...)                                      \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_INT, .dst = &(f),     \
		.size = OPTS_SIZEOF_INT(f), .lo = (min), .hi = (max),          \
		__VA_ARGS__                                                    \
	}
#define OPTS_ATOI(nm, l, f, min, max, ...)                                     \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_ATOI, .dst = &(f),    \
		.size = OPTS_SIZEOF_INT(f), .lo = (min), .hi = (max),          \
		__VA_ARGS__                                                    \
	}
#define OPTS_SIZE(nm, f, min, fl, h, ...)                                      \
	{                                                                      \
		.name = (nm), .kind = OPT_SIZE, .dst = &(f), .lo = (min),      \
		.flags = (fl), .hint = (h), __VA_ARGS__                        \
	}
#define OPTS_SECONDS(nm, f, ...)                                               \
	{                                                                      \
		.name = (nm), .kind = OPT_SECONDS, .dst = &(f), __VA_ARGS__    \
	}
/* seconds up to @max (fractions allowed); @fl OPT_POSITIVE: not 0 */
#define OPTS_SECONDS_IN(nm, l, f, max, fl, h, ...)                             \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_SECONDS, .dst = &(f), \
		.hi = (max), .flags = (fl), .hint = (h), __VA_ARGS__           \
	}
/* @f = @v when given; @f an int (or an enum of its size) */
#define OPTS_SET(nm, f, v, ...)                                                \
	{                                                                      \
		.name = (nm), .kind = OPT_SET, .dst = &(f), .set = (v),        \
		.size = sizeof(f) +                                            \
			0 * sizeof(char[sizeof(f) == sizeof(int) ? 1 : -1]),   \
		__VA_ARGS__                                                    \
	}
#define OPTS_CHOICE(nm, f, names, vals, h, ...)                                \
	{                                                                      \
		.name = (nm), .kind = OPT_CHOICE, .dst = &(f),                 \
		.choices = (names), .values = (vals), .hint = (h),             \
		.size = sizeof(f), __VA_ARGS__                                 \
	}
#define OPTS_LIST(nm, l, f, fl, h, ...)                                        \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_LIST, .dst = &(f),    \
		.flags = (fl), .hint = (h), __VA_ARGS__                        \
	}
#define OPTS_CALL(nm, l, fn, d, h, ...)                                        \
	{                                                                      \
		.name = (nm), .letter = (l), .kind = OPT_CALL, .dst = (d),     \
		.call = (fn), .hint = (h), __VA_ARGS__                         \
	}

#define OPTS_HELP                                                              \
	{                                                                      \
		.name = "help", .letter = 'h', .kind = OPT_HELP,               \
		.help = "this text"                                            \
	}
#define OPTS_VERSION                                                           \
	{                                                                      \
		.name = "version", .kind = OPT_VERSION,                        \
		.help = "print the version and exit"                           \
	}

/**
 * opts_parse - read @argv by the rows of @t (ended by a row with no name)
 * @prog: the program's name, for messages, --help and --version
 * @doc: what --help says around the rows
 * Options are taken in order; --help and --version stop there (--help
 * shows the defaults, not what the options before it set).
 * Return: 0 to run; 1 after --help or --version (exit 0); -EINVAL after
 * saying what was wrong (bad usage: exit 2); -ENOMEM.
 */
/* OPT_CALL callbacks the programs share: a "HOST:PORT" (kept as given,
 * a const char *), a log level name log_level_parse() knows (kept as
 * given) */
int opts_host_port(const char *arg, void *dst);
int opts_log_level(const char *arg, void *dst);

int opts_parse(const char *prog, const struct opts_doc *doc,
	       const struct opt *t, int argc, char **argv);

/**
 * opts_usage - print --help: "Usage:", @doc->about, one entry a row (its
 * names, its value's name, its help, its default and why), @doc->after
 */
void opts_usage(FILE *f, const char *prog, const struct opts_doc *doc,
		const struct opt *t);

#endif
