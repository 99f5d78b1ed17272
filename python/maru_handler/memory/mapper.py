# SPDX-License-Identifier: Apache-2.0
"""DaxMapper: map resource-manager regions into this process (pure Python).

A standalone mapper over maru_shm.MaruShmClient, for tools and tests that
want to map a region without a handler.  MaruHandler itself maps through
libmaru; its `mapper` property is a view with the same read accessors.

Mappings are read+write and shared.  Unless MARU_PREFAULT=0 (read at
import), map_region(prefault=True) pre-faults the mapping with
madvise(MADV_POPULATE_WRITE), falling back to touching one byte per page.
"""

import logging
import mmap
import os
import threading

from maru_shm import PROT_READ, PROT_WRITE, MaruHandle, MaruShmClient

from .types import MappedRegion

logger = logging.getLogger(__name__)

PREFAULT_ENABLED = os.environ.get("MARU_PREFAULT", "1") != "0"
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def prefault(mm) -> None:
    """Fault every page of @mm in, writable, without changing its bytes."""
    try:
        mm.madvise(MADV_POPULATE_WRITE)
        return
    except (OSError, ValueError, AttributeError):
        pass
    page = mmap.PAGESIZE
    view = memoryview(mm)
    try:
        for off in range(0, len(view), page):
            view[off] = view[off]
    finally:
        view.release()


class DaxMapper:
    """Region id -> MappedRegion, mapped through a MaruShmClient."""

    def __init__(self, shm_client: MaruShmClient | None = None,
                 rm_address: str | None = None,
                 device_table: dict[str, str] | None = None):
        self._client = shm_client or MaruShmClient(rm_address, device_table)
        self._regions: dict[int, MappedRegion] = {}
        self._lock = threading.RLock()

    @property
    def shm_client(self) -> MaruShmClient:
        return self._client

    def map_region(self, handle: MaruHandle, prefault_pages: bool = True) -> MappedRegion:
        """Map @handle's region (once) and return it."""
        with self._lock:
            region = self._regions.get(handle.region_id)
            if region is not None:
                return region
            mm = self._client.mmap(handle, PROT_READ | PROT_WRITE)
            if prefault_pages and PREFAULT_ENABLED:
                prefault(mm)
            region = MappedRegion(region_id=handle.region_id, handle=handle,
                                  size=handle.length, _mmap_obj=mm)
            self._regions[handle.region_id] = region
            return region

    def get_region(self, region_id: int) -> MappedRegion | None:
        return self._regions.get(region_id)

    def is_mapped(self, region_id: int) -> bool:
        r = self._regions.get(region_id)
        return r is not None and r.is_mapped

    def get_buffer_view(self, region_id: int, offset: int, size: int) -> memoryview | None:
        r = self._regions.get(region_id)
        return r.get_buffer_view(offset, size) if r is not None else None

    def get_mapped_region_ids(self) -> list[int]:
        return list(self._regions)

    def unmap_region(self, region_id: int) -> bool:
        with self._lock:
            region = self._regions.pop(region_id, None)
            if region is None:
                return False
            region.release()
            self._client.munmap(region.handle)
            return True

    def close(self) -> None:
        with self._lock:
            for rid in list(self._regions):
                self.unmap_region(rid)
