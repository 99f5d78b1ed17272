# SPDX-License-Identifier: Apache-2.0
"""CxlMemoryAdapter end to end, the way LMCache's MaruBackend drives it:
real daemons, real torch, two handlers in two processes, and
tests/python/lmcache_stub as a labelled stand-in for LMCache's types."""
import multiprocessing
import os
import sys

import pytest

torch = pytest.importorskip("torch")
STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lmcache_stub")
sys.path.insert(0, STUB)

import py_workers  # noqa: E402
from py_workers import recv  # noqa: E402
from conftest import wait_until  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

from maru import MaruConfig, MaruHandler  # noqa: E402
from maru_lmcache import CxlMemoryAdapter  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")
LAYERS, TOKENS, HIDDEN = 2, 32, 64


def kv(tokens=TOKENS):
    return torch.Size([2, LAYERS, tokens, HIDDEN])


def esize(dtype):
    return torch.tensor([], dtype=dtype).element_size()


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("MARU_EAGER_MAP", raising=False)


def backend_handler(url, chunk, pool_pages=4, timeout_ms=5000):
    """What LMCache's MaruBackend._create_handler does."""
    cfg = MaruConfig(server_url=url, instance_id=None, pool_size=pool_pages * chunk,
                     chunk_size_bytes=chunk, auto_connect=False, timeout_ms=timeout_ms,
                     use_async_rpc=True, max_inflight=64, eager_map=True)
    h = MaruHandler(cfg)
    if not h.connect():
        raise RuntimeError(f"Failed to connect MaruHandler to {url}")
    return h


def fill(t, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 250, t.shape, generator=g, dtype=torch.int32)
    t.copy_(src.to(t.dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32,
                                   torch.uint8])
def test_two_processes_share_kv_chunks(mds, dtype):
    chunk = kv().numel() * esize(dtype)
    h = backend_handler(mds.url, chunk)
    try:
        ad = CxlMemoryAdapter(handler=h, shapes=[kv()], dtypes=[dtype],
                              fmt=MemoryFormat.KV_2LTD, chunk_size=h.get_chunk_size())
        objs = ad.batched_allocate(kv(), dtype, 3, MemoryFormat.KV_2LTD)
        assert objs is not None
        for i, o in enumerate(objs):
            fill(o.tensor, i)
        part = ad.allocate(kv(5), dtype, MemoryFormat.KV_2LTD)   # partial last chunk
        fill(part.tensor, 99)
        assert part.metadata.phy_size == 5 * chunk // TOKENS
        keys = [f"model@{i}" for i in range(3)]
        assert h.batch_store(keys[:2], [ad.create_store_handle(o) for o in objs[:2]]) \
            == [True, True]
        assert h.store(keys[2], ad.create_store_handle(objs[2]))    # positional
        assert h.store("model@partial", ad.create_store_handle(part))
        info = h.retrieve("model@partial")
        assert len(info.view) == part.metadata.phy_size              # exact length

        parent, child = SPAWN.Pipe()
        want = keys + ["model@partial", "model@missing"]
        p = SPAWN.Process(target=py_workers.lmcache_reader,
                          args=(mds.url, child, STUB, list(kv()), str(dtype).split(".")[1],
                                want, chunk))
        p.start()
        try:
            msg = recv(parent)
            assert msg[0] == "got", msg
            got = msg[1]
            for i, o in enumerate(objs):
                shape, raw, zero_copy = got[i]
                assert shape == tuple(kv()) and zero_copy
                assert raw == o.tensor.contiguous().view(torch.uint8).numpy().tobytes()
            shape, raw, zero_copy = got[3]
            assert shape == tuple(kv(5)) and zero_copy
            assert raw == part.tensor.contiguous().view(torch.uint8).numpy().tobytes()
            assert got[4] is None                                   # miss
            # same memory: a later write through this process's tensor is seen
            # through the other process's tensor, with no new retrieve
            objs[1].tensor.fill_(7)
            parent.send(("reread", 1))
            assert recv(parent) == objs[1].tensor.contiguous().view(torch.uint8) \
                .numpy().tobytes()
            parent.send(("close",))
            assert recv(parent) == "closed"
        finally:
            p.join(30)
            if p.is_alive():
                p.kill()
        assert p.exitcode == 0
        ad.close()
    finally:
        h.close()


def test_growth_callbacks_and_frees(mds):
    dtype = torch.float16
    chunk = kv().numel() * esize(dtype)
    # pool of one 2 MiB region: 2 MiB // chunk pages
    h = backend_handler(mds.url, chunk, pool_pages=(2 << 20) // chunk)
    try:
        ad = CxlMemoryAdapter(h, [kv()], [dtype], MemoryFormat.KV_2LTD, h.get_chunk_size())
        per_region = h.allocator.page_count
        objs = ad.batched_allocate(kv(), dtype, per_region * 2 + 1)
        assert objs is not None
        regions = h.get_owned_region_ids()
        assert len(regions) == 3
        assert sorted(ad._pools) == sorted(regions)         # built by the callbacks
        assert {ad.decode_address(o.metadata.address)[0] for o in objs} == set(regions)
        assert h.owned_region_manager.get_stats()["total_allocated_pages"] == len(objs)
        ad.batched_free(objs)
        assert h.owned_region_manager.get_stats()["total_allocated_pages"] == 0
        again = [ad.allocate(kv(), dtype) for _ in range(len(objs))]
        assert all(o is not None for o in again)             # pages came back:
        assert len(h.get_owned_region_ids()) == 3            # no new region needed
        for o in again:                                      # pooled objects reused
            rid, page = ad.decode_address(o.metadata.address)
            assert o is ad.get_by_location(rid, page, chunk, chunk // TOKENS)
        ad.batched_free(again)
        ad.close()
    finally:
        h.close()


def test_adapter_when_pool_exhausted(mds):
    dtype = torch.uint8
    chunk = kv().numel()
    cfg = MaruConfig(server_url=mds.url, pool_size=2 << 20, chunk_size_bytes=chunk,
                     auto_connect=False, auto_expand=False)
    h = MaruHandler(cfg)
    assert h.connect()
    try:
        ad = CxlMemoryAdapter(h, [kv()], [dtype], MemoryFormat.KV_2LTD, chunk)
        n = h.allocator.page_count
        assert ad.batched_allocate(kv(), dtype, n + 1) is None   # all freed again
        assert h.allocator.num_allocated == 0
        objs = [ad.allocate(kv(), dtype) for _ in range(n)]
        assert all(objs) and ad.allocate(kv(), dtype) is None
        assert ad.allocate(kv(0), dtype) is None                  # size 0
        ad.close()
    finally:
        h.close()


def test_backend_connect_fails_clearly_when_daemons_down(rm, start_mds):
    """LMCache's MaruBackend raises when connect() returns False: no
    maru-server.  With maru-server up and the resource manager gone it
    connects without a region (it can read); an allocation says why it
    cannot have one, and works once the resource manager is back."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]            # nothing listens here
    with pytest.raises(RuntimeError, match="^Failed to connect MaruHandler to "):
        backend_handler(f"tcp://127.0.0.1:{dead}", 1 << 20, timeout_ms=500)
    mds = start_mds(rm.address)
    rm.stop()                                # metadata server up, RM gone
    h = backend_handler(mds.url, 1 << 20, timeout_ms=2000)
    try:
        assert h.get_owned_region_ids() == []
        with pytest.raises(ValueError, match="is not reachable from "
                                             "maru-server"):
            h.alloc(1 << 20)
        rm.start()
        assert wait_until(lambda: _alloc_ok(h), 20)
    finally:
        h.close()


def _alloc_ok(h):
    try:
        return h.alloc(1 << 20) is not None
    except ValueError:
        return False
