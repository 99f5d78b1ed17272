/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_int.h - what the loop's files share: a connection, the loop's
 * state, and the few calls one makes into the other
 *
 *   server.c   the loop: reading, answering, writing, heartbeats, the
 *              tick, parked requests (its opening comment is the design)
 *   accept.c   who gets a connection: the listening socket, accept(),
 *              --max-connections and --max-connections-per-address, the
 *              sockets' TCP options
 *
 * accept.c calls server.c's connection calls below; server.c calls
 * accept.c's two entry points.  Both run on the loop's thread only.
 */
#ifndef MARU_MDS_SERVER_INT_H
#define MARU_MDS_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "evloop.h"
#include "handler.h"
#include "server.h"
#include "zcurve.h"
#include "zmtp.h"

#define BIG_REPLY (64u << 10) /* written from the reply buffer, no copy */
#define LOOKAHEAD 3	      /* messages taken ahead of the one handled */
#define WIN (LOOKAHEAD + 1)
#define IN_MIN_FREE (16u << 10) /* room for one read */
#define BUF_KEEP (1u << 20)	/* larger idle buffers are released */
#define FEED_FD 3		/* server_feed()'s connection, for store.c */
#define TRIM_AFTER_CLOSES 64	/* closed connections ... */
#define TRIM_EVERY_NS 10000000000ull /* ... and at most every 10 s */

struct conn {
	int fd;		    /* owns; -1: server_feed()'s connection */
	int key;	    /* the fd store.c knows it by */
	uint32_t serial;    /* unique per connection: its "routing id" */
	bool ping_out;	    /* a PING sent, nothing heard since */
	bool queued;	    /* complete messages may wait in @in */
	bool dead;	    /* closed; freed at the end of the round */
	uint32_t ev;	    /* EVLOOP_* registered */
	struct zmtp_conn z; /* the ZMTP state of @in (src/common/zmtp.h) */
	struct buf in;	    /* owns: received bytes (z.rd: consumed) */
	struct buf out;	    /* owns: bytes not yet written */
	size_t wr;	    /* out: written prefix */
	/* CURVE (--curve-secret-key-file): @raw is what the socket gave,
	 * @in its plaintext; out[0, sealed) is on-the-wire bytes, the rest
	 * plaintext frames that conn_flush() seals first */
	struct zcurve *cz; /* owns; NULL: the NULL mechanism */
	struct buf raw;	   /* owns: received bytes (cz->rd: consumed) */
	size_t sealed;
	uint64_t born;	   /* vclock: accepted */
	uint64_t last_rx;  /* vclock: last input */
	uint64_t stuck_at; /* vclock: output waiting, no progress since */
	int outq;	   /* SIOCOUTQ when stuck_at was last looked at */
	/* a request waiting for the resource manager: nothing more is
	 * taken from this connection until it is answered */
	struct mds_wait *wait; /* borrows (the RM session holds it) */
	struct buf env;	       /* owns: its reply's envelope, encoded */
	struct server *sv;     /* borrows: the loop it belongs to */
	struct conn *next_dead;
	uint8_t addr[16]; /* the peer's address (IPv4 mapped into IPv6) */
	bool remote;	  /* not loopback: counted per address */
};

struct server {
	struct evloop *el;   /* owns: the loop (src/common/evloop.h) */
	int lfd, tfd;	     /* owns: listening socket, tick timerfd */
	bool lfd_off;	     /* accept paused (out of fds) */
	struct mds *s;	     /* borrows */
	struct rmsess *rm;   /* borrows; NULL without sockets */
	struct buf body;     /* owns: reply body, reused */
	struct conn **conns; /* owns: by fd */
	size_t nconns;	     /* slots */
	int maxfd;	     /* highest fd with a connection, or -1 */
	int nqueued;	     /* connections with queued set */
	uint32_t serial;
	struct conn *dead;	  /* closed, to free at the end of the round */
	struct conn *feed;	  /* server_feed()'s connection */
	struct zmtp_msg win[WIN]; /* the one handled and the look-ahead */
	uint64_t hs[WIN];	  /* mds_prefetch() of each, 0: none */
	uint8_t ready[128];	  /* greeting + READY, sent at accept */
	size_t ready_len;
	const struct zcurve_keys *curve;  /* borrows; NULL: no CURVE */
	const struct zcurve_allow *allow; /* borrows: the clients let in */
	struct buf seal;		  /* owns: sealed output, reused */
	uint64_t last_wake;		  /* monotonic ns */
	uint64_t stall_total;		  /* ns subtracted from the clock */
	uint64_t stall_min;		  /* a gap this long is a stall */
	uint64_t hb_ivl, hb_timeout;	  /* ns: SERVER_HB_* or the test knob */
	uint64_t busy_ns;		  /* --busy-poll-us, 0: off */
	int max_conns;			  /* --max-connections, 0: none */
	int max_per_addr;   /* --max-connections-per-address, 0: none */
	int nopen;	    /* open client connections */
	uint64_t max_input; /* --max-input-bytes, 0: none */
	uint64_t in_total;  /* bytes allocated to open connections' input */
	uint32_t closed_since_trim; /* connections closed since malloc_trim */
	uint64_t last_trim;	    /* monotonic ns */
	uint64_t next_full_log;	    /* monotonic ns: "max connections" logged */
	uint64_t spin_until;	    /* monotonic ns: look without sleeping */
	uint64_t proto_errs;	    /* connections closed for bad input */
	uint64_t next_proto_log;
	uint64_t next_refuse_log; /* monotonic ns: a refused CURVE key */
	bool stop;
};

/* the handshake is over (ZMTP's, and CURVE's when on) */
static inline bool conn_ready(const struct conn *c)
{
	return c->z.st == ZMTP_ST_OPEN && (!c->cz || zcurve_open(c->cz));
}

/* server.c: a connection's life */
struct conn *conn_new(struct server *sv, int fd, int key);
void conn_close(struct server *sv, struct conn *c, const char *why);
void conn_free(struct conn *c);
int conn_flush(struct server *sv, struct conn *c, const uint8_t *extra,
	       size_t n);
void conn_event(struct evloop *el, int fd, unsigned events, void *arg);

/* accept.c */
int server_listen(struct server *sv, const struct server_opts *o);
void server_accept(struct server *sv);

#endif
