/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log.c - the log line formats of src/common/log.c: plain (ISO-8601
 * time, level), journal (<N>), json (escaping, invalid UTF-8, a cut line
 * stays one whole object), and MARU_LOG_FORMAT / JOURNAL_STREAM; the
 * level names that --log-level and MARU_LOG share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"

/* "2026-12-03T12:34:56.789Z" at @s */
static void assert_timestamp(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
	size_t i;

	for (i = 0; shape[i]; i++) {
		if (shape[i] == 'd')
			assert_true(s[i] >= '0' && s[i] <= '9');
		else
			assert_int_equal(s[i], shape[i]);
	}
}

static void test_plain(void **state)
{
	char line[256];
	size_t n;

	n = log_format_line(line, sizeof(line), LOG_FMT_PLAIN, LOG_INFO,
			    "maru-server", "ready");
	line[n] = '\0';
	assert_int_equal(n, 24 + strlen(" info maru-server: ready\n"));
	assert_timestamp(line);
	assert_string_equal(line + 24, " info maru-server: ready\n");
	n = log_format_line(line, sizeof(line), LOG_FMT_PLAIN, LOG_WARNING, "x",
			    "w");
	line[n] = '\0';
	assert_string_equal(line + 24, " warn x: w\n");
	n = log_format_line(line, sizeof(line), LOG_FMT_PLAIN, LOG_ERR, "x",
			    "e");
	line[n] = '\0';
	assert_string_equal(line + 24, " error x: e\n");
}

static void test_journal(void **state)
{
	char line[64];
	size_t n;

	n = log_format_line(line, sizeof(line), LOG_FMT_JOURNAL, LOG_DEBUG,
			    "maru-resource-manager", "x");
	assert_int_equal(n, strlen("<7>maru-resource-manager: x\n"));
	assert_memory_equal(line, "<7>maru-resource-manager: x\n", n);
}

/*
 * @line (@n bytes) is exactly one JSON object of four string members
 * ts, level, ident, msg and a newline; the text of msg into @msg.
 */
static void assert_json(const char *line, size_t n, char *msg, size_t len)
{
	const char *p, *end = line + n;
	size_t k = 0;

	assert_true(n >= 3 && line[n - 1] == '\n');
	assert_memory_equal(line, "{\"ts\":\"", 7);
	assert_timestamp(line + 7);
	p = strstr(line, "\",\"msg\":\"");
	assert_non_null(p);
	for (p += 9; p < end && *p != '"'; p++) {
		assert_true((unsigned char)*p >= 0x20);
		if (*p == '\\') {
			p++;
			assert_non_null(strchr("\"\\nt/bfru", *p));
			if (*p == 'u') {
				assert_true(end - p > 4);
				p += 4;
			}
		}
		if (k + 1 < len)
			msg[k++] = *p;
	}
	msg[k] = '\0';
	assert_true(p + 3 == end);
	assert_memory_equal(p, "\"}\n", 3);
}

static void test_json(void **state)
{
	char line[512], msg[512];
	size_t n;

	n = log_format_line(line, sizeof(line), LOG_FMT_JSON, LOG_NOTICE,
			    "maru-server", "a\"b\\c\nd\te\x01");
	assert_json(line, n, msg, sizeof(msg));
	line[n] = '\0';
	assert_non_null(strstr(line, "\"level\":\"notice\",\"ident\":"
				     "\"maru-server\","));
	assert_non_null(strstr(line, "\"msg\":\"a\\\"b\\\\c\\nd\\te\\u0001\""));
	/* valid UTF-8 passes; overlong, surrogate, cut and stray bytes
	 * become U+FFFD, one each */
	n = log_format_line(line, sizeof(line), LOG_FMT_JSON, LOG_INFO, "x",
			    "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\xc0\xaf|"
			    "\xed\xa0\x80|\xff|\xe2\x82");
	assert_json(line, n, msg, sizeof(msg));
	line[n] = '\0';
	assert_non_null(strstr(line, "\"msg\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f"
				     "\x98\x80|\\ufffd\\ufffd|\\ufffd\\ufffd"
				     "\\ufffd|\\ufffd|\\ufffd\\ufffd\"}\n"));
}

/* a client's string with a newline cannot forge a line or a priority */
static void test_no_forged_lines(void **state)
{
	static const enum log_format fmts[] = {LOG_FMT_PLAIN, LOG_FMT_JOURNAL,
					       LOG_FMT_JSON};
	char line[512];
	size_t n, i;

	(void)state;
	for (i = 0; i < 3; i++) {
		n = log_format_line(line, sizeof(line), fmts[i], LOG_INFO,
				    "maru-server",
				    "instance x\n<0>maru-server: forged\r\x7f");
		assert_true(n > 0 && line[n - 1] == '\n');
		line[n - 1] = '\0';
		assert_null(strchr(line, '\n'));
		assert_null(strchr(line, '\r'));
		assert_null(strchr(line, 0x7f));
	}
}

static void test_cut_lines_stay_whole(void **state)
{
	char big[4000], line[2048], msg[2048];
	size_t n, len;

	/* every byte an escape (6 bytes): the object is cut, still whole */
	memset(big, 1, sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (len = 128; len <= sizeof(line); len += 480) {
		n = log_format_line(line, len, LOG_FMT_JSON, LOG_INFO,
				    "maru-resource-manager", big);
		assert_true(n < len);
		assert_json(line, n, msg, sizeof(msg));
		n = log_format_line(line, len, LOG_FMT_PLAIN, LOG_INFO, "x",
				    big);
		assert_int_equal(n, len - 1);
		assert_int_equal(line[n - 1], '\n');
		n = log_format_line(line, len, LOG_FMT_JOURNAL, LOG_INFO, "x",
				    big);
		assert_int_equal(n, len - 1);
		assert_int_equal(line[n - 1], '\n');
	}
	/* a multi-byte character is never split by the cut */
	for (n = 0; n + 2 < sizeof(big); n += 2)
		memcpy(big + n, "\xc3\xa9", 2);
	big[n] = '\0';
	n = log_format_line(line, 200, LOG_FMT_JSON, LOG_INFO, "x", big);
	assert_json(line, n, msg, sizeof(msg));
	assert_true(strlen(msg) % 2 == 0);
	assert_null(strstr(msg, "ufffd"));
}

static void test_format_from_env(void **state)
{
	enum log_format f;
	struct stat st;
	char js[64];

	unsetenv("JOURNAL_STREAM");
	unsetenv("MARU_LOG_FORMAT");
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_PLAIN);
	/* JOURNAL_STREAM names stderr: journal; another file: plain */
	assert_int_equal(fstat(STDERR_FILENO, &st), 0);
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", js, 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_JOURNAL);
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	setenv("JOURNAL_STREAM", js, 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_PLAIN);
	setenv("JOURNAL_STREAM", "garbage", 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_PLAIN);
	/* MARU_LOG_FORMAT wins; an unknown one is -EINVAL and the default */
	setenv("MARU_LOG_FORMAT", "json", 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_JSON);
	setenv("MARU_LOG_FORMAT", "JOURNAL", 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_JOURNAL);
	setenv("MARU_LOG_FORMAT", "plain", 1);
	assert_int_equal(log_format_from_env(&f), 0);
	assert_int_equal(f, LOG_FMT_PLAIN);
	setenv("MARU_LOG_FORMAT", "fancy", 1);
	assert_int_equal(log_format_from_env(&f), -EINVAL);
	assert_int_equal(f, LOG_FMT_PLAIN);
	unsetenv("MARU_LOG_FORMAT");
	unsetenv("JOURNAL_STREAM");
}

/* every name either user of the vocabulary ever took, any case */
static void test_level_names(void **state)
{
	static const struct {
		const char *name;
		int prio;
	} ok[] = {
		{"debug", LOG_DEBUG},	  {"INFO", LOG_INFO},
		{"Notice", LOG_NOTICE},	  {"warn", LOG_WARNING},
		{"WARNING", LOG_WARNING}, {"err", LOG_ERR},
		{"Error", LOG_ERR},
	};
	static const char *const bad[] = {"", "loud", "7", "errors", "crit"};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(log_level_parse(ok[i].name), ok[i].prio);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(log_level_parse(bad[i]), -EINVAL);
	/* the name written back (rm.conf) parses to the same level */
	for (i = LOG_ERR; i <= LOG_DEBUG; i++)
		assert_int_equal(log_level_parse(log_level_name((int)i)),
				 (int)i);
	assert_string_equal(log_level_name(LOG_WARNING), "warn");
	assert_string_equal(log_level_name(LOG_ERR), "error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain),
		cmocka_unit_test(test_journal),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_no_forged_lines),
		cmocka_unit_test(test_cut_lines_stay_whole),
		cmocka_unit_test(test_format_from_env),
		cmocka_unit_test(test_level_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
