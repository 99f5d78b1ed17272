/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maru-keygen - write a CURVE key pair for maru-server or a client
 *
 *   maru-keygen NAME        NAME.key (public, 0644) + NAME.key_secret (0600)
 *   maru-keygen --public FILE   print the Z85 public key of a certificate
 *
 * Exit status: 0, 1 when a file cannot be read or written, 2 on bad usage.
 *
 * The files are those of pyzmq's zmq.auth.create_certificates() and czmq's
 * zcert, so either side may make them (docs/operations.md "Security").
 * The server gets its NAME.key_secret (--curve-secret-key-file) and a
 * directory of its clients' NAME.key files (--curve-clients); a client
 * gets its own NAME.key_secret and the server's public key (file or Z85).
 */
#include <stdio.h>
#include <string.h>

#include "zcurve.h"

static int usage(FILE *f, int rc)
{
	fprintf(f, "Usage: maru-keygen NAME\n"
		   "  or:  maru-keygen --public CERT-FILE\n"
		   "Writes NAME.key (the public key, to give to peers) and "
		   "NAME.key_secret\n"
		   "(mode 0600, to keep); --public prints a certificate's "
		   "public key in Z85.\n"
		   "\n"
		   "Options:\n"
		   "      --public CERT-FILE  print the public key of a "
		   "certificate\n"
		   "  -h, --help              this text\n"
		   "      --version           print the version and exit\n"
		   "\n"
		   "Exit status: 0 on success, 1 when a file cannot be read or "
		   "written,\n"
		   "2 on bad usage.\n");
	return rc;
}

int main(int argc, char **argv)
{
	uint8_t pub[ZCURVE_KEY];
	char why[512], path[4200], z85[ZCURVE_Z85 + 1];

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return usage(stdout, 0);
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		printf("maru-keygen %s\n", MARU_VERSION);
		return 0;
	}
	if (zcurve_sodium_init() < 0) {
		fprintf(stderr,
			"maru-keygen: libsodium failed to initialise\n");
		return 1;
	}
	if (argc == 3 && !strcmp(argv[1], "--public")) {
		if (zcurve_load_cert(argv[2], pub, NULL, why, sizeof(why)) <
		    0) {
			fprintf(stderr, "maru-keygen: %s\n", why);
			return 1;
		}
		zcurve_z85_encode(pub, z85);
		printf("%s\n", z85);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-') {
		if (argc >= 2 && argv[1][0] == '-' &&
		    strcmp(argv[1], "--public"))
			fprintf(stderr, "maru-keygen: unknown option %s\n",
				argv[1]);
		return usage(stderr, 2);
	}
	if (zcurve_write_cert(argv[1], why, sizeof(why)) < 0) {
		fprintf(stderr, "maru-keygen: %s\n", why);
		return 1;
	}
	snprintf(path, sizeof(path), "%s.key", argv[1]);
	if (zcurve_load_cert(path, pub, NULL, why, sizeof(why)) == 0) {
		zcurve_z85_encode(pub, z85);
		printf("%s.key, %s.key_secret: public key %s\n", argv[1],
		       argv[1], z85);
	}
	return 0;
}
