# SPDX-License-Identifier: Apache-2.0
"""CxlMemoryAdapter: LMCache's MemoryAllocatorInterface over a MaruHandler.

LMCache's MaruBackend allocates KV chunks through this adapter, writes the
KV tensors straight into them (they live in the shared pool), and registers
them with MaruHandler.store(); a reader retrieves the key and asks the
adapter for the MemoryObj at (region, page).  No byte is copied.

Design (docs/python-api.md):
  * One TensorMemoryObj per page, created once per region over the page's
    zero-copy view (torch.frombuffer) and reused: pools are built from the
    handler's region-added callback (replayed for existing regions at
    construction, then fired on every expansion) and, for other instances'
    regions, on demand (ensure_region_pool).
  * MemoryObj addresses encode (region_id << 32) | page_index.
  * A chunk smaller than a page (the last chunk of a sequence) is a
    "partial view": a new TensorMemoryObj over the first bytes of the pooled
    page's tensor with the token dimension shortened; phy_size is the real
    byte count, so create_store_handle() registers the exact length.

Thread safety: the pools dict is guarded by a lock; page allocation and
freeing are the handler's (serialised there).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Optional

import torch
from lmcache.v1.memory_management import (
    MemoryAllocatorInterface,
    MemoryFormat,
    MemoryObj,
    MemoryObjMetadata,
    TensorMemoryObj,
)

from maru_handler.memory import AllocHandle

logger = logging.getLogger(__name__)

_elsize_cache: dict[torch.dtype, int] = {}


def _address(view: memoryview) -> int:
    """Address of the first byte of a (writable) memoryview."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def element_size(dtype: torch.dtype) -> int:
    """Bytes per element of @dtype (torch 1.13 has no dtype.itemsize)."""
    n = _elsize_cache.get(dtype)
    if n is None:
        n = torch.tensor([], dtype=dtype).element_size()
        _elsize_cache[dtype] = n
    return n


class CxlMemoryAdapter(MemoryAllocatorInterface):
    """MemoryObjs backed by a MaruHandler's pages in shared CXL memory."""

    def __init__(self, handler, shapes: list[torch.Size], dtypes: list[torch.dtype],
                 fmt: MemoryFormat, chunk_size: int):
        self._handler = handler
        self._shapes = list(shapes) if not isinstance(shapes, torch.Size) else [shapes]
        self._dtypes = list(dtypes) if not isinstance(dtypes, torch.dtype) else [dtypes]
        self._fmt = fmt
        self._chunk_size = int(chunk_size)
        self._lock = threading.Lock()
        self._pools: dict[int, list[TensorMemoryObj]] = {}  # region -> page objs
        self._bases: dict[int, int] = {}  # region -> address its pool was built on
        # replays every owned region now, then fires on expansion
        handler.set_on_region_added(self._on_region_added)

    # ------------------------------------------------------------------
    # addresses
    # ------------------------------------------------------------------
    @staticmethod
    def encode_address(region_id: int, page_index: int) -> int:
        return (region_id << 32) | page_index

    @staticmethod
    def decode_address(address: int) -> tuple[int, int]:
        return address >> 32, address & 0xFFFFFFFF

    # ------------------------------------------------------------------
    # pools
    # ------------------------------------------------------------------
    def _on_region_added(self, region_id: int, page_count: int) -> None:
        logger.debug("region %d added: %d pages", region_id, page_count)
        self._build_pool(region_id, page_count)

    def _build_pool(self, region_id: int, page_count: int) -> bool:
        with self._lock:
            if region_id in self._pools:
                return True
        chunk = self._chunk_size
        dtype = self._dtypes[0]
        multi = len(self._shapes) > 1
        objs: list[TensorMemoryObj] = []
        base = None
        for page in range(page_count):
            buf = self._handler.get_buffer_view(region_id, page * chunk, chunk)
            if buf is None:
                logger.error("region %d: no view of page %d, pool abandoned",
                             region_id, page)
                return False
            if base is None:
                base = _address(buf)
            meta = MemoryObjMetadata(
                shape=self._shapes[0],
                dtype=dtype,
                address=self.encode_address(region_id, page),
                phy_size=chunk,
                ref_count=1,
                fmt=self._fmt,
                shapes=self._shapes if multi else None,
                dtypes=self._dtypes if multi else None,
            )
            objs.append(TensorMemoryObj(torch.frombuffer(buf, dtype=dtype), meta,
                                        parent_allocator=None))
        with self._lock:
            if region_id not in self._pools:
                self._pools[region_id] = objs
                self._bases[region_id] = base
        return True

    def _drop_stale_pool(self, region_id: int) -> None:
        """Forget @region_id's pool if libmaru no longer maps the region where
        the pool was built: after a loss of ownership libmaru fences a region
        (its old mapping becomes private memory) and maps it anew, at another
        address, when a key stored in it is retrieved.  The pooled tensors of
        the old mapping would read the fenced copy."""
        with self._lock:
            base = self._bases.get(region_id)
        if base is None:
            return
        view = self._handler.get_buffer_view(region_id, 0, 1)
        if view is not None and _address(view) == base:
            return
        logger.warning("region %d was mapped anew: rebuilding its pool", region_id)
        with self._lock:
            if self._bases.get(region_id) == base:
                del self._pools[region_id]
                del self._bases[region_id]

    def ensure_region_pool(self, region_id: int) -> bool:
        """Build the pool of @region_id (e.g. another instance's) if needed."""
        with self._lock:
            if region_id in self._pools:
                return True
        pages = self._handler.get_region_page_count(region_id)
        if pages is None:
            return False
        return self._build_pool(region_id, pages)

    def _pooled(self, region_id: int, page_index: int) -> Optional[TensorMemoryObj]:
        with self._lock:
            pool = self._pools.get(region_id)
        if pool is None or not 0 <= page_index < len(pool):
            return None
        return pool[page_index]

    def _partial(self, source: TensorMemoryObj, actual_size: int,
                 single_token_size: int) -> TensorMemoryObj:
        """A view of the first @actual_size bytes of @source (not modified)."""
        meta = source.metadata
        raw = source.raw_data[: actual_size // element_size(meta.dtype)]
        shape = list(meta.shape)
        shape[meta.fmt.token_dim()] = actual_size // single_token_size
        pmeta = MemoryObjMetadata(
            shape=torch.Size(shape),
            dtype=meta.dtype,
            address=meta.address,
            phy_size=actual_size,
            ref_count=1,
            fmt=meta.fmt,
            shapes=meta.shapes,
            dtypes=meta.dtypes,
        )
        return TensorMemoryObj(raw, pmeta, parent_allocator=None)

    # ------------------------------------------------------------------
    # MemoryAllocatorInterface
    # ------------------------------------------------------------------
    def allocate(self, shapes, dtypes, fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> Optional[MemoryObj]:
        """A page for a chunk of @shapes/@dtypes, or None."""
        shapes, dtypes = self._adapt_shapes_and_dtypes(shapes, dtypes)
        size = sum(s.numel() * element_size(d) for s, d in zip(shapes, dtypes))
        if size == 0:
            return None
        try:
            handle = self._handler.alloc(size=size)
        except (ValueError, RuntimeError) as e:
            logger.debug("allocate %d bytes: %s", size, e)
            return None
        obj = self._pooled(handle.region_id, handle.page_index)
        if obj is None:
            logger.error("no pooled object for region %d page %d",
                         handle.region_id, handle.page_index)
            self._handler.free(handle)
            return None
        token_dim = self._fmt.token_dim()
        full = self._shapes[0]
        if size < self._chunk_size and token_dim < len(full):
            return self._partial(obj, size, self._chunk_size // full[token_dim])
        return obj

    def batched_allocate(self, shapes, dtypes, batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None
                         ) -> Optional[list[MemoryObj]]:
        got: list[MemoryObj] = []
        for _ in range(batch_size):
            obj = self.allocate(shapes, dtypes, fmt, allocator_type)
            if obj is None:
                self.batched_free(got)
                return None
            got.append(obj)
        return got

    def free(self, memory_obj: MemoryObj, allocator_type: Optional[str] = None) -> None:
        """Give the page back to the handler (a stored key stays registered)."""
        try:
            rid, page = self.decode_address(memory_obj.metadata.address)
            self._handler.free(AllocHandle(buf=memoryview(b""), _region_id=rid,
                                           _page_index=page, _size=0))
        except Exception as e:  # freeing is best effort, like upstream
            logger.debug("free: %s", e)

    def batched_free(self, memory_objs, allocator_type: Optional[str] = None,
                     update_stats: bool = True) -> None:
        for obj in memory_objs:
            self.free(obj, allocator_type)

    def close(self) -> None:
        self._handler.set_on_region_added(None)
        with self._lock:
            self._pools.clear()
            self._bases.clear()

    # ------------------------------------------------------------------
    # MaruBackend helpers
    # ------------------------------------------------------------------
    def create_store_handle(self, memory_obj: MemoryObj) -> AllocHandle:
        """The AllocHandle that MaruHandler.store() registers for @memory_obj."""
        rid, page = self.decode_address(memory_obj.metadata.address)
        return AllocHandle(buf=memoryview(b""), _region_id=rid, _page_index=page,
                           _size=memory_obj.metadata.phy_size)

    def get_by_location(self, region_id: int, page_index: int, actual_size: int,
                        single_token_size: int) -> Optional[MemoryObj]:
        """The MemoryObj stored at (@region_id, @page_index), @actual_size bytes."""
        self._drop_stale_pool(region_id)
        if not self.ensure_region_pool(region_id):
            return None
        obj = self._pooled(region_id, page_index)
        if obj is None:
            logger.error("region %d: page %d out of range", region_id, page_index)
            return None
        if actual_size == self._chunk_size:
            return obj
        return self._partial(obj, actual_size, single_token_size)


# backward-compatible name
CxlMemoryAllocator = CxlMemoryAdapter
