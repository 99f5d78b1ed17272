/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool_monitor.c - pool_monitor's output format and its STATS query
 *
 * The render tests compare whole frames byte for byte with the format of
 * docs/pool-monitor.md (title, header, rows sorted by path, Delta, bar,
 * CSV).  The fetch tests run pm_fetch() against a fake resource manager on
 * a loopback port (a thread that answers every request with one canned
 * reply), to check the snapshot and the one-line error messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pm.h"
#include "rm_client.h"
#include "rm_proto.h"
#include "util.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define TS "2026-03-11T14:30:05"
#define TITLE "  Maru Pool Monitor  \xe2\x80\x94  " TS "  (Ctrl+C to quit)\n\n"
static void add_pool(struct pm_snap *s, const char *path, uint32_t type,
		     uint64_t total, uint64_t free_bytes)
{
	struct rm_pool_stat st = {
		.dax_type = type,
		.total_size = total,
		.free_size = free_bytes,
		.align_bytes = 2 * MiB,
		.path = rm_str_from(path),
	};

	assert_int_equal(pm_snap_add(s, &st), 0);
}

/* The buffer's text as a C string (the buffer keeps one spare byte). */
static const char *text(struct buf *b)
{
	assert_int_equal(buf_reserve(b, 1), 0);
	b->data[b->len] = '\0';
	return (const char *)b->data;
}

static void test_usage_bar(void **state)
{
	char s[64];

	assert_string_equal(pm_usage_bar(0, 100, s, sizeof(s)),
			    "[------------------------------] 0.0%");
	assert_string_equal(pm_usage_bar(50, 100, s, sizeof(s)),
			    "[###############---------------] 50.0%");
	assert_string_equal(pm_usage_bar(100, 100, s, sizeof(s)),
			    "[##############################] 100.0%");
	/* truncated, not rounded: 99.9% still has one '-' */
	assert_string_equal(pm_usage_bar(999, 1000, s, sizeof(s)),
			    "[#############################-] 99.9%");
	assert_string_equal(pm_usage_bar(0, 0, s, sizeof(s)),
			    "[??????????????????????????????]");
}

static void test_timestamp(void **state)
{
	char ts[PM_TS_LEN];

	setenv("TZ", "UTC", 1);
	tzset();
	pm_timestamp(0, ts, sizeof(ts));
	assert_string_equal(ts, "1970-01-01T00:00:00");
	pm_timestamp(1773239405, ts, sizeof(ts));
	assert_string_equal(ts, "2026-03-11T14:30:05");
}

static void test_table(void **state)
{
	struct pm_snap s = {0};
	struct buf b = BUF_INIT;

	/* added out of order: the table is sorted by path */
	add_pool(&s, "/mnt/pmem0", RM_FS_DAX, 0, 0);
	add_pool(&s, "/dev/shm/maru-pool", RM_DEV_DAX, 4 * GiB, 3 * GiB);
	add_pool(&s, "/dev/dax0.0", RM_DEV_DAX, 256 * MiB, 256 * MiB);
	pm_snap_sort(&s);
	assert_int_equal(pm_render_table(&b, TS, &s, NULL), 0);
	/* the Device column is as wide as the longest path */
	assert_string_equal(
		text(&b), TITLE
		"  Device              Type          Used      Free     Total"
		"     Delta  Usage\n"
		"  ------------------  --------  --------  --------  --------"
		"  --------  -----\n"
		"  /dev/dax0.0         DEV_DAX         0B    256.0M    256.0M"
		"            [------------------------------] 0.0%\n"
		"  /dev/shm/maru-pool  EMULATED      1.0G      3.0G      4.0G"
		"            [#######-----------------------] 25.0%\n"
		"  /mnt/pmem0          FS_DAX          0B        0B        0B"
		"            [??????????????????????????????]\n");
	buf_free(&b);
	pm_snap_free(&s);
}

/* Columns of one line (one per UTF-8 character). */
static size_t cols(const char *s, size_t len)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			n++;
	}
	return n;
}

/* Every line of @t fits @width columns. */
static void assert_lines_fit(const char *t, size_t width)
{
	const char *nl;

	for (; *t; t = nl + 1) {
		nl = strchr(t, '\n');
		assert_non_null(nl);
		if (cols(t, (size_t)(nl - t)) > width)
			fail_msg("line wider than %zu: %.*s", width,
				 (int)(nl - t), t);
	}
}

/* @t contains @sub; on failure the whole frame is shown */
static void assert_has(const char *t, const char *sub)
{
	if (!strstr(t, sub))
		fail_msg("missing %s\nin:\n%s", sub, t);
}

#define LONG_PATH "/dev/shm/maru-test-0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"

/*
 * Every word after the Device column of every row is one of the values
 * the two pools of test_fit_window have: nothing shown was cut.
 */
static void assert_rows_whole(const char *t)
{
	static const char *const ok[] = {
		"DEV_DAX", "FS_DAX", "EMULATED", "96.0M", "158.0M", "254.0M",
		"+96.0M",  "1.0G",   "3.0G",	 "4.0G",  "25.0%",  "37.8%",
	};
	char *copy = strdup(t), *line, *word, *save1, *save2;
	size_t i;

	assert_non_null(copy);
	for (line = strtok_r(copy, "\n", &save1); line;
	     line = strtok_r(NULL, "\n", &save1)) {
		if (strncmp(line, "  /", 3) != 0)
			continue;
		word = strtok_r(line, " ", &save2); /* the path */
		while ((word = strtok_r(NULL, " ", &save2))) {
			if (word[0] == '[' && strlen(word) >= 12)
				continue; /* a whole bar: [ + 10 or 30 + ] */
			for (i = 0; i < ARRAY_SIZE(ok); i++) {
				if (strcmp(word, ok[i]) == 0)
					break;
			}
			if (i == ARRAY_SIZE(ok))
				fail_msg("cut or unknown value '%s' in\n%s",
					 word, t);
		}
	}
	free(copy);
}

static void test_fit_window(void **state)
{
	struct pm_snap prev = {0}, s = {0};
	struct pm_view v = {.width = 160, .live = true};
	struct buf b = BUF_INIT;
	size_t w;
	const char *t;

	add_pool(&prev, LONG_PATH, RM_DEV_DAX, 254 * MiB, 254 * MiB);
	add_pool(&s, LONG_PATH, RM_DEV_DAX, 254 * MiB, 158 * MiB);
	add_pool(&s, "/dev/dax0.0", RM_FS_DAX, 4 * GiB, 3 * GiB);
	pm_snap_sort(&s);

	/* 160 columns: everything, the path whole, q in the title */
	assert_int_equal(pm_render_view(&b, TS, &s, &prev, &v), 0);
	t = text(&b);
	assert_lines_fit(t, 160);
	assert_has(t, "  Maru Pool Monitor  \xe2\x80\x94  " TS
		      "  (q to quit, ? for help)\n");
	assert_has(t, "  " LONG_PATH "  EMULATED     96.0M"
		      "    158.0M    254.0M    +96.0M  [###########"
		      "-------------------] 37.8%\n");
	assert_has(t, "  /dev/dax0.0" /* padded to the path */
		      "                                         "
		      "     FS_DAX");

	/* 60 columns: Type, Delta and the bar go, the path is elided */
	buf_reset(&b);
	v.width = 60;
	assert_int_equal(pm_render_view(&b, TS, &s, &prev, &v), 0);
	t = text(&b);
	assert_lines_fit(t, 60);
	assert_null(strstr(t, "Type"));
	assert_null(strstr(t, "Delta"));
	assert_null(strstr(t, "[#"));
	assert_has(t, "(q quit, ? help)");
	assert_has(t, "  Pool Monitor  " TS "  (q quit, ? help)\n\n"
		      "  Device                         Used    Free   Total"
		      "  Usage\n"
		      "  ----------------------------  -----  ------  ------"
		      "  -----\n"
		      "  /dev/dax0.0                    1.0G    3.0G    4.0G"
		      "  25.0%\n"
		      "  /dev/shm/maru\xe2\x80\xa6"
		      "0-6f5e4d3c2b1a  96.0M  158.0M  254.0M  37.8%\n");

	/* any width: no line too wide, numbers whole or absent */
	for (w = 1; w <= 200; w++) {
		buf_reset(&b);
		v.width = w;
		v.live = w & 1;
		assert_int_equal(pm_render_view(&b, TS, &s, &prev, &v), 0);
		t = text(&b);
		assert_lines_fit(t, w < 21 ? 21 : w); /* the shortest title */
		assert_rows_whole(t);
	}
	buf_free(&b);
	pm_snap_free(&s);
	pm_snap_free(&prev);
}

static void test_no_pools(void **state)
{
	struct pm_snap s = {0};
	struct buf b = BUF_INIT;

	assert_int_equal(pm_render_table(&b, TS, &s, NULL), 0);
	assert_string_equal(text(&b), TITLE "  (no pools found)\n");
	buf_reset(&b);
	assert_int_equal(pm_render_csv_header(&b), 0);
	assert_int_equal(pm_render_csv(&b, TS, &s), 0);
	assert_string_equal(text(&b), "timestamp,dax_path,dax_type,total_bytes,"
				      "free_bytes,used_bytes,usage_pct\n");
	buf_free(&b);
}

static void test_delta(void **state)
{
	struct pm_snap prev = {0}, cur = {0};
	struct buf b = BUF_INIT;
	const char *t;

	add_pool(&prev, "/p/grow", RM_DEV_DAX, 4 * GiB, 3 * GiB);
	add_pool(&prev, "/p/shrink", RM_DEV_DAX, 4 * GiB, 2 * GiB);
	add_pool(&prev, "/p/same", RM_DEV_DAX, 4 * GiB, 2 * GiB);
	pm_snap_sort(&prev);
	add_pool(&cur, "/p/grow", RM_DEV_DAX, 4 * GiB, 3 * GiB - 512 * MiB);
	add_pool(&cur, "/p/shrink", RM_DEV_DAX, 4 * GiB, 4 * GiB);
	add_pool(&cur, "/p/same", RM_DEV_DAX, 4 * GiB, 2 * GiB);
	add_pool(&cur, "/p/new", RM_DEV_DAX, 4 * GiB, 2 * GiB);
	pm_snap_sort(&cur);
	assert_int_equal(pm_render_table(&b, TS, &cur, &prev), 0);
	t = text(&b);
	assert_non_null(strstr(t, "  /p/grow           EMULATED      1.5G"
				  "      2.5G      4.0G   +512.0M  [###"));
	assert_non_null(strstr(t, "  /p/new            EMULATED      2.0G"
				  "      2.0G      4.0G            [###"));
	assert_non_null(strstr(t, "  /p/same           EMULATED      2.0G"
				  "      2.0G      4.0G            [###"));
	assert_non_null(strstr(t, "  /p/shrink         EMULATED        0B"
				  "      4.0G      4.0G     -2.0G  [---"));
	/* rows in path order */
	assert_true(strstr(t, "/p/grow") < strstr(t, "/p/new"));
	assert_true(strstr(t, "/p/new") < strstr(t, "/p/same"));
	assert_true(strstr(t, "/p/same") < strstr(t, "/p/shrink"));
	buf_free(&b);
	pm_snap_free(&prev);
	pm_snap_free(&cur);
}

static void test_csv(void **state)
{
	struct pm_snap s = {0};
	struct buf b = BUF_INIT;

	add_pool(&s, "/dev/shm/b", RM_DEV_DAX, 3 * GiB, 2 * GiB);
	add_pool(&s, "/dev/shm/a", RM_FS_DAX, 0, 0);
	add_pool(&s, "/odd,\"path\"", RM_DEV_DAX, 100, 0);
	pm_snap_sort(&s);
	assert_int_equal(pm_render_csv_header(&b), 0);
	assert_int_equal(pm_render_csv(&b, TS, &s), 0);
	assert_string_equal(
		text(&b),
		"timestamp,dax_path,dax_type,total_bytes,free_bytes,used_bytes,"
		"usage_pct\n" TS ",/dev/shm/a,FS_DAX,0,0,0,0.00\n" TS
		",/dev/shm/"
		"b,EMULATED,3221225472,2147483648,1073741824,33.33\n" TS
		",\"/odd,\"\"path\"\"\",EMULATED,100,0,100,100.00\n");
	buf_free(&b);
	pm_snap_free(&s);
}

static void test_error_frame_and_sanitize(void **state)
{
	struct pm_snap s = {0};
	struct buf b = BUF_INIT;

	assert_int_equal(pm_render_error(&b, TS, "cannot reach X"), 0);
	assert_string_equal(text(&b), TITLE "  [error] cannot reach X\n");

	/* control bytes in a path never reach the terminal; free > total
	 * (a broken reply) shows as nothing used */
	add_pool(&s, "/a\033[2Jb\n", 7, 10, 20);
	assert_string_equal(s.pools[0].path, "/a?[2Jb?");
	assert_int_equal(pm_pool_used(&s.pools[0]), 0);
	buf_reset(&b);
	assert_int_equal(pm_render_table(&b, TS, &s, NULL), 0);
	assert_non_null(strstr(text(&b), "  /a?[2Jb?          ?"));
	buf_free(&b);
	pm_snap_free(&s);
}

/* A fake resource manager: every connection gets fake.reply and is closed. */
static struct {
	int lfd;
	uint16_t port;
	struct buf reply;  /* the canned response, header included */
	struct buf owners; /* ... to OWNERS; empty: the connection closes */
	pthread_t thread;
} fake;

static void *fake_serve(void *arg)
{
	uint8_t req[RM_HDR_SIZE];
	int fd;

	for (;;) {
		fd = accept(fake.lfd, NULL, NULL);
		if (fd < 0)
			return NULL; /* listening socket shut down */
		while (recv(fd, req, sizeof(req), MSG_WAITALL) == sizeof(req)) {
			if (get_u16le(req + 6) == RM_STATS_REQ) {
				send(fd, fake.reply.data, fake.reply.len,
				     MSG_NOSIGNAL);
				if (!fake.owners.len)
					break; /* one reply a connection */
			} else if (get_u16le(req + 6) == RM_OWNERS_REQ &&
				   fake.owners.len)
				send(fd, fake.owners.data, fake.owners.len,
				     MSG_NOSIGNAL);
			else
				break;
		}
		close(fd);
	}
}

static int fake_start(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fake.lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (fake.lfd < 0 || bind(fake.lfd, (struct sockaddr *)&a, len) < 0 ||
	    listen(fake.lfd, 8) < 0 ||
	    getsockname(fake.lfd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	fake.port = ntohs(a.sin_port);
	return pthread_create(&fake.thread, NULL, fake_serve, NULL) ? -1 : 0;
}

static int fake_stop(void **state)
{
	shutdown(fake.lfd, SHUT_RDWR);
	pthread_join(fake.thread, NULL);
	close(fake.lfd);
	buf_free(&fake.reply);
	buf_free(&fake.owners);
	return 0;
}

static void connect_client(struct rm_client *c)
{
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", fake.port);
	/* generous: the fake server thread may wait to be scheduled */
	assert_int_equal(rm_client_init(c, addr, "test:1", 10000), 0);
}

static void test_fetch_ok(void **state)
{
	struct rm_pool_stat st = {.dax_type = RM_DEV_DAX, .align_bytes = 4096};
	struct pm_snap s = {0};
	struct rm_client c;
	char err[256] = "";
	size_t start;

	buf_reset(&fake.reply);
	assert_int_equal(rm_encode_stats_begin(&fake.reply, &start), 0);
	st.path = rm_str_from("/z");
	st.total_size = 8 * MiB;
	st.free_size = 6 * MiB;
	assert_int_equal(rm_encode_stats_add(&fake.reply, &st), 0);
	st.path = rm_str_from("/a");
	st.dax_type = RM_FS_DAX;
	st.total_size = 4 * MiB;
	st.free_size = 4 * MiB;
	assert_int_equal(rm_encode_stats_add(&fake.reply, &st), 0);
	rm_encode_stats_end(&fake.reply, start, 2);

	connect_client(&c);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.pools[0].path, "/a");
	assert_int_equal(s.pools[0].dax_type, RM_FS_DAX);
	assert_int_equal(s.pools[0].total_bytes, 4 * MiB);
	assert_string_equal(s.pools[1].path, "/z");
	assert_int_equal(pm_pool_used(&s.pools[1]), 2 * MiB);
	assert_int_equal(s.naway, 0); /* no OWNERS: nothing shown, no error */
	pm_snap_free(&s);

	/* the owners that are away, sorted; connected ones are not shown */
	struct rm_owner o = {.regions = 3,
			     .bytes = 6 * MiB,
			     .hold_ms = RM_HOLD_UNTIL_BACK,
			     .away_since = 1700000000};
	struct buf b = BUF_INIT;

	buf_reset(&fake.owners);
	assert_int_equal(rm_encode_owners_begin(&fake.owners, &start), 0);
	o.id = rm_str_from("maru-server/h/2");
	assert_int_equal(rm_encode_owners_add(&fake.owners, &o), 0);
	o.id = rm_str_from("live:1");
	o.away_since = 0;
	assert_int_equal(rm_encode_owners_add(&fake.owners, &o), 0);
	o.id = rm_str_from("maru-server/h/1");
	o.away_since = 1700000000;
	o.hold_ms = 30000;
	assert_int_equal(rm_encode_owners_add(&fake.owners, &o), 0);
	rm_encode_owners_end(&fake.owners, start, 3, 0);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s.naway, 2);
	assert_string_equal(s.away[0].id, "maru-server/h/1");
	assert_string_equal(s.away[1].id, "maru-server/h/2");
	assert_int_equal(s.away[1].regions, 3);
	assert_int_equal(pm_render_table(&b, "T", &s, NULL), 0);
	assert_non_null(
		strstr((char *)b.data, "maru-server/h/2: 3 region(s), 6.0M"));
	assert_non_null(strstr((char *)b.data, "held until it returns"));
	assert_non_null(
		strstr((char *)b.data, "freed when its grace period ends"));
	assert_null(strstr((char *)b.data, "live:1"));
	buf_free(&b);
	buf_reset(&fake.owners);
	pm_snap_free(&s);
	rm_client_destroy(&c);
}

static void test_fetch_errors(void **state)
{
	static const char junk[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
	struct pm_snap s = {0};
	struct rm_client c;
	char err[256], want[128];
	size_t start;

	/* the daemon says no: its message is shown */
	buf_reset(&fake.reply);
	assert_int_equal(
		rm_encode_error_resp(&fake.reply, -EPROTO, "bad header"), 0);
	connect_client(&c);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), -EPROTO);
	snprintf(want, sizeof(want),
		 "the resource manager at 127.0.0.1:%u refused STATS: "
		 "bad header",
		 fake.port);
	assert_string_equal(err, want);

	/* not a resource manager at all */
	buf_reset(&fake.reply);
	assert_int_equal(buf_put(&fake.reply, junk, strlen(junk)), 0);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "unexpected reply from the resource "
				    "manager at 127.0.0.1:"));

	/* more pools announced than sent */
	buf_reset(&fake.reply);
	assert_int_equal(rm_encode_stats_begin(&fake.reply, &start), 0);
	rm_encode_stats_end(&fake.reply, start, 3);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), -EPROTO);
	assert_null(s.pools);
	rm_client_destroy(&c);
}

static void test_fetch_unreachable(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	struct pm_snap s = {0};
	struct rm_client c;
	char addr[32], err[256], want[128];
	int fd;

	/* a port that was free a moment ago: nothing listens there */
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
	assert_int_equal(rm_client_init(&c, addr, NULL, 2000), 0);
	assert_int_equal(pm_fetch(&c, &s, err, sizeof(err)), -ECONNREFUSED);
	snprintf(want, sizeof(want),
		 "cannot reach the resource manager at %s: %s", addr,
		 strerror(ECONNREFUSED));
	assert_string_equal(err, want);
	assert_null(strchr(err, '\n'));
	rm_client_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest render[] = {
		cmocka_unit_test(test_usage_bar),
		cmocka_unit_test(test_timestamp),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_fit_window),
		cmocka_unit_test(test_no_pools),
		cmocka_unit_test(test_delta),
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_error_frame_and_sanitize),
	};
	const struct CMUnitTest fetch[] = {
		cmocka_unit_test(test_fetch_ok),
		cmocka_unit_test(test_fetch_errors),
		cmocka_unit_test(test_fetch_unreachable),
	};
	int failed;

	failed = cmocka_run_group_tests_name("render", render, NULL, NULL);
	failed += cmocka_run_group_tests_name("fetch", fetch, fake_start,
					      fake_stop);
	return failed ? 1 : 0;
}
