# SPDX-License-Identifier: Apache-2.0
"""The pure-Python RPC clients (used by tools) against the real maru-server."""
import pytest

from maru_handler.rpc_async_client import RpcAsyncClient
from maru_handler.rpc_client import RpcClient

MiB = 1024 * 1024


@pytest.mark.parametrize("cls", [RpcClient, RpcAsyncClient])
def test_clients_against_maru_server(rm, mds, cls):
    with cls(mds.url, timeout_ms=3000) as c:
        assert c.heartbeat() is True
        hs = c.handshake()
        assert hs.get("success") is True and hs.get("rm_address") == rm.address
        r = c.request_alloc("tool-inst", 2 * MiB)
        assert r.success and r.handle.length == 2 * MiB
        rid = r.handle.region_id
        assert r.handle.auth_token > 0
        others = c.list_allocations(exclude_instance_id="someone-else").allocations
        assert any(h.region_id == rid and h == r.handle for h in others)
        assert all(h.region_id != rid for h in
                   c.list_allocations(exclude_instance_id="tool-inst").allocations)
        assert c.register_kv("rk", rid, 0, 100) is True
        assert c.register_kv("rk", rid, 4096, 1) is False          # first writer wins
        assert c.register_kv(5, rid, MiB, 10) is True              # int key
        lk = c.lookup_kv("rk")
        assert lk.found and lk.handle == r.handle and (lk.kv_offset, lk.kv_length) == (0, 100)
        assert c.lookup_kv("5").found is False and c.lookup_kv(5).kv_offset == MiB
        assert c.exists_kv("rk") and not c.exists_kv("nope")
        assert c.pin_kv("rk") and c.delete_kv("rk") is False and c.unpin("rk")
        br = c.batch_register_kv([("b1", rid, 0, 1), ("b1", rid, 0, 2), ("b2", rid, 0, 3)])
        assert br.success and br.results == [True, False, True]
        assert [e.found for e in c.batch_lookup_kv(["b1", "x", "b2"]).entries] == \
            [True, False, True]
        assert c.batch_exists_kv(["b1", "x"]).results == [True, False]
        assert c.batch_pin_kv(["b1", "x", "b2"]).results == [True, False, False]
        assert c.batch_unpin(["b1", "b2"]).results == [True, False]
        st = c.get_stats()
        assert st.kv_manager.total_entries == 4 and st.allocation_manager.num_allocations >= 1
        c.report_stats([{"client_id": "tool", "op_type": "retrieve", "result": "hit",
                         "size": 10, "latency_us": 12.5}])
        assert "tool" in c.get_stats().stats_manager["clients"]
        u = c.get_usage()
        mine = [i for i in u.instances if i.instance_id == "tool-inst"]
        assert mine and mine[0].regions == 1 and mine[0].allocated == 2 * MiB
        assert u.pool_total > 0 and u.pool_free < u.pool_total
        for k in ("rk", 5, "b1", "b2"):
            assert c.delete_kv(k) is True
        assert c.return_alloc("tool-inst", rid) is True
        assert c.return_alloc("tool-inst", rid) is False


def test_async_futures_against_maru_server(mds):
    with RpcAsyncClient(mds.url, timeout_ms=3000, max_inflight=8) as c:
        futs = [c.exists_kv_async(f"k{i}") for i in range(32)]
        assert [f.result(10) for f in futs] == [False] * 32
        assert c.heartbeat_async().result(10) is True
