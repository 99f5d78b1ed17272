# SPDX-License-Identifier: Apache-2.0
"""CxlMemoryAdapter against a pure-Python fake handler (fast; no daemons).

Uses real torch and tests/python/lmcache_stub, a labelled stand-in for the
few LMCache types the adapter touches.  The end-to-end behaviour against the
real daemons is in test_py_lmcache.py.
"""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lmcache_stub"))

from fake_handler import FakeHandler  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat, TensorMemoryObj  # noqa: E402

import maru_lmcache  # noqa: E402

TOKENS, LAYERS, HIDDEN = 16, 2, 8


def kv_shape(tokens=TOKENS):
    return torch.Size([2, LAYERS, tokens, HIDDEN])


def chunk_bytes(dtype):
    return kv_shape().numel() * torch.tensor([], dtype=dtype).element_size()


def make(dtype=torch.float16, pages=4, regions=1, auto_expand=True):
    h = FakeHandler(chunk_bytes(dtype), pages, regions, auto_expand)
    a = maru_lmcache.CxlMemoryAdapter(h, [kv_shape()], [dtype], MemoryFormat.KV_2LTD,
                                      h.get_chunk_size())
    return h, a


def test_alias_and_address_encoding():
    A = maru_lmcache.CxlMemoryAdapter
    assert maru_lmcache.CxlMemoryAllocator is A
    from maru_lmcache.adapter import CxlMemoryAdapter
    assert CxlMemoryAdapter is A
    assert A.encode_address(3, 7) == (3 << 32) | 7
    assert A.decode_address(A.encode_address(2**20, 2**32 - 1)) == (2**20, 2**32 - 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32,
                                   torch.uint8])
def test_allocate_full_chunk_is_zero_copy(dtype):
    h, a = make(dtype)
    obj = a.allocate(kv_shape(), dtype, MemoryFormat.KV_2LTD)
    assert isinstance(obj, TensorMemoryObj)
    rid, page = a.decode_address(obj.metadata.address)
    assert obj.metadata.phy_size == h.chunk and obj.tensor.shape == kv_shape()
    obj.tensor.fill_(3)
    raw = bytes(h.mem[rid][page * h.chunk:(page + 1) * h.chunk])
    assert raw == bytes(torch.full((kv_shape().numel(),), 3, dtype=dtype)
                        .view(torch.uint8).numpy().tobytes())
    sh = a.create_store_handle(obj)
    assert (sh.region_id, sh.page_index, sh.size, len(sh.buf)) == (rid, page, h.chunk, 0)
    # pooled objects persist: the same page gives the same object back
    a.free(obj)
    again = a.get_by_location(rid, page, h.chunk, h.chunk // TOKENS)
    assert again is obj


def test_partial_chunk_and_get_by_location():
    h, a = make(torch.float32)
    part = a.allocate(kv_shape(5), torch.float32, MemoryFormat.KV_2LTD)
    tok = h.chunk // TOKENS
    assert part.metadata.phy_size == 5 * tok
    assert part.tensor.shape == kv_shape(5) and part.metadata.shape[2] == 5
    part.tensor.copy_(torch.arange(kv_shape(5).numel(), dtype=torch.float32)
                      .view(kv_shape(5)))
    rid, page = a.decode_address(part.metadata.address)
    assert a.create_store_handle(part).size == 5 * tok
    got = a.get_by_location(rid, page, 5 * tok, tok)
    assert got.tensor.shape == kv_shape(5) and torch.equal(got.tensor, part.tensor)
    assert got.tensor.data_ptr() == part.tensor.data_ptr()
    full = a.get_by_location(rid, page, h.chunk, tok)
    assert full.tensor.shape == kv_shape()  # the pooled object is untouched


def test_growth_through_callback_and_batches():
    h, a = make(torch.uint8, pages=2)
    objs = a.batched_allocate(kv_shape(), torch.uint8, 5, MemoryFormat.KV_2LTD)
    assert objs is not None and len(objs) == 5
    regions = {a.decode_address(o.metadata.address)[0] for o in objs}
    assert regions == {1, 2, 3}      # two expansions, pools built by callback
    a.batched_free(objs)
    assert all(al.num_allocated == 0 for al in h.alloc_.values())
    a.free(objs[0])                  # double free is swallowed


def test_batched_allocate_failure_frees_everything():
    h, a = make(torch.uint8, pages=3, auto_expand=False)
    assert a.batched_allocate(kv_shape(), torch.uint8, 4, MemoryFormat.KV_2LTD) is None
    assert h.alloc_[1].num_allocated == 0
    assert a.allocate(torch.Size([0]), torch.uint8) is None  # size 0


def test_shared_region_on_demand_and_misses():
    h, a = make(torch.float16)
    other = h.add_shared_region()
    assert other not in a._pools
    obj = a.get_by_location(other, 1, h.chunk, h.chunk // TOKENS)
    assert obj is not None and a.decode_address(obj.metadata.address) == (other, 1)
    assert a.get_by_location(other, 99, h.chunk, 1) is None
    assert a.get_by_location(12345, 0, h.chunk, 1) is None
    a.close()
    assert h.cb is None and a._pools == {}
