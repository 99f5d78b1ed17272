# SPDX-License-Identifier: Apache-2.0
"""RpcClient: lock-step client of the metadata server (libmaru's REQ mode).

One request at a time on one connection; callers in several threads queue
(upstream asked them to serialise, docs/python-api.md).  A request without
a reply within timeout_ms closes the connection, as upstream's REQ reset
did, and returns the synthetic reply {"error": "timeout", "success": False};
a late reply goes with the old connection.  See rpc_base.py.
"""

from .rpc_base import DEFAULT_SERVER_URL, DEFAULT_TIMEOUT_MS, RpcClientBase


class RpcClient(RpcClientBase):
    """Synchronous client (ZeroMQ REQ on the wire)."""

    def __init__(self, server_url: str = DEFAULT_SERVER_URL,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        super().__init__(server_url, timeout_ms, 1)
