/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_header.c - the public header compiles on its own (nothing
 * included before it) and the library links with only exported symbols
 */
#include <maru/maru.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	struct maru_key k = maru_key_int(7);
	struct maru_page pg;
	int rc;

	if (strcmp(maru_version(), "0.1.0"))
		return 1;
	if (maru_config_new(&cfg) < 0)
		return 1;
	if (maru_handler_new(cfg, &h) < 0)
		return 1;
	maru_config_free(cfg);
	/* not connected: every operation says so */
	rc = maru_page_alloc(h, 1, &pg);
	if (rc != -ENOTCONN || maru_kv_exists(h, &k) != -ENOTCONN ||
	    maru_handler_is_connected(h) || maru_handler_healthcheck(h))
		return 1;
	if (strlen(maru_handler_instance_id(h)) != 36)
		return 1;
	maru_handler_close(h); /* a no-op before connect */
	maru_handler_free(h);
	puts("ok");
	return 0;
}
