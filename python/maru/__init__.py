# SPDX-License-Identifier: Apache-2.0
"""Maru: KV-cache chunks in shared (CXL) memory, stored and retrieved zero-copy.

    from maru import MaruConfig, MaruHandler

    with MaruHandler(MaruConfig(server_url="tcp://localhost:5555")) as h:
        handle = h.alloc(size=len(data))
        handle.buf[:] = data
        h.store(key=42, handle=handle)
        info = h.retrieve(key=42)      # info.view: the same bytes, no copy
"""

from maru_common.logging_setup import setup_package_logging

setup_package_logging("maru")

from maru_common.config import MaruConfig  # noqa: E402
from maru_handler import MaruHandler  # noqa: E402
from maru_handler.memory import AllocHandle  # noqa: E402

__version__ = "0.1.0"

__all__ = ["MaruConfig", "MaruHandler", "AllocHandle", "__version__"]
