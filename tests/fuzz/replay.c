/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c - run a fuzz target over committed inputs, without libFuzzer
 *
 * Usage: <target>_replay DIR...   Every regular file in each DIR (missing
 * DIRs are skipped) is passed once to LLVMFuzzerTestOneInput.  A crash is a
 * test failure; so gcc builds and the ASan build both replay the corpus and
 * every past crash as a regression test (SQLite fuzzcheck).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data;
	long n;

	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = malloc(n > 0 ? (size_t)n : 1);
	if (!data || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) {
		free(data);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, (size_t)n);
	free(data);
	return 0;
}

int main(int argc, char **argv)
{
	int i, count = 0;

	for (i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		struct dirent *e;

		if (!d)
			continue;
		while ((e = readdir(d))) {
			char path[4096];
			struct stat st;

			snprintf(path, sizeof(path), "%s/%s", argv[i],
				 e->d_name);
			if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
				continue;
			if (replay_file(path) < 0) {
				fprintf(stderr, "cannot read %s\n", path);
				return 1;
			}
			count++;
		}
		closedir(d);
	}
	printf("replayed %d inputs\n", count);
	return 0;
}
