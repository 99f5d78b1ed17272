# SPDX-License-Identifier: Apache-2.0
"""Data types of the handler's memory layer (docs/python-api.md)."""

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maru_shm import MaruHandle

    from .allocator import PagedMemoryAllocator

logger = logging.getLogger(__name__)


@dataclass
class MappedRegion:
    """A region mapped into this process (owned or another instance's).

    _mmap_obj is whatever holds the mapping alive: an mmap.mmap, or the
    extension's mapping object; anything exporting the buffer protocol.
    """

    region_id: int
    handle: "MaruHandle"
    size: int
    _mmap_obj: Any = field(default=None, repr=False)
    _buffer_view: memoryview | None = field(default=None, repr=False, init=False)

    def __post_init__(self) -> None:
        if self._mmap_obj is not None:
            self._buffer_view = memoryview(self._mmap_obj)

    @property
    def is_mapped(self) -> bool:
        return self._buffer_view is not None

    def get_buffer_view(self, offset: int, size: int) -> memoryview | None:
        """Zero-copy slice [offset, offset+size), or None if out of bounds."""
        bv = self._buffer_view
        if bv is None or offset < 0 or size < 0 or offset + size > len(bv):
            return None
        return bv[offset:offset + size]

    def read_bytes(self, offset: int, size: int) -> bytes:
        """Copy of [offset, offset+size); RuntimeError if not mapped."""
        if self._buffer_view is None:
            raise RuntimeError(f"Region {self.region_id} is not mapped")
        return bytes(self._buffer_view[offset:offset + size])

    def release(self) -> None:
        """Drop the view and the mapping reference (before unmapping)."""
        if self._buffer_view is not None:
            try:
                self._buffer_view.release()
            except ValueError:
                pass
            self._buffer_view = None
        self._mmap_obj = None


@dataclass
class OwnedRegion:
    """A region this handler allocated, with its page allocator."""

    region_id: int
    allocator: "PagedMemoryAllocator"


@dataclass(eq=False)
class AllocHandle:
    """One page obtained with MaruHandler.alloc(): write into buf, then store().

    The constructor field names (buf, _region_id, _page_index, _size) are
    part of the contract: LMCache's adapter builds handles with them.
    """

    buf: memoryview
    _region_id: int
    _page_index: int
    _size: int

    @property
    def region_id(self) -> int:
        return self._region_id

    @property
    def page_index(self) -> int:
        return self._page_index

    @property
    def size(self) -> int:
        return self._size


@dataclass
class MemoryInfo:
    """A retrieved value: a zero-copy view of exactly the stored bytes."""

    view: memoryview
    region_id: int = 0
    page_index: int = 0
    # additions (eviction, docs/python-api.md): where the entry lies and
    # its registration number, for MaruHandler.recheck()
    kv_offset: int = 0
    ticket: int = 0

    def is_valid(self) -> bool:
        """After reading `view`: were those the stored bytes all along?
        One lookup (MaruHandler.recheck()); False if the key was evicted,
        deleted or stored again meanwhile, or the mapping was fenced, and
        for a MemoryInfo that no retrieve() made."""
        h = getattr(self, "_handler", None)
        return h is not None and h.recheck(self._key, self)


__all__ = ["MappedRegion", "OwnedRegion", "AllocHandle", "MemoryInfo"]
