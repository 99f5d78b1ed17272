# SPDX-License-Identifier: Apache-2.0
"""maru_handler.memory: pages, regions and mappings."""

from .allocator import PagedMemoryAllocator
from .mapper import DaxMapper
from .owned_region_manager import OwnedRegionManager
from .types import AllocHandle, MappedRegion, MemoryInfo, OwnedRegion

__all__ = [
    "AllocHandle",
    "MemoryInfo",
    "MappedRegion",
    "OwnedRegion",
    "OwnedRegionManager",
    "PagedMemoryAllocator",
    "DaxMapper",
]
