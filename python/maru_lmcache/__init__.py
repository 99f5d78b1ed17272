# SPDX-License-Identifier: Apache-2.0
"""maru_lmcache: the memory adapter LMCache's MaruBackend uses.

CxlMemoryAdapter is a lazy attribute: importing this package imports
neither torch nor lmcache; the first access to CxlMemoryAdapter (or its
old name CxlMemoryAllocator) imports maru_lmcache.adapter, which does.
"""

__all__ = ["CxlMemoryAdapter", "CxlMemoryAllocator"]


def __getattr__(name: str):
    if name in ("CxlMemoryAdapter", "CxlMemoryAllocator"):
        from .adapter import CxlMemoryAdapter

        return CxlMemoryAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
