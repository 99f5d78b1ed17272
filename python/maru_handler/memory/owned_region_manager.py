# SPDX-License-Identifier: Apache-2.0
"""OwnedRegionManager: the regions one handler allocated, and their pages.

allocate() tries the active region first, then the other regions in the
order they were added, and makes the region it found a page in the active
one; so pages are packed into one region until it is full.
"""

import logging

from .allocator import PagedMemoryAllocator
from .types import OwnedRegion

logger = logging.getLogger(__name__)


class OwnedRegionManager:
    """Owned regions of one handler, each with a PagedMemoryAllocator."""

    def __init__(self, chunk_size: int):
        self._chunk_size = chunk_size
        self._regions: dict[int, OwnedRegion] = {}  # insertion order
        self._active: int | None = None

    def add_region(self, handle, allocator: PagedMemoryAllocator | None = None
                   ) -> OwnedRegion:
        """Track @handle's region (handle.length bytes of pages)."""
        if allocator is None:
            allocator = PagedMemoryAllocator(handle.region_id, handle.length,
                                             self._chunk_size)
        region = OwnedRegion(region_id=handle.region_id, allocator=allocator)
        self._regions[handle.region_id] = region
        if self._active is None:
            self._active = handle.region_id
        return region

    def allocate(self) -> tuple[int, int] | None:
        """(region_id, page_index) of a free page, or None when all are full."""
        if self._active is not None:
            page = self._regions[self._active].allocator.allocate()
            if page is not None:
                return self._active, page
        for rid, region in self._regions.items():
            if rid == self._active:
                continue
            page = region.allocator.allocate()
            if page is not None:
                self._active = rid
                return rid, page
        return None

    def free(self, region_id: int, page_index: int) -> None:
        """KeyError if @region_id is not owned; ValueError from the allocator."""
        region = self._regions.get(region_id)
        if region is None:
            raise KeyError(f"Region {region_id} is not owned by this handler")
        region.allocator.free(page_index)

    def is_owned(self, region_id: int) -> bool:
        return region_id in self._regions

    def is_full(self) -> bool:
        return all(r.allocator.num_free_pages == 0 for r in self._regions.values())

    def get_chunk_size(self) -> int:
        return self._chunk_size

    def get_region_ids(self) -> list[int]:
        return list(self._regions)

    def get_owned_region(self, region_id: int) -> OwnedRegion | None:
        return self._regions.get(region_id)

    def get_allocator(self, region_id: int) -> PagedMemoryAllocator | None:
        r = self._regions.get(region_id)
        return r.allocator if r is not None else None

    def get_first_region_id(self) -> int | None:
        return next(iter(self._regions), None)

    def get_first_allocator(self) -> PagedMemoryAllocator | None:
        rid = self.get_first_region_id()
        return self._regions[rid].allocator if rid is not None else None

    def remove_region(self, region_id: int) -> None:
        r = self._regions.pop(region_id, None)
        if r is not None:
            r.allocator.close()
        if self._active == region_id:
            self._active = next(iter(self._regions), None)

    def close(self) -> list[int]:
        """Drop every allocator; return the region ids (to give back)."""
        ids = list(self._regions)
        for r in self._regions.values():
            r.allocator.close()
        self._regions.clear()
        self._active = None
        return ids

    def _region_stats(self) -> list[dict]:
        """Each region's allocator stats, with its "region_id"."""
        out = []
        for rid, r in self._regions.items():
            st = r.allocator.get_stats()
            st["region_id"] = rid
            out.append(st)
        return out

    def get_stats(self) -> dict:
        regions = self._region_stats()
        pages = sum(r["page_count"] for r in regions)
        used = sum(r["allocated_pages"] for r in regions)
        return {
            "num_regions": len(regions),
            "total_pool_size": sum(r["pool_size"] for r in regions),
            "total_page_count": pages,
            "total_free_pages": sum(r["free_pages"] for r in regions),
            "total_allocated_pages": used,
            "utilization": used / pages if pages else 0.0,
            "regions": regions,
        }
