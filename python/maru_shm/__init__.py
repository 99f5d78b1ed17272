# SPDX-License-Identifier: Apache-2.0
"""maru_shm: resource manager client, shared types and constants."""

from maru_common.logging_setup import setup_package_logging

setup_package_logging("maru_shm")

from .client import MaruShmClient  # noqa: E402
from .constants import (  # noqa: E402
    DEFAULT_ADDRESS,
    DEFAULT_ALIGN_BYTES,
    DEFAULT_STATE_DIR,
    MAP_PRIVATE,
    MAP_SHARED,
    PROT_EXEC,
    PROT_NONE,
    PROT_READ,
    PROT_WRITE,
)
from .types import DaxType, MaruHandle, MaruPoolInfo  # noqa: E402

__all__ = [
    "MaruHandle",
    "MaruPoolInfo",
    "DaxType",
    "PROT_NONE",
    "PROT_READ",
    "PROT_WRITE",
    "PROT_EXEC",
    "MAP_SHARED",
    "MAP_PRIVATE",
    "MaruShmClient",
    "DEFAULT_ADDRESS",
    "DEFAULT_STATE_DIR",
    "DEFAULT_ALIGN_BYTES",
]
