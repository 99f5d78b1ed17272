# SPDX-License-Identifier: Apache-2.0
"""RpcAsyncClient: pipelined client of the metadata server (libmaru's DEALER mode).

Thread-safe: up to max_inflight requests from any threads share one
connection, replies matched by sequence number inside libmaru (no I/O
thread: the waiting callers read for each other).  A request without a
reply within timeout_ms resolves to {"error": "timeout", "success": False}
and its late reply is dropped.

Every blocking method of RpcClientBase is available, plus *_async variants
that return a concurrent.futures.Future of the parsed result; they run the
blocking call on a small pool of threads (at most max_inflight).
"""

from concurrent.futures import Future, ThreadPoolExecutor

from .rpc_base import DEFAULT_SERVER_URL, DEFAULT_TIMEOUT_MS, RpcClientBase

_ASYNC_OPS = (
    "request_alloc", "list_allocations", "return_alloc", "register_kv",
    "lookup_kv", "exists_kv", "delete_kv", "batch_register_kv",
    "batch_lookup_kv", "batch_exists_kv", "heartbeat",
)


class RpcAsyncClient(RpcClientBase):
    """Pipelined client (ZeroMQ DEALER on the wire)."""

    _pipelined = True

    def __init__(self, server_url: str = DEFAULT_SERVER_URL,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, max_inflight: int = 64):
        super().__init__(server_url, timeout_ms, max_inflight)
        self._pool: ThreadPoolExecutor | None = None

    def _call_async(self, name: str, *args, **kwargs) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_inflight,
                                                thread_name_prefix="maru-rpc")
            pool = self._pool
        return pool.submit(self._call, name, *args, **kwargs)

    def close(self) -> None:
        """Wait for the *_async calls in flight, then drop the transport."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        super().close()


def _make_async(name: str):
    def method(self, *args, **kwargs) -> Future:
        return self._call_async(name, *args, **kwargs)

    method.__name__ = f"{name}_async"
    method.__doc__ = f"Non-blocking {name}(): a Future of its result."
    return method


for _name in _ASYNC_OPS:
    setattr(RpcAsyncClient, f"{_name}_async", _make_async(_name))
