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
	/* every uint64 fits a few characters (a cell of the tools) */
	assert_string_equal(format_bytes(5ull << 50, s, sizeof(s)), "5.0P");
	assert_string_equal(format_bytes(UINT64_MAX, s, sizeof(s)), "16.0E");
}

static void test_host_port(void **state)
{
	char host[64];
	uint16_t port;

	assert_int_equal(
		parse_host_port("127.0.0.1:9850", host, sizeof(host), &port),
		0);
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

/* a second, slower decoder: the code point, then the ranges Python checks */
static bool utf8_ref(const uint8_t *s, size_t n)
{
	size_t i = 0, k, j;
	uint32_t cp, min;

	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if ((s[i] & 0xe0) == 0xc0)
			k = 1, cp = s[i] & 0x1f, min = 0x80;
		else if ((s[i] & 0xf0) == 0xe0)
			k = 2, cp = s[i] & 0x0f, min = 0x800;
		else if ((s[i] & 0xf8) == 0xf0)
			k = 3, cp = s[i] & 0x07, min = 0x10000;
		else
			return false;
		if (n - i - 1 < k)
			return false;
		for (j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

static void test_utf8(void **state)
{
	static const struct {
		const char *s;
		bool ok;
	} cases[] = {
		{"", true},
		{"plain ascii, longer than eight bytes", true},
		{"caf\xc3\xa9", true},		 /* U+00E9 */
		{"\xe2\x82\xac", true},		 /* U+20AC */
		{"\xf0\x9f\x98\x80", true},	 /* U+1F600 */
		{"\xf4\x8f\xbf\xbf", true},	 /* U+10FFFF */
		{"\xc0\x80", false},		 /* overlong NUL */
		{"\xe0\x80\xaf", false},	 /* overlong */
		{"\xf0\x8f\xbf\xbf", false},	 /* overlong */
		{"\xed\xa0\x80", false},	 /* surrogate U+D800 */
		{"\xf4\x90\x80\x80", false},	 /* U+110000 */
		{"\xf8\x88\x80\x80\x80", false}, /* 5 bytes */
		{"\x80", false},		 /* lone continuation */
		{"abcdefgh\xc3", false},	 /* truncated after a run */
		{"\xe2\x82", false},		 /* truncated */
		{"\xe2\x28\xa1", false},	 /* bad continuation */
		{"\xff", false},
	};
	uint8_t b[3];
	size_t i;
	int x;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(utf8_valid(cases[i].s, strlen(cases[i].s)),
				 cases[i].ok);
	/* every 1-, 2- and 3-byte string against the reference */
	for (x = 0; x < 1 << 24; x += (x < 1 << 16 ? 1 : 7)) {
		b[0] = (uint8_t)(x >> 16);
		b[1] = (uint8_t)(x >> 8);
		b[2] = (uint8_t)x;
		assert_int_equal(utf8_valid(b, 3), utf8_ref(b, 3));
		assert_int_equal(utf8_valid(b + 1, 2), utf8_ref(b + 1, 2));
		assert_int_equal(utf8_valid(b + 2, 1), utf8_ref(b + 2, 1));
	}
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
		cmocka_unit_test(test_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
