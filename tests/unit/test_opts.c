/* SPDX-License-Identifier: Apache-2.0 */
/* test_opts.c - command lines from a table (opts.c): every kind of row
 * stores what it should, refuses what it should, and bad usage says so */
#include <setjmp.h>
#include <stdarg.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>
#include <getopt.h>

#include "opts.h"

/* each integer field followed by a guard: a store of the wrong size
 * shows in the guard (filled with GUARD, as every field at first) */
#define GUARD 0xa5
struct cfg {
	bool flag;
	const char *str, *name;
	uint16_t port;
	uint8_t g_port[6];
	int workers;
	uint8_t g_workers[4];
	int mode;
	uint8_t g_mode[4];
	long big;
	uint8_t g_big[8];
	uint64_t size, quota;
	double secs, wait;
	int out;
	uint8_t g_out[4];
	long count;
	struct opt_list list;
	int calls;
};

static int odd_only(const char *arg, void *dst)
{
	struct cfg *c = dst;

	c->calls++;
	if (!strcmp(arg, "said"))
		return OPT_SAID;
	return atoi(arg) % 2 ? 0 : OPT_BAD;
}

static void fill(struct cfg *c)
{
	memset(c, GUARD, sizeof(*c));
	c->list.v = NULL;
	c->list.n = 0;
	c->calls = 0;
	c->flag = false;
	c->str = c->name = NULL; /* --help reads them */
}

static void guards_intact(const struct cfg *c)
{
	const uint8_t *g[] = {c->g_port, c->g_workers, c->g_mode, c->g_big,
			      c->g_out};
	const size_t len[] = {6, 4, 4, 8, 4};
	size_t i, j;

	for (i = 0; i < 5; i++)
		for (j = 0; j < len[i]; j++)
			assert_int_equal(g[i][j], GUARD);
}

static const struct opts_doc doc = {
	.about = "What prog does.\n",
	.after = "Exit status: 0.\n",
};

static FILE *capture; /* parse()'s stderr; NULL: silenced */

/* parse the NULL-terminated @args into @c (stderr silenced) */
static int parse(struct cfg *c, const char **args)
{
	static const char *const names[] = {"a", "b", "c", NULL};
	static const int vals[] = {10, 20, 30};
	const struct opt t[] = {
		OPTS_FLAG("flag", c->flag),
		OPTS_STR("str", 's', c->str, OPT_NONEMPTY),
		OPTS_INT("port", 'p', c->port, 1, 65535, .arg = "PORT",
			 .help = "the port to listen on, a number that this "
				 "test makes long enough to be wrapped onto a "
				 "second line and a third",
			 .why = "upstream's"),
		OPTS_ATOI("workers", 'w', c->workers, -3, 1 << 30),
		OPTS_INT("big", 0, c->big, -5, 1L << 40),
		OPTS_SIZE("size", c->size, 4096, 0, "at least 4K"),
		OPTS_SIZE("quota", c->quota, 1 << 20, OPT_ZERO_OK, NULL),
		OPTS_SECONDS("secs", c->secs),
		OPTS_SECONDS_IN("wait", 'W', c->wait, 86400, OPT_POSITIVE,
				NULL),
		OPTS_SET("csv", c->out, 1),
		OPTS_SET("json", c->out, 2),
		OPTS_INT("count", 'n', c->count, 0, LONG_MAX),
		OPTS_CHOICE("mode", c->mode, names, vals, NULL),
		OPTS_CHOICE("name", c->name, names, NULL, NULL),
		OPTS_LIST("item", 'i', c->list, OPT_NONEMPTY, "a path"),
		OPTS_CALL("odd", 0, odd_only, c, "an odd number", .help = "odd",
			  .dflt = "1"),
		OPTS_HELP,
		{0},
	};
	char *argv[32];
	int argc = 0, rc;
	FILE *err = stderr;

	argv[argc++] = (char *)"prog";
	while (*args)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;
	stderr = capture ? capture : fopen("/dev/null", "w");
	rc = opts_parse("prog", &doc, t, argc, argv);
	if (!capture)
		fclose(stderr);
	stderr = err;
	return rc;
}

#define PARSE(c, ...) parse((c), (const char *[]){__VA_ARGS__, NULL})

static void test_kinds(void **state)
{
	struct cfg c;

	(void)state;
	fill(&c);
	assert_int_equal(PARSE(&c, "--flag", "-s", "x", "--port=65535", "-w",
			       "12abc", "--big", "1099511627776", "--size",
			       "1M", "--quota", "0", "--secs", "2.5", "--mode",
			       "b", "--name", "c", "-i", "p1", "--item", "p2",
			       "--odd", "3"),
			 0);
	guards_intact(&c);
	assert_true(c.flag);
	assert_string_equal(c.str, "x");
	assert_int_equal(c.port, 65535);
	assert_int_equal(c.workers, 12); /* atoi(), as upstream */
	assert_int_equal(c.big, 1L << 40);
	assert_int_equal(c.size, 1 << 20);
	assert_int_equal(c.quota, 0);
	assert_true(c.secs == 2.5);
	assert_int_equal(c.mode, 20);
	assert_string_equal(c.name, "c");
	assert_int_equal(c.list.n, 2);
	assert_string_equal(c.list.v[0], "p1");
	assert_string_equal(c.list.v[1], "p2");
	assert_int_equal(c.calls, 1);
	free(c.list.v);

	/* negative values, whole width, the other order */
	fill(&c);
	assert_int_equal(
		PARSE(&c, "--mode", "c", "--big", "-5", "-w", "-3", "-p", "1"),
		0);
	guards_intact(&c);
	assert_int_equal(c.mode, 30);
	assert_int_equal(c.big, -5);
	assert_int_equal(c.workers, -3);
	assert_int_equal(c.port, 1);

	/* rows that share a field: the last one given wins; bounded
	 * seconds; a long up to LONG_MAX */
	fill(&c);
	assert_int_equal(PARSE(&c, "--csv", "--json", "-W", "0.25", "-n",
			       "9223372036854775807"),
			 0);
	guards_intact(&c);
	assert_int_equal(c.out, 2);
	assert_true(c.wait == 0.25);
	assert_int_equal(c.count, LONG_MAX);
	fill(&c);
	assert_int_equal(PARSE(&c, "--json", "--csv", "--wait=86400"), 0);
	guards_intact(&c);
	assert_int_equal(c.out, 1);
	assert_true(c.wait == 86400);
}

static void test_refused(void **state)
{
	static const char *bad[][3] = {
		{"--port", "0"},
		{"--port", "65536"},
		{"--port", "8x"},
		{"--port", "-1"},
		{"--big", "-6"},
		{"--size", "1K"},
		{"--size", "0"},
		{"--quota", "4K"},
		{"--secs", "-1"},
		{"--secs", "nan"},
		{"--secs", "31536001"},
		{"--mode", "d"},
		{"--name", "A"},
		{"--item", ""},
		{"-s", ""},
		{"--odd", "2"},
		{"--odd", "said"},
		{"-w", "1073741825"},
		{"-w", "-4"},
		{"-W", "0"},
		{"-W", "-0"},
		{"-W", "86400.5"},
		{"--csv=1"},
		{"-n", "-1"},
		{"-n", "9223372036854775808"},
		{"--big", "1099511627777"},
		{"--bogus"},
		{"--port"},
		{"stray"},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cfg c;
		/* a good option after the bad one does not undo it */
		const char *args[5] = {bad[i][0], bad[i][1], "--flag", NULL};

		if (!bad[i][1]) {
			args[1] = "--flag";
			args[2] = NULL;
		}
		fill(&c);
		assert_int_equal(parse(&c, args), -EINVAL);
		guards_intact(&c);
		free(c.list.v);
	}
}

/* the message of a bad value: the row's name, the value, the hint */
static void test_message(void **state)
{
	static const char *const cases[][3] = {
		{"-n", "-1", "prog: invalid count: -1 (must be >= 0)\n"},
		{"-W", "0", "prog: invalid wait: 0 (a number of seconds)\n"},
		{"--odd", "", "prog: invalid odd: '' (an odd number)\n"},
	};
	char text[256];
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cfg c;
		FILE *f = tmpfile();

		assert_non_null(f);
		fill(&c);
		capture = f;
		assert_int_equal(PARSE(&c, cases[i][0], cases[i][1]), -EINVAL);
		capture = NULL;
		fflush(f);
		rewind(f);
		n = fread(text, 1, sizeof(text) - 1, f);
		text[n] = '\0';
		fclose(f);
		/* then "Try 'prog --help'." */
		assert_int_equal(
			strncmp(text, cases[i][2], strlen(cases[i][2])), 0);
		assert_non_null(strstr(text, "Try 'prog --help'.\n"));
	}
}

/* --help: from the rows, with the defaults the fields held before
 * parsing; it stops the line there */
static void test_help(void **state)
{
	char text[8192], *line;
	struct cfg c;
	FILE *out = stdout, *f = tmpfile();
	size_t n;
	int rc;

	(void)state;
	assert_non_null(f);
	fill(&c);
	c.port = 5555;
	c.str = "dflt";
	stdout = f;
	rc = PARSE(&c, "--port", "80", "-h", "--bogus");
	stdout = out;
	assert_int_equal(rc, 1);
	assert_int_equal(c.port, 80); /* taken in order, up to -h */
	fflush(f);
	rewind(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	assert_int_equal(strncmp(text,
				 "Usage: prog [OPTIONS]\n\nWhat prog "
				 "does.\n\nOptions:\n",
				 strlen("Usage: prog [OPTIONS]\n\nWhat prog "
					"does.\n\nOptions:\n")),
			 0);
	assert_non_null(strstr(text, "  -p, --port PORT         the port to "));
	assert_non_null(strstr(text, "(default 5555: upstream's)"));
	assert_non_null(
		strstr(text, "      --odd VALUE         odd (default 1)"));
	assert_non_null(
		strstr(text, "  -s, --str VALUE         (default dflt)"));
	assert_non_null(strstr(text, "  -h, --help              this text\n"));
	assert_non_null(strstr(text, "      --flag\n"));
	/* long help goes on at the text's column */
	assert_non_null(
		strstr(text, "makes\n                          long enough"));
	assert_non_null(strstr(text, "\nExit status: 0.\n"));
	for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
		assert_true(strlen(line) <= 79);
}

/* operands: taken when the program names them, left at argv[optind] */
static void test_operands(void **state)
{
	static const struct opts_doc named = {.operands = "NAME",
					      .max_operands = 1};
	bool flag = false;
	const struct opt t[] = {OPTS_FLAG("flag", flag), {0}};
	char *one[] = {"prog", "name", "--flag", NULL};
	char *two[] = {"prog", "a", "b", NULL};
	FILE *err = stderr;

	(void)state;
	assert_int_equal(opts_parse("prog", &named, t, 3, one), 0);
	assert_true(flag);
	assert_int_equal(optind, 2); /* getopt moved the operand last */
	assert_string_equal(one[optind], "name");
	stderr = fopen("/dev/null", "w");
	assert_int_equal(opts_parse("prog", &named, t, 3, two), -EINVAL);
	assert_int_equal(opts_parse("prog", &doc, t, 3, one), -EINVAL);
	fclose(stderr);
	stderr = err;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kinds),	 cmocka_unit_test(test_refused),
		cmocka_unit_test(test_message),	 cmocka_unit_test(test_help),
		cmocka_unit_test(test_operands),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
