# SPDX-License-Identifier: Apache-2.0
"""Every refusal names its cause, end to end (docs/operations.md "When a
store or an alloc is refused").

Each cause a client can meet, from the Python package (exception text,
or a store() that returns False and says why at WARNING, once per
cause), and -- where it starts in maru-server -- the REQUEST_ALLOC reply's
"error" and "cause".  Also: a client that only reads connects when no
region can be had now.
"""
import logging
import os

import pytest

from conftest import wait_until
from mds_wire import REQUEST_ALLOC, ReqClient

MiB = 1 << 20
KiB = 1 << 10


def handler(url, **kw):
    from maru import MaruConfig, MaruHandler

    cfg = dict(server_url=url, pool_size=2 * MiB, chunk_size_bytes=64 * KiB,
               auto_connect=False, timeout_ms=5000)
    cfg.update(kw)
    return MaruHandler(MaruConfig(**cfg))


def fill(h):
    """Take every page of @h's regions (no expansion)."""
    held = []
    n = 2 * MiB // (64 * KiB)
    for _ in range(n):
        held.append(h.alloc(16))
    return held


@pytest.fixture
def warnings_of():
    """The WARNING lines of the package's logger (it does not propagate
    to the root logger, so not caplog's)."""
    got = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno == logging.WARNING:
                got.append(record.getMessage())

    lg = logging.getLogger("maru_handler.handler")
    h = Keep(logging.WARNING)
    lg.addHandler(h)
    yield lambda: list(got)
    lg.removeHandler(h)


def test_resource_manager_not_reachable(rm, mds):
    """The resource manager stops under a connected client: its next
    region cannot be had, and the exception says why (not "No space left
    on device" with the pool nearly empty)."""
    h = handler(mds.url)
    assert h.connect()
    try:
        fill(h)
        rm.stop()
        with pytest.raises(ValueError) as e:
            h.alloc(16)
        msg = str(e.value)
        assert msg.startswith("Cannot allocate page: pool exhausted after "
                              "expansion attempt: "), msg
        assert f"the resource manager at {rm.address} is not reachable " \
               "from maru-server" in msg, msg
        assert "No space left" not in msg
        # the wire: "error" for people, "cause" for programs
        c = ReqClient(mds.url)
        try:
            _, r = c.call(REQUEST_ALLOC, {"instance_id": "w", "size": MiB})
            assert r["success"] is False and r["cause"] == "rm_unreachable"
            assert r["error"].startswith("Allocation failed: the resource "
                                         "manager at "), r
        finally:
            c.close()
    finally:
        h.close()


def test_resource_manager_refuses_the_server(start_rm, start_mds, tmp_path):
    """maru-server holds a key the resource manager does not know: the
    client learns which key file to give maru-server."""
    rm = start_rm()
    wrong = tmp_path / "wrong.key"
    wrong.write_text("ab" * 32 + "\n")
    os.chmod(wrong, 0o600)
    m = start_mds(rm.address, extra=["--rm-key-file", str(wrong)],
                  wait=False)
    # it starts (and says so in its log), and refuses every allocation
    assert wait_until(lambda: m.running() and _listens(m.port), 15), m.log()
    h = handler(m.url)
    assert h.connect()               # no region: it can still read
    try:
        with pytest.raises(ValueError) as e:
            h.alloc(16)
        msg = str(e.value)
        assert "maru-server's key" in msg and "--rm-key-file" in msg, msg
    finally:
        h.close()


def _listens(port):
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_pool_cannot_fit_the_region(rm, mds):
    """A pool_size larger than the pool: the client connects without a
    region (it may read), and alloc() says what is free and what to ask."""
    h = handler(mds.url, pool_size=1 << 40)
    assert h.connect()
    try:
        assert h.get_owned_region_ids() == []
        with pytest.raises(ValueError) as e:
            h.alloc(16)
        msg = str(e.value)
        assert "the pool cannot fit a region of 1.0T" in msg, msg
        assert "pool_size" in msg and "free of" in msg, msg
    finally:
        h.close()


def test_pool_full_of_pinned_keys(start_rm, start_mds):
    rm = start_rm(emulate_size="8M")
    m = start_mds(rm.address)
    a = handler(m.url, pool_size=2 * MiB)
    b = handler(m.url, pool_size=2 * MiB)
    assert a.connect()
    try:
        # a takes the pool, region after region, and pins every key
        i = 0
        while True:
            try:
                p = a.alloc(16)
            except ValueError:
                break
            p.buf[:4] = b"pinx"
            assert a.store(f"p{i}", p) and a.pin(f"p{i}")
            i += 1
        assert i > 0
        assert b.connect()          # no region for it: it can still read
        try:
            assert bytes(b.retrieve("p0").view[:4]) == b"pinx"
            with pytest.raises(ValueError) as e:
                b.alloc(16)
            assert "it is full of pinned entries" in str(e.value), e.value
        finally:
            b.close()
    finally:
        a.close()


def test_key_over_the_limit(start_rm, start_mds, warnings_of):
    rm = start_rm()
    m = start_mds(rm.address, extra=["--max-key-bytes", "64"])
    h = handler(m.url)
    assert h.connect()
    try:
        for n in (100, 101, 102):
            p = h.alloc(16)
            assert h.store("k" * n, p) is False
        said = [w for w in warnings_of() if "max-key-bytes" in w]
        # the limit and the option, once for the cause (not per call)
        assert len(said) == 1, warnings_of()
        assert "key of 100 bytes is longer than the server's " \
               "--max-key-bytes (64)" in said[0]
        assert h.store("k" * 64, h.alloc(16)) is True
        # batch_store says it too (once: the same cause)
        assert h.batch_store(["x" * 90, "y"], [h.alloc(16), h.alloc(16)]) \
            == [False, True]
        assert len([w for w in warnings_of() if "max-key-bytes" in w]) == 1
    finally:
        h.close()


def test_value_over_the_chunk_size(mds):
    h = handler(mds.url)
    assert h.connect()
    try:
        with pytest.raises(ValueError) as e:
            h.alloc(64 * KiB + 1)
        assert "exceeds chunk_size 65536 (chunk_size_bytes)" in str(e.value)
    finally:
        h.close()


def test_a_reader_connects_to_a_full_pool(start_rm, start_mds):
    """--eviction none, the pool full: a reader still connects (its
    REQUEST_ALLOC fails; reading needs no region) and reads every key."""
    rm = start_rm(emulate_size="8M")
    m = start_mds(rm.address, extra=["--eviction", "none"])
    w = handler(m.url, pool_size=2 * MiB)
    assert w.connect()
    try:
        i = 0
        while True:
            try:
                p = w.alloc(16)
            except ValueError:
                break
            p.buf[:6] = f"v{i:05d}".encode()
            assert w.store(f"k{i}", p)
            i += 1
        r = handler(m.url, pool_size=2 * MiB)
        assert r.connect()
        try:
            assert r.get_owned_region_ids() == []
            for j in range(0, i, max(1, i // 20)):
                assert bytes(r.retrieve(f"k{j}").view[:6]) == \
                    f"v{j:05d}".encode()
            with pytest.raises(ValueError) as e:
                r.alloc(16)
            assert "could not be had" in str(e.value)
        finally:
            r.close()
    finally:
        w.close()
