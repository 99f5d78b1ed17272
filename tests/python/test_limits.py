# SPDX-License-Identifier: Apache-2.0
"""Bounded everything (docs/operations.md, "Limits"): quotas (bytes per
resource-manager client id, bytes per maru-server instance) and connections
per peer address on both daemons.  Each limit is tested at the limit."""
import socket
import time

import pytest

import rm_wire
from mds_wire import HANDSHAKE, REQUEST_ALLOC, RETURN_ALLOC, ReqClient, \
    handle_of

MiB = 1 << 20
EDQUOT = 122


def local_address():
    """A non-loopback address of this host (the one a route would use),
    or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))      # no packet is sent
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


def test_client_quota_at_the_resource_manager(start_rm):
    r = start_rm(extra=["--client-quota", "4M"])
    with rm_wire.RmConn(r.address) as c:
        a = c.alloc(2 * MiB)
        b = c.alloc(2 * MiB)
        assert a.status == 0 and b.status == 0
        assert c.alloc(MiB).status == -EDQUOT       # over: refused
        assert c.alloc(8 * MiB).status == -EDQUOT
        assert c.free(a.handle) == 0
        assert c.alloc(2 * MiB).status == 0         # room again
    with rm_wire.RmConn(r.address, client_id="other:1") as o:
        assert o.alloc(4 * MiB).status == 0         # per client id
    assert "client quota:  4.0M" in r.log()


def test_instance_quota_at_maru_server(rm, start_mds):
    m = start_mds(rm.address, extra=["--instance-quota", "4M"])
    c = ReqClient(m.url)
    try:
        hs = [handle_of(c.call(REQUEST_ALLOC, {"instance_id": "a",
                                               "size": 2 * MiB})[1])
              for _ in range(2)]
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "a", "size": MiB})
        assert r["success"] is False and r["cause"] == "quota"
        assert r["error"] == "Allocation failed: quota exceeded: the " \
            "instance id holds 4.0M of its --instance-quota of 4.0M"
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "b", "size": 4 * MiB})
        assert r["success"] is True                  # per instance
        _, r = c.call(RETURN_ALLOC, {"instance_id": "a",
                                     "region_id": hs[0]["region_id"]})
        assert r == {"success": True}
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "a", "size": 2 * MiB})
        assert r["success"] is True
    finally:
        c.close()


def open_conns(ip, port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection((ip, port), timeout=5,
                                     source_address=(ip, 0))
        socks.append(s)
    return socks


def closed(s, timeout=5.0):
    s.settimeout(timeout)
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


@pytest.mark.skipif(local_address() is None, reason="no non-loopback address")
def test_connections_per_address_at_maru_server(rm, start_mds):
    ip = local_address()
    m = start_mds(rm.address, wait=False)
    m.stop()
    m.argv[m.argv.index("--host") + 1] = "0.0.0.0"
    m.argv += ["--insecure", "--max-connections-per-address", "3"]
    m.start()
    socks = open_conns(ip, m.port, 5)
    try:
        time.sleep(0.5)
        assert [closed(s, 0.5) for s in socks] == [False] * 3 + [True] * 2
        # loopback is exempt, and the remote host is served again once
        # one of its connections goes
        c = ReqClient(m.url)
        assert c.call(HANDSHAKE, {})[1]["success"]
        c.close()
        socks[0].close()
        time.sleep(0.3)
        more = open_conns(ip, m.port, 1)
        assert not closed(more[0], 0.5)
        more[0].close()
        assert "--max-connections-per-address" in m.log()
    finally:
        for s in socks:
            s.close()


@pytest.mark.skipif(local_address() is None, reason="no non-loopback address")
def test_connections_per_address_at_the_resource_manager(start_rm):
    ip = local_address()
    r = start_rm(wait=False, extra=["--max-clients-per-address", "2"])
    r.stop()
    r.argv[r.argv.index("--host") + 1] = "0.0.0.0"
    r.start()
    socks = open_conns(ip, r.port, 4)
    try:
        time.sleep(0.5)
        assert [closed(s, 0.5) for s in socks] == [False] * 2 + [True] * 2
        with rm_wire.RmConn(r.address) as c:          # loopback: exempt
            assert c.stats()
    finally:
        for s in socks:
            s.close()
