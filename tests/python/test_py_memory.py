# SPDX-License-Identifier: Apache-2.0
"""Standalone memory classes: PagedMemoryAllocator, OwnedRegionManager,
MappedRegion, AllocHandle/MemoryInfo (docs/python-api.md; no daemon)."""
import dataclasses

import pytest

from maru_handler.memory import (
    AllocHandle,
    MappedRegion,
    MemoryInfo,
    OwnedRegionManager,
    PagedMemoryAllocator,
)
from maru_shm import MaruHandle


def test_allocator_fifo_and_errors():
    a = PagedMemoryAllocator(region_id=5, pool_size=4 * 100 + 50, chunk_size=100)
    assert (a.page_count, a.chunk_size, a.num_free_pages, a.num_allocated) == (4, 100, 4, 0)
    assert [a.allocate() for _ in range(4)] == [0, 1, 2, 3]
    assert a.allocate() is None
    a.free(2)
    a.free(0)
    assert a.num_free_pages == 2 and a.num_allocated == 2
    assert a.allocate() == 2 and a.allocate() == 0  # freed pages go to the back
    with pytest.raises(ValueError):
        a.free(4)
    with pytest.raises(ValueError):
        a.free(-1)
    a.free(1)
    with pytest.raises(ValueError):
        a.free(1)  # double free
    st = a.get_stats()
    assert st == {"pool_size": 450, "chunk_size": 100, "page_count": 4,
                  "free_pages": 1, "allocated_pages": 3, "utilization": 0.75}
    with pytest.raises(ValueError):
        PagedMemoryAllocator(1, 99, 100)


def test_owned_region_manager():
    m = OwnedRegionManager(chunk_size=10)
    assert m.allocate() is None and m.get_first_region_id() is None
    m.add_region(MaruHandle(7, 0, 20, 1))
    m.add_region(MaruHandle(9, 0, 30, 1))
    assert m.get_region_ids() == [7, 9] and m.get_chunk_size() == 10
    assert m.is_owned(9) and not m.is_owned(8)
    assert [m.allocate() for _ in range(5)] == [(7, 0), (7, 1), (9, 0), (9, 1), (9, 2)]
    assert m.allocate() is None and m.is_full()
    m.free(7, 1)
    assert m.allocate() == (7, 1)   # found in another region; becomes active
    m.free(9, 0)
    m.free(7, 0)
    assert m.allocate() == (7, 0)   # the active region is tried first
    with pytest.raises(KeyError):
        m.free(8, 0)
    st = m.get_stats()
    assert st["num_regions"] == 2 and st["total_page_count"] == 5
    assert st["total_free_pages"] == 1 and st["total_allocated_pages"] == 4
    assert st["total_pool_size"] == 50
    assert [r["region_id"] for r in st["regions"]] == [7, 9]
    assert m.get_first_allocator().region_id == 7
    assert m.get_owned_region(9).allocator.page_count == 3
    assert m.close() == [7, 9] and m.get_region_ids() == []


def test_alloc_handle_contract():
    names = [f.name for f in dataclasses.fields(AllocHandle)]
    assert names == ["buf", "_region_id", "_page_index", "_size"]
    h = AllocHandle(buf=memoryview(b""), _region_id=3, _page_index=4, _size=5)
    assert (h.region_id, h.page_index, h.size) == (3, 4, 5)
    assert h != AllocHandle(buf=memoryview(b""), _region_id=3, _page_index=4, _size=5)
    with pytest.raises(AttributeError):
        h.region_id = 1
    mi = MemoryInfo(view=memoryview(b"abc"))
    assert (mi.region_id, mi.page_index, len(mi.view)) == (0, 0, 3)


def test_mapped_region():
    buf = bytearray(b"0123456789")
    r = MappedRegion(region_id=1, handle=MaruHandle(1, 0, 10, 0), size=10, _mmap_obj=buf)
    assert r.is_mapped
    v = r.get_buffer_view(2, 3)
    assert bytes(v) == b"234" and not v.readonly
    v[0:1] = b"X"
    assert buf[2:3] == b"X"
    assert r.get_buffer_view(8, 3) is None and r.get_buffer_view(-1, 1) is None
    assert r.read_bytes(0, 3) == b"01X"
    del v
    r.release()
    assert not r.is_mapped and r.get_buffer_view(0, 1) is None
    with pytest.raises(RuntimeError):
        r.read_bytes(0, 1)
