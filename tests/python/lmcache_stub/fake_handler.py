# SPDX-License-Identifier: Apache-2.0
"""FakeHandler: the slice of MaruHandler that CxlMemoryAdapter uses, over
bytearrays instead of shared memory.  Test scaffolding only; the end-to-end
tests use the real MaruHandler against the real daemons."""
from maru_handler.memory import AllocHandle, PagedMemoryAllocator


class FakeHandler:
    def __init__(self, chunk_size, pages_per_region, regions=1, auto_expand=True):
        self.chunk = chunk_size
        self.pages = pages_per_region
        self.auto_expand = auto_expand
        self.mem = {}        # region_id -> bytearray
        self.alloc_ = {}     # region_id -> PagedMemoryAllocator
        self.cb = None
        self.next_rid = 1
        for _ in range(regions):
            self._add_region()

    def _add_region(self):
        rid = self.next_rid
        self.next_rid += 1
        self.mem[rid] = bytearray(self.chunk * self.pages)
        self.alloc_[rid] = PagedMemoryAllocator(rid, self.chunk * self.pages, self.chunk)
        return rid

    def add_shared_region(self):
        """A region owned by somebody else (not in alloc_)."""
        rid = self.next_rid
        self.next_rid += 1
        self.mem[rid] = bytearray(self.chunk * self.pages)
        return rid

    def get_chunk_size(self):
        return self.chunk

    def set_on_region_added(self, cb):
        self.cb = cb
        if cb is not None:
            for rid in self.alloc_:
                cb(rid, self.pages)

    def get_buffer_view(self, rid, off, size):
        m = self.mem.get(rid)
        if m is None or off < 0 or off + size > len(m):
            return None
        return memoryview(m)[off:off + size]

    def get_region_page_count(self, rid):
        return self.pages if rid in self.mem else None

    def alloc(self, size):
        if size > self.chunk:
            raise ValueError(f"Requested size {size} exceeds chunk_size {self.chunk}")
        for rid, a in self.alloc_.items():
            p = a.allocate()
            if p is not None:
                return AllocHandle(self.get_buffer_view(rid, p * self.chunk, size),
                                   rid, p, size)
        if not self.auto_expand:
            raise ValueError("Cannot allocate page: pool exhausted and auto_expand is disabled")
        rid = self._add_region()
        if self.cb:
            self.cb(rid, self.pages)
        return self.alloc(size)

    def free(self, handle):
        self.alloc_[handle._region_id].free(handle._page_index)
