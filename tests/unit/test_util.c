/* SPDX-License-Identifier: Apache-2.0 */
/* test_util.c - size parsing/formatting, host:port, buf growth */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include "buf.h"
#include "util.h"

static void test_parse_size(void **state)
{
	uint64_t v;

	assert_int_equal(parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(parse_size("512K", &v), 0);
	assert_int_equal(v, 512 << 10);
	assert_int_equal(parse_size("100MiB", &v), 0);
	assert_int_equal(v, 100ull << 20);
	assert_int_equal(parse_size("4g", &v), 0);
	assert_int_equal(v, 4ull << 30);
	assert_int_equal(parse_size("0x1000", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(parse_size("", &v), -EINVAL);
	assert_int_equal(parse_size("-1", &v), -EINVAL);
	assert_int_equal(parse_size("12Q", &v), -EINVAL);
	assert_int_equal(parse_size("1Gx", &v), -EINVAL);
	assert_int_equal(parse_size("99999999999999T", &v), -ERANGE);
}

static void test_format_bytes(void **state)
{
	char s[32];

	assert_string_equal(format_bytes(0, s, sizeof(s)), "0B");
	assert_string_equal(format_bytes(1536, s, sizeof(s)), "1.5K");
	assert_string_equal(format_bytes(4ull << 30, s, sizeof(s)), "4.0G");
	assert_string_equal(format_bytes(3ull << 40, s, sizeof(s)), "3.0T");
}

static void test_host_port(void **state)
{
	char host[64];
	uint16_t port;

	assert_int_equal(parse_host_port("127.0.0.1:9850", host, sizeof(host),
					 &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 9850);
	assert_int_equal(parse_host_port("h:0", host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(parse_host_port("h", host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(parse_host_port(":80", host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(parse_host_port("h:65536", host, sizeof(host), &port),
			 -EINVAL);
}

static void test_buf(void **state)
{
	struct buf b = BUF_INIT;
	uint8_t x[1000];
	int i;

	for (i = 0; i < 100; i++)
		assert_int_equal(buf_put(&b, x, sizeof(x)), 0);
	assert_int_equal(b.len, 100000);
	assert_true(b.cap >= b.len);
	buf_free(&b);
	assert_null(b.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_format_bytes),
		cmocka_unit_test(test_host_port),
		cmocka_unit_test(test_buf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
