# SPDX-License-Identifier: Apache-2.0
"""Lookup counters and pins with a deadline (docs/metadata-server.md,
"Lookups counted"; docs/protocol.md).

* maru-server counts the lookups it answers (LOOKUP_KV, EXISTS_KV and
  their batch forms): keys, hits, the bytes of the hits, batches, the keys
  in batches and the found prefix of each batch -- per instance id and
  pool-wide, in GET_STATS "lookups" and GET_USAGE;
* libmaru counts the lookups it answers from the shared index and
  reports them in HEARTBEAT: the figures are the same whether the index
  answered or the server did (no MARU_STAT needed);
* a request with "count": false is not counted (a client counting it);
* a pin with "ttl_ms" (Python: pin(key, ttl=seconds)) is dropped by the
  server at its deadline; UNPIN drops a soft pin first; a plain pin stays.
"""
import time

import pytest

from conftest import wait_until
from test_shm_index import handler
from mds_wire import (BATCH_EXISTS_KV, BATCH_LOOKUP_KV, BATCH_PIN_KV,
                      DELETE_KV, EXISTS_KV, GET_STATS, GET_USAGE, LOOKUP_KV,
                      PIN_KV, REGISTER_KV, REQUEST_ALLOC, ReqClient,
                      handle_of)

MiB = 1 << 20
FIELDS = ("keys", "hits", "hit_bytes", "batches", "batch_keys",
          "prefix_hits")


def get(url, mtype):
    c = ReqClient(url)
    try:
        return c.call(mtype, {})[1]
    finally:
        c.close()


def lookups(url, inst=None):
    lk = get(url, GET_STATS)["lookups"]
    if inst is None:
        return {k: lk[k] for k in FIELDS}
    return lk["instances"].get(inst)


def raw_writer(url, inst, n, length=1000):
    """An upstream-style client: a region, keys k0..k{n-1} of @length."""
    c = ReqClient(url)
    r = c.call(REQUEST_ALLOC, {"instance_id": inst, "size": 4 * MiB})[1]
    rid = handle_of(r)["region_id"]
    for i in range(n):
        r = c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rid,
                                 "kv_offset": i * 4096,
                                 "kv_length": length})[1]
        assert r["success"], r
    return c


def test_server_counts_its_answers(mds):
    c = raw_writer(mds.url, "raw", 4)
    try:
        assert lookups(mds.url) == dict.fromkeys(FIELDS, 0)
        assert c.call(LOOKUP_KV, {"key": "k0"})[1]["found"]
        assert not c.call(LOOKUP_KV, {"key": "nope"})[1]["found"]
        assert c.call(EXISTS_KV, {"key": "k1"})[1]["exists"]
        # a batch: found, found, missing, found -> a prefix of 2
        r = c.call(BATCH_EXISTS_KV, {"keys": ["k0", "k1", "x", "k2"]})[1]
        assert r["results"] == [True, True, False, True]
        r = c.call(BATCH_LOOKUP_KV, {"keys": ["y", "k3"]})[1]
        assert [e["found"] for e in r["entries"]] == [False, True]
        want = {"keys": 9, "hits": 6, "hit_bytes": 6000, "batches": 2,
                "batch_keys": 6, "prefix_hits": 2}
        assert lookups(mds.url) == want
        # per instance id: the connection's (it allocated as "raw")
        assert lookups(mds.url, "raw") == want
        usage = get(mds.url, GET_USAGE)["instances"]
        assert [u["lookups"] for u in usage
                if u["instance_id"] == "raw"] == [want]
        # "count": false: a client that counts the lookup itself
        assert c.call(LOOKUP_KV, {"key": "k0", "count": False})[1]["found"]
        c.call(BATCH_EXISTS_KV, {"keys": ["k0"], "count": False})
        assert lookups(mds.url) == want
        # other requests are not lookups
        c.call(PIN_KV, {"key": "k0"})
        c.call(DELETE_KV, {"key": "k3"})
        assert lookups(mds.url) == want
    finally:
        c.close()


def workload(w, r, keys):
    """The same lookups by @r, whoever answers them."""
    assert r.batch_exists(keys[:3] + ["gone"] + keys[3:]) == \
        [True] * 3 + [False] + [True] * (len(keys) - 3)
    assert r.exists(keys[0]) and not r.exists("gone")
    got = r.batch_retrieve(keys[:2] + ["gone"])
    assert [g is not None for g in got] == [True, True, False]
    assert r.retrieve(keys[1]) is not None and r.retrieve("gone") is None


@pytest.mark.parametrize("index", ["on", "off"])
def test_same_figures_with_and_without_the_index(rm, start_mds, index,
                                                 monkeypatch):
    """libmaru reports what the shared index answered: GET_STATS shows
    the same counts as when the server answers every lookup."""
    if index == "off":
        monkeypatch.setenv("MARU_SHM_INDEX", "0")
    m = start_mds(rm.address, extra=["--client-lease-ttl", "0.6"])
    w = handler(m.url, instance_id="writer")
    r = handler(m.url, instance_id="reader")
    try:
        keys = [f"key{i}" for i in range(6)]
        for k in keys:
            a = w.alloc(3000)
            a.buf[:3] = b"abc"
            assert w.store(k, a)
        # the reader maps the writer's region first (a fallback would
        # otherwise be the server's to count: the figures are equal
        # either way, but the index answers from here on)
        assert r.retrieve(keys[0]) is not None
        assert wait_until(lambda: lookups(m.url)["keys"] == 1, timeout=10)
        base = lookups(m.url)
        workload(w, r, keys)
        want = {"keys": 7 + 2 + 3 + 2, "hits": 6 + 1 + 2 + 1,
                "hit_bytes": 3000 * (6 + 1 + 2 + 1), "batches": 2,
                "batch_keys": 7 + 3, "prefix_hits": 3 + 2}
        # (the index's answers arrive with the next HEARTBEAT)
        assert wait_until(lambda: {k: lookups(m.url)[k] - base[k]
                                   for k in FIELDS} == want, timeout=10), \
            (lookups(m.url), base)
        if index == "on":
            assert r.index_stats()["local_hits"] > 0
        assert lookups(m.url, "reader")["keys"] == 1 + want["keys"]
        assert lookups(m.url, "writer") is None  # it looked nothing up
    finally:
        r.close()
        w.close()


@pytest.mark.parametrize("ttl", [None, "0"])
def test_closing_client_reports_its_last_lookups(rm, start_mds, ttl):
    """The default lease (no renewal meanwhile), and a server that grants
    no lease (no renewals at all): the last figures go at close."""
    m = start_mds(rm.address,
                  extra=["--client-lease-ttl", ttl] if ttl else [])
    w = handler(m.url, instance_id="w")
    r = handler(m.url, instance_id="r")
    try:
        a = w.alloc(100)
        assert w.store("one", a)
        assert r.retrieve("one") is not None  # maps the region
        for _ in range(20):
            assert r.exists("one")
        if r.index_stats()["attached"]:
            assert lookups(m.url)["keys"] < 21  # not all told yet
        r.close()
        r = None
        assert lookups(m.url)["keys"] == 21
    finally:
        if r:
            r.close()
        w.close()


def test_soft_pins_expire(mds):
    h = handler(mds.url, instance_id="pinner")
    try:
        for k in ("a", "b", "c"):
            assert h.store(k, h.alloc(100))
        assert h.pin("a", ttl=0.3)
        assert h.pin("b")  # a plain pin, as upstream's
        assert h.pin("b", ttl=0.2)
        assert h.batch_pin(["c"], ttl=0.3) == [True]
        assert not h.delete("a") and not h.delete("c")
        assert h.unpin("b")  # the soft one goes first
        time.sleep(0.6)
        assert not h.delete("b")  # the plain pin stays
        assert wait_until(lambda: h.delete("a"), timeout=5)
        assert h.delete("c")
        assert h.unpin("b") and h.delete("b")
        assert not h.pin("gone", ttl=1)
    finally:
        h.close()


def test_soft_pin_on_the_wire(mds):
    """An upstream-style client: PIN_KV / BATCH_PIN_KV with "ttl_ms"."""
    c = raw_writer(mds.url, "raw-pins", 2)
    try:
        assert c.call(PIN_KV, {"key": "k0", "ttl_ms": 200})[1]["exists"]
        r = c.call(BATCH_PIN_KV, {"keys": ["k1"], "ttl_ms": 200})[1]
        assert r["results"] == [True]
        pinned = [u["pinned"] for u in get(mds.url, GET_USAGE)["instances"]
                  if u["instance_id"] == "raw-pins"]
        assert pinned == [2000]
        assert not c.call(DELETE_KV, {"key": "k0"})[1]["success"]
        assert wait_until(lambda: c.call(DELETE_KV, {"key": "k0"})[1]
                          ["success"], timeout=5)
        assert c.call(DELETE_KV, {"key": "k1"})[1]["success"]
        # a huge ttl_ms is cut to the longest life, not refused
        c.call(REGISTER_KV, {"key": "k2", "region_id": handle_of(
            c.call(REQUEST_ALLOC, {"instance_id": "raw-pins",
                                   "size": MiB})[1])["region_id"],
            "kv_offset": 0, "kv_length": 10})
        assert c.call(PIN_KV, {"key": "k2", "ttl_ms": 1 << 62})[1]["exists"]
        r = c.call(PIN_KV, {"key": "k2", "ttl_ms": -1})[1]
        assert "ttl_ms" in r["error"]
    finally:
        c.close()


def test_ttl_argument_errors(mds):
    h = handler(mds.url, instance_id="bad-ttl")
    try:
        assert h.store("k", h.alloc(10))
        for bad in (0, -1, float("nan"), 1e12):
            with pytest.raises(ValueError, match="ttl"):
                h.pin("k", ttl=bad)
        with pytest.raises(TypeError, match="ttl"):
            h.pin("k", ttl="5")
        with pytest.raises(TypeError, match="ttl"):
            h.batch_pin(["k"], ttl=True)
        assert h.delete("k")  # nothing was pinned
    finally:
        h.close()
