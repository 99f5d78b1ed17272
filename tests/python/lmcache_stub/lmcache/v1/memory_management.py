# SPDX-License-Identifier: Apache-2.0
"""STAND-IN for lmcache.v1.memory_management (tests only).

Only what maru_lmcache.CxlMemoryAdapter uses, with LMCache's names and
signatures; see ../../README.md.
"""
import abc
import threading
from dataclasses import dataclass
from enum import Enum, auto
from typing import Optional, Tuple, Union

import torch


class MemoryFormat(Enum):
    UNDEFINED = 0
    KV_2LTD = auto()      # [2, num_layers, num_tokens, hidden_dim]
    KV_T2D = auto()       # [num_tokens, 2, hidden_dim]
    KV_2TD = auto()       # [2, num_tokens, hidden_dim]
    BINARY = auto()
    BINARY_BUFFER = auto()
    KV_MLA_FMT = auto()   # [1, num_layers, num_tokens, aligned_head_size]

    def token_dim(self) -> int:
        if self in (MemoryFormat.KV_2LTD, MemoryFormat.KV_MLA_FMT):
            return 2
        if self == MemoryFormat.KV_T2D:
            return 1
        return 0


@dataclass
class MemoryObjMetadata:
    shape: torch.Size
    dtype: Optional[torch.dtype]
    address: int
    phy_size: int
    ref_count: int
    pin_count: int = 0
    fmt: MemoryFormat = MemoryFormat.UNDEFINED
    cached_positions: Optional[torch.Tensor] = None
    shapes: Optional[list] = None
    dtypes: Optional[list] = None


class MemoryObj(metaclass=abc.ABCMeta):
    def __init__(self, metadata: MemoryObjMetadata):
        self.meta = metadata

    @property
    @abc.abstractmethod
    def metadata(self) -> MemoryObjMetadata: ...

    @property
    @abc.abstractmethod
    def tensor(self) -> Optional[torch.Tensor]: ...


class TensorMemoryObj(MemoryObj):
    """A flat tensor plus metadata; .tensor is the logical view."""

    def __init__(self, raw_data: torch.Tensor, metadata: MemoryObjMetadata,
                 parent_allocator: Optional["MemoryAllocatorInterface"] = None):
        self.raw_data = raw_data
        self.meta = metadata
        self.valid = True
        self.lock = threading.Lock()
        self.parent_allocator = parent_allocator

    def get_size(self) -> int:
        return self.raw_data.numel() * self.raw_data.element_size()

    def get_shape(self) -> torch.Size:
        return self.meta.shape

    def get_dtype(self):
        return self.meta.dtype

    def get_memory_format(self) -> MemoryFormat:
        return self.meta.fmt

    def get_physical_size(self) -> int:
        return self.meta.phy_size

    def ref_count_up(self):
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self):
        with self.lock:
            self.meta.ref_count -= 1
            if self.meta.ref_count == 0 and self.parent_allocator is not None:
                self.parent_allocator.free(self)

    def get_ref_count(self) -> int:
        return self.meta.ref_count

    @property
    def metadata(self) -> MemoryObjMetadata:
        return self.meta

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        if not self.valid:
            return None
        return self.raw_data.view(self.meta.dtype).view(self.meta.shape)


class MemoryAllocatorInterface(metaclass=abc.ABCMeta):
    @abc.abstractmethod
    def allocate(self, shapes, dtypes, fmt=MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None):
        raise NotImplementedError

    @abc.abstractmethod
    def batched_allocate(self, shapes, dtypes, batch_size: int,
                         fmt=MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None):
        raise NotImplementedError

    @abc.abstractmethod
    def free(self, memory_obj, allocator_type: Optional[str] = None):
        raise NotImplementedError

    @abc.abstractmethod
    def batched_free(self, memory_objs, allocator_type: Optional[str] = None,
                     update_stats: bool = True):
        raise NotImplementedError

    def close(self):
        return

    def _adapt_shapes_and_dtypes(
        self,
        shapes: Union[torch.Size, list],
        dtypes: Union[torch.dtype, list],
    ) -> Tuple[list, list]:
        if isinstance(shapes, torch.Size):
            shapes = [shapes]
        if isinstance(dtypes, torch.dtype):
            dtypes = [dtypes]
        assert len(shapes) == len(dtypes), (
            f"shapes and dtypes must have the same length, "
            f"got {len(shapes)} and {len(dtypes)}"
        )
        return shapes, dtypes
