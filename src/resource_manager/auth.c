/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c - the server secret and auth tokens (docs/protocol.md §1, auth token)
 *
 * token = first 8 bytes, read as a little-endian u64, of
 *   HMAC-SHA256(secret, region_id || offset || length || nonce || owner)
 * with the four u64 little-endian and owner the allocating client_id's
 * bytes.  This is upstream's algorithm, so an upstream state directory
 * (secret + checkpoint) verifies here.  OpenSSL's libcrypto computes the
 * MAC; rm_auth_random() (src/common/rm_auth.c) draws the secret and nonces.
 *
 * Verification recomputes the token from the *presented* handle fields and
 * the stored nonce and owner, and compares in constant time.
 *
 * The secret is 32 random bytes in <state_dir>/secret, mode 0600, created
 * with O_EXCL and fsync'ed.  client.key and reader.key (0640) are replaced
 * atomically (src/common/atomicfile.h), then the directory fsync'ed.
 *
 * Layering: below region.c (which asks for tokens); this file calls only
 * src/common (rm_auth.c, atomicfile.c) and libcrypto.
 * Ownership: the secret and the keys live in struct rm.
 */
#include "rm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "atomicfile.h"
#include "log.h"

uint64_t auth_token(const struct rm *rm, uint64_t region_id, uint64_t offset,
		    uint64_t length, uint64_t nonce, const char *owner,
		    size_t owner_len)
{
	uint8_t msg[32 + RM_CLIENT_ID_MAX + 1];
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (owner_len > RM_CLIENT_ID_MAX + 1)
		owner_len = RM_CLIENT_ID_MAX + 1;
	put_u64le(msg, region_id);
	put_u64le(msg + 8, offset);
	put_u64le(msg + 16, length);
	put_u64le(msg + 24, nonce);
	memcpy(msg + 32, owner, owner_len);
	if (!HMAC(EVP_sha256(), rm->secret, RM_SECRET_SIZE, msg, 32 + owner_len,
		  md, &mdlen) ||
	    mdlen < 8)
		return 0; /* cannot happen with SHA-256; never verifies */
	return get_u64le(md);
}

bool auth_check(const struct rm *rm, const struct region *r,
		const struct rm_handle *h)
{
	uint8_t want[8], got[8];
	uint64_t t;

	if (h->region_id != r->id)
		return false;
	t = auth_token(rm, h->region_id, h->offset, h->length, r->nonce,
		       r->owner->id, r->owner->idlen);
	put_u64le(want, t);
	put_u64le(got, h->auth_token);
	return t != 0 && CRYPTO_memcmp(want, got, sizeof(want)) == 0;
}

/* Read up to RM_SECRET_SIZE bytes.  Return: bytes read, or -errno. */
static int read_secret(struct rm *rm, uint8_t *out)
{
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd;

	fd = openat(rm->state_dirfd, "secret", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) == 0 && (st.st_mode & 077))
		log_warn("%s/secret: mode %03o lets other users read it; "
			 "chmod 600 it",
			 rm->cfg.state_dir, (unsigned)(st.st_mode & 0777));
	while (got < RM_SECRET_SIZE) {
		n = read(fd, out + got, RM_SECRET_SIZE - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return (int)got;
}

static int write_secret(struct rm *rm)
{
	size_t off = 0;
	ssize_t n;
	int fd, rc = 0;

	(void)unlinkat(rm->state_dirfd, "secret", 0); /* a short one */
	fd = openat(rm->state_dirfd, "secret",
		    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (off < RM_SECRET_SIZE) {
		n = write(fd, rm->secret + off, RM_SECRET_SIZE - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc == 0 && fsync(rm->state_dirfd) < 0)
		rc = -errno;
	return rc;
}

/* <state_dir>/reader.key from the client key, when not there yet */
static int write_reader_key(struct rm *rm)
{
	uint8_t old[RM_AUTH_KEY_LEN];
	char path[4200], text[66];
	int rc;

	if (rm_auth_reader_key(rm->client_key, rm->reader_key) < 0) {
		log_err("cannot derive the reader key");
		return -EIO;
	}
	snprintf(path, sizeof(path), "%s/%s", rm->cfg.state_dir,
		 RM_AUTH_READER_KEY_FILE);
	if (rm_auth_key_load(path, old) == 0 &&
	    !memcmp(old, rm->reader_key, sizeof(old)))
		return 0;
	rm_auth_key_text(rm->reader_key, text);
	rc = atomicfile_write(rm->state_dirfd, RM_AUTH_READER_KEY_FILE, text,
			      strlen(text), 0640);
	if (rc == 0 && fsync(rm->state_dirfd) < 0)
		rc = -errno;
	if (rc < 0)
		log_err("%s: cannot write: %s", path, strerror(-rc));
	return rc;
}

int auth_load_client_key(struct rm *rm)
{
	char path[4200], text[66];
	struct stat st;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", rm->cfg.state_dir,
		 RM_AUTH_KEY_FILE);
	rc = rm_auth_key_load(path, rm->client_key);
	if (rc == 0) {
		if (stat(path, &st) == 0 && (st.st_mode & 007))
			log_warn("%s is readable by every user (mode %03o): "
				 "anyone can then allocate and free; chmod "
				 "640",
				 path, (unsigned)(st.st_mode & 0777));
		log_dbg("loaded %s", path);
		return write_reader_key(rm);
	}
	if (rc != -ENOENT) {
		log_err("%s: %s; refusing to start (remove it to have a new "
			"one made)",
			path,
			rc == -EINVAL ? "not 64 hex digits" : strerror(-rc));
		return rc;
	}
	rc = rm_auth_random(rm->client_key, sizeof(rm->client_key));
	if (rc < 0) {
		log_err("cannot draw a random client key");
		return rc;
	}
	rm_auth_key_text(rm->client_key, text);
	rc = atomicfile_write(rm->state_dirfd, RM_AUTH_KEY_FILE, text,
			      strlen(text), 0640);
	if (rc == 0 && fsync(rm->state_dirfd) < 0)
		rc = -errno;
	if (rc < 0) {
		log_err("%s: cannot write: %s", path, strerror(-rc));
		return rc;
	}
	log_info("created a new client key in %s (maru-server reads it: "
		 "--rm-key-file)",
		 path);
	return write_reader_key(rm);
}

int auth_load_secret(struct rm *rm, bool need_existing)
{
	int n, rc;

	n = read_secret(rm, rm->secret);
	if (n == RM_SECRET_SIZE) {
		rm->have_secret = true;
		log_dbg("loaded %s/secret", rm->cfg.state_dir);
		return 0;
	}
	if (need_existing) {
		log_err("%s/secret is %s but recovered allocations need it to "
			"verify their tokens: refusing to start",
			rm->cfg.state_dir, n < 0 ? "missing" : "too short");
		return n < 0 ? n : -EINVAL;
	}
	rc = rm_auth_random(rm->secret, RM_SECRET_SIZE);
	if (rc < 0) {
		log_err("cannot draw a random secret");
		return rc;
	}
	rm->have_secret = true;
	rc = write_secret(rm);
	if (rc < 0)
		log_warn("%s/secret: cannot save the new secret: %s",
			 rm->cfg.state_dir, strerror(-rc));
	else
		log_info("created a new secret in %s/secret",
			 rm->cfg.state_dir);
	return 0;
}
