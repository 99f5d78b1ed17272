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
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "opts.h"
#include "zcurve.h"

/* what --help says around the options (and so the man page) */
static const struct opts_doc doc = {
	.operands = "NAME",
	.max_operands = 1,
	.about = "Writes NAME.key (the public key, to give to peers) and "
		 "NAME.key_secret\n"
		 "(mode 0600, to keep); --public prints a certificate's "
		 "public key in Z85.\n",
	.after = "Exit status: 0 on success, 1 when a file cannot be read or "
		 "written,\n"
		 "2 on bad usage.\n",
};

/* bad usage: say why, exit 2 */
static int bad_usage(const char *why)
{
	fprintf(stderr, "maru-keygen: %s\nTry 'maru-keygen --help'.\n", why);
	return 2;
}

/* --public FILE: print the certificate's public key */
static int print_public(const char *file)
{
	uint8_t pub[ZCURVE_KEY];
	char why[512], z85[ZCURVE_Z85 + 1];

	if (zcurve_load_cert(file, pub, NULL, why, sizeof(why)) < 0) {
		fprintf(stderr, "maru-keygen: %s\n", why);
		return 1;
	}
	zcurve_z85_encode(pub, z85);
	printf("%s\n", z85);
	return 0;
}

/* NAME: write NAME.key and NAME.key_secret, say the public key */
static int write_pair(const char *name)
{
	uint8_t pub[ZCURVE_KEY];
	char why[512], path[4200], z85[ZCURVE_Z85 + 1];

	if (zcurve_write_cert(name, why, sizeof(why)) < 0) {
		fprintf(stderr, "maru-keygen: %s\n", why);
		return 1;
	}
	snprintf(path, sizeof(path), "%s.key", name);
	if (zcurve_load_cert(path, pub, NULL, why, sizeof(why)) == 0) {
		zcurve_z85_encode(pub, z85);
		printf("%s.key, %s.key_secret: public key %s\n", name, name,
		       z85);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *public = NULL, *name;
	const struct opt t[] = {
		OPTS_STR("public", 0, public, OPT_NONEMPTY, .arg = "CERT-FILE",
			 .help = "print the public key of a certificate"),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};
	int rc = opts_parse("maru-keygen", &doc, t, argc, argv);

	if (rc)
		return rc == 1 ? 0 : rc == -ENOMEM ? 1 : 2;
	name = optind < argc ? argv[optind] : NULL;
	if (public && name)
		return bad_usage("--public takes no NAME");
	if (!public && !name)
		return bad_usage("a NAME to write, or --public CERT-FILE");
	if (name && name[0] == '-')
		return bad_usage("a NAME may not start with '-'");
	if (zcurve_sodium_init() < 0) {
		fprintf(stderr,
			"maru-keygen: libsodium failed to initialise\n");
		return 1;
	}
	return public ? print_public(public) : write_pair(name);
}
