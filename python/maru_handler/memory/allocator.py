# SPDX-License-Identifier: Apache-2.0
"""PagedMemoryAllocator: fixed-size pages of one region, FIFO free list.

page_count = pool_size // chunk_size.  allocate() pops the lowest-numbered
free page first (the free list starts 0..page_count-1 and freed pages go to
the back), so a freed page is reused only after the untouched ones.
"""

from collections import deque


class PagedMemoryAllocator:
    """Pages of @chunk_size bytes in region @region_id of @pool_size bytes."""

    def __init__(self, region_id: int, pool_size: int, chunk_size: int):
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        page_count = pool_size // chunk_size
        if page_count <= 0:
            raise ValueError(
                f"pool_size ({pool_size}) is smaller than chunk_size ({chunk_size})"
            )
        self.region_id = region_id
        self._pool_size = pool_size
        self._chunk_size = chunk_size
        self._page_count = page_count
        self._free = deque(range(page_count))
        self._allocated = bytearray(page_count)  # 1 = in use
        self._num_allocated = 0

    @property
    def chunk_size(self) -> int:
        return self._chunk_size

    @property
    def page_count(self) -> int:
        return self._page_count

    @property
    def pool_size(self) -> int:
        return self._pool_size

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_allocated(self) -> int:
        return self._num_allocated

    def is_allocated(self, page_index: int) -> bool:
        return 0 <= page_index < self._page_count and bool(self._allocated[page_index])

    def allocate(self) -> int | None:
        """A free page index, or None when the region is full."""
        if not self._free:
            return None
        page = self._free.popleft()
        self._allocated[page] = 1
        self._num_allocated += 1
        return page

    def free(self, page_index: int) -> None:
        """Return @page_index; ValueError if out of range or not allocated."""
        if not 0 <= page_index < self._page_count:
            raise ValueError(
                f"page_index {page_index} out of range [0, {self._page_count})"
            )
        if not self._allocated[page_index]:
            raise ValueError(f"page {page_index} is not allocated (double free?)")
        self._allocated[page_index] = 0
        self._num_allocated -= 1
        self._free.append(page_index)

    def get_stats(self) -> dict:
        used = self.num_allocated
        return {
            "pool_size": self._pool_size,
            "chunk_size": self._chunk_size,
            "page_count": self._page_count,
            "free_pages": self.num_free_pages,
            "allocated_pages": used,
            "utilization": used / self._page_count if self._page_count else 0.0,
        }

    def close(self) -> None:
        """Forget every page (the region is going away)."""
        self._free.clear()
        self._allocated = bytearray(self._page_count)
        self._num_allocated = 0
