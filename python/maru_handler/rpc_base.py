# SPDX-License-Identifier: Apache-2.0
"""RpcClient and RpcAsyncClient: upstream's metadata-server clients, over libmaru.

The transport is libmaru's (maru_handler_call through an unconnected
_maru.Handler: ZMTP in the calling thread, lock-step or pipelined, the
connection made at the first call and remade after a timeout or a drop).
What is Python here is upstream's surface: the request builders, the
parsers and the synthetic reply.  _send_request(msg_type, data) blocks for
the reply and returns its payload map; on a timeout or a transport error it
returns {"error": "timeout", "success": False} instead of raising
(docs/protocol.md §2).  Parsing follows upstream: every key is read with
a default, so a missing key reads as failure.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import msgpack

from maru_common.config import MaruConfig
from maru_common.serializer import _to_serializable

from maru_common.protocol import (
    AllocationManagerStats,
    BatchExistsKVResponse,
    BatchLookupKVResponse,
    BatchPinKVResponse,
    BatchRegisterKVResponse,
    BatchUnpinKVResponse,
    GetStatsResponse,
    GetUsageResponse,
    InstanceUsage,
    KVManagerStats,
    ListAllocationsResponse,
    LookupKVResponse,
    LookupResult,
    MessageType,
    RequestAllocResponse,
)
from maru_shm.types import MaruHandle

logger = logging.getLogger(__name__)

DEFAULT_SERVER_URL = "tcp://localhost:5555"
DEFAULT_TIMEOUT_MS = 5000


def timeout_reply() -> dict:
    return {"error": "timeout", "success": False}


# ---------------------------------------------------------------------------
# Request builders: msg_type, payload.  Parsers: payload -> result.
# ---------------------------------------------------------------------------
def parse_request_alloc(r: dict) -> RequestAllocResponse:
    if not r.get("success", False):
        return RequestAllocResponse(success=False, error=r.get("error", "Unknown error"))
    h = r.get("handle")
    return RequestAllocResponse(success=True, handle=MaruHandle.from_dict(h) if h else None)


def parse_list_allocations(r: dict) -> ListAllocationsResponse:
    if not r.get("success", False):
        return ListAllocationsResponse(success=False, error=r.get("error", "Unknown error"))
    return ListAllocationsResponse(
        success=True,
        allocations=[MaruHandle.from_dict(h) for h in r.get("allocations", [])],
    )


def _lookup_result(r: dict, cls):
    if not r.get("found", False):
        return cls(found=False)
    h = r.get("handle")
    return cls(
        found=True,
        handle=MaruHandle.from_dict(h) if h else None,
        kv_offset=r.get("kv_offset", 0),
        kv_length=r.get("kv_length", 0),
    )


def parse_lookup_kv(r: dict) -> LookupKVResponse:
    return _lookup_result(r, LookupKVResponse)


def parse_batch_lookup_kv(r: dict) -> BatchLookupKVResponse:
    return BatchLookupKVResponse(
        entries=[_lookup_result(e, LookupResult) for e in r.get("entries", [])]
    )


def parse_register_kv(r: dict) -> bool:
    if "error" in r:
        raise ConnectionError(f"register_kv RPC failed: {r['error']}")
    return bool(r.get("is_new", False))


def parse_batch_register_kv(r: dict) -> BatchRegisterKVResponse:
    return BatchRegisterKVResponse(success=bool(r.get("success", False)),
                                   results=list(r.get("results", [])))


def parse_get_stats(r: dict) -> GetStatsResponse:
    kv = r.get("kv_manager", {}) or {}
    am = r.get("allocation_manager", {}) or {}
    return GetStatsResponse(
        kv_manager=KVManagerStats(
            total_entries=kv.get("total_entries", 0), total_size=kv.get("total_size", 0)
        ),
        allocation_manager=AllocationManagerStats(
            num_allocations=am.get("num_allocations", 0),
            total_allocated=am.get("total_allocated", 0),
            active_clients=am.get("active_clients", 0),
        ),
        stats_manager=r.get("stats_manager", {}) or {},
        cxl_pool=r.get("cxl_pool", {}) or {},
    )


def parse_get_usage(r: dict) -> GetUsageResponse:
    if "error" in r:
        raise ConnectionError(f"get_usage RPC failed: {r['error']}")
    return GetUsageResponse(
        instances=[
            InstanceUsage(
                instance_id=i.get("instance_id", ""),
                regions=i.get("regions", 0),
                allocated=i.get("allocated", 0),
                used=i.get("used", 0),
                devices=i.get("devices", []),
            )
            for i in r.get("instances", [])
        ],
        pool_total=r.get("pool_total", 0),
        pool_free=r.get("pool_free", 0),
    )


def _get(name: str, default: Any = False):
    return lambda r: r.get(name, default)


def _entries(entries) -> list[dict]:
    return [
        {"key": k, "region_id": rid, "kv_offset": off, "kv_length": ln}
        for k, rid, off, ln in entries
    ]


# name -> (msg_type, payload builder, parser)
OPS: dict[str, tuple] = {
    "request_alloc": (
        MessageType.REQUEST_ALLOC,
        lambda instance_id, size, lease_id="": (
            {"instance_id": instance_id, "size": size, "lease_id": lease_id}
            if lease_id else {"instance_id": instance_id, "size": size}
        ),
        parse_request_alloc,
    ),
    "list_allocations": (
        MessageType.LIST_ALLOCATIONS,
        lambda exclude_instance_id=None: (
            {"exclude_instance_id": exclude_instance_id} if exclude_instance_id else {}
        ),
        parse_list_allocations,
    ),
    "return_alloc": (
        MessageType.RETURN_ALLOC,
        lambda instance_id, region_id: {"instance_id": instance_id, "region_id": region_id},
        _get("success"),
    ),
    "register_kv": (
        MessageType.REGISTER_KV,
        lambda key, region_id, kv_offset, kv_length: {
            "key": key, "region_id": region_id,
            "kv_offset": kv_offset, "kv_length": kv_length,
        },
        parse_register_kv,
    ),
    "lookup_kv": (MessageType.LOOKUP_KV, lambda key: {"key": key}, parse_lookup_kv),
    "exists_kv": (MessageType.EXISTS_KV, lambda key: {"key": key}, _get("exists")),
    "pin_kv": (MessageType.PIN_KV, lambda key: {"key": key}, _get("exists")),
    "unpin": (MessageType.UNPIN_KV, lambda key: {"key": key}, _get("success")),
    "delete_kv": (MessageType.DELETE_KV, lambda key: {"key": key}, _get("success")),
    "batch_register_kv": (
        MessageType.BATCH_REGISTER_KV,
        lambda entries: {"entries": _entries(entries)},
        parse_batch_register_kv,
    ),
    "batch_lookup_kv": (
        MessageType.BATCH_LOOKUP_KV, lambda keys: {"keys": list(keys)}, parse_batch_lookup_kv
    ),
    "batch_exists_kv": (
        MessageType.BATCH_EXISTS_KV,
        lambda keys: {"keys": list(keys)},
        lambda r: BatchExistsKVResponse(results=list(r.get("results", []))),
    ),
    "batch_pin_kv": (
        MessageType.BATCH_PIN_KV,
        lambda keys: {"keys": list(keys)},
        lambda r: BatchPinKVResponse(results=list(r.get("results", []))),
    ),
    "batch_unpin": (
        MessageType.BATCH_UNPIN_KV,
        lambda keys: {"keys": list(keys)},
        lambda r: BatchUnpinKVResponse(results=list(r.get("results", []))),
    ),
    "get_stats": (MessageType.GET_STATS, lambda: {}, parse_get_stats),
    "get_usage": (MessageType.GET_USAGE, lambda: {}, parse_get_usage),
    "report_stats": (
        MessageType.REPORT_STATS, lambda entries: {"entries": list(entries)}, lambda r: None
    ),
    "heartbeat": (MessageType.HEARTBEAT, lambda: {}, lambda r: "error" not in r),
    "renew_lease": (
        MessageType.HEARTBEAT,
        lambda instance_id, lease_id, release=False: (
            {"instance_id": instance_id, "lease_id": lease_id, "lease_release": True}
            if release else {"instance_id": instance_id, "lease_id": lease_id}
        ),
        lambda r: r,
    ),
    "handshake": (MessageType.HANDSHAKE, lambda: {}, lambda r: r),
}


class RpcClientBase:
    """All request methods, over one libmaru handler used for raw calls."""

    _pipelined = False  # libmaru's pipelined (DEALER) transport, or REQ

    def __init__(self, server_url: str = DEFAULT_SERVER_URL,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, max_inflight: int = 64):
        self.server_url = server_url
        self.timeout_ms = timeout_ms
        self.max_inflight = max(1, int(max_inflight))
        self._lock = threading.Lock()
        self._h = None  # _maru.Handler of process @_pid
        self._pid = 0

    @property
    def connected(self) -> bool:
        return self._h is not None

    def connect(self) -> None:
        """Prepare the transport (libmaru connects at the first call)."""
        from .handler import libmaru_handler

        with self._lock:
            if self._h is not None and self._pid == os.getpid():
                return
            self._h = libmaru_handler(MaruConfig(
                server_url=self.server_url, timeout_ms=int(self.timeout_ms),
                use_async_rpc=self._pipelined, max_inflight=self.max_inflight))
            self._pid = os.getpid()

    def close(self) -> None:
        """Drop the transport; calls in flight finish first (they hold it)."""
        with self._lock:
            self._h = None

    def _send_request(self, msg_type: MessageType, data: dict) -> dict:
        h = self._h
        if h is None or self._pid != os.getpid():
            self.connect()
            h = self._h
        payload = msgpack.packb(_to_serializable(data) if data is not None else {},
                                use_bin_type=True)
        try:
            reply = h.call(int(msg_type), payload)
            out = msgpack.unpackb(reply, raw=False)
        except (OSError, ValueError, msgpack.UnpackException) as e:
            logger.debug("%s: %s", MessageType(msg_type).name, e)
            return timeout_reply()
        return out if isinstance(out, dict) else timeout_reply()

    def _call(self, name: str, *args, **kwargs):
        msg_type, build, parse = OPS[name]
        return parse(self._send_request(msg_type, build(*args, **kwargs)))

    # allocation management
    def request_alloc(self, instance_id: str, size: int,
                      lease_id: str = "") -> RequestAllocResponse:
        """REQUEST_ALLOC: a new region for @instance_id of >= @size bytes."""
        return self._call("request_alloc", instance_id, size, lease_id)

    def list_allocations(self, exclude_instance_id: str | None = None
                         ) -> ListAllocationsResponse:
        """LIST_ALLOCATIONS: regions of connected owners except @exclude_instance_id."""
        return self._call("list_allocations", exclude_instance_id)

    def return_alloc(self, instance_id: str, region_id: int) -> bool:
        """RETURN_ALLOC: give a region back (freed once no key refers to it)."""
        return self._call("return_alloc", instance_id, region_id)

    # KV operations
    def register_kv(self, key, region_id: int, kv_offset: int, kv_length: int) -> bool:
        """REGISTER_KV; True if new.  Raises ConnectionError on an error reply."""
        return self._call("register_kv", key, region_id, kv_offset, kv_length)

    def lookup_kv(self, key) -> LookupKVResponse:
        return self._call("lookup_kv", key)

    def exists_kv(self, key) -> bool:
        return self._call("exists_kv", key)

    def pin_kv(self, key) -> bool:
        return self._call("pin_kv", key)

    def unpin(self, key) -> bool:
        return self._call("unpin", key)

    def delete_kv(self, key) -> bool:
        return self._call("delete_kv", key)

    # batch operations
    def batch_register_kv(self, entries) -> BatchRegisterKVResponse:
        """@entries: iterable of (key, region_id, kv_offset, kv_length)."""
        return self._call("batch_register_kv", entries)

    def batch_lookup_kv(self, keys) -> BatchLookupKVResponse:
        return self._call("batch_lookup_kv", keys)

    def batch_exists_kv(self, keys) -> BatchExistsKVResponse:
        return self._call("batch_exists_kv", keys)

    def batch_pin_kv(self, keys) -> BatchPinKVResponse:
        return self._call("batch_pin_kv", keys)

    def batch_unpin(self, keys) -> BatchUnpinKVResponse:
        return self._call("batch_unpin", keys)

    # admin
    def get_stats(self) -> GetStatsResponse:
        return self._call("get_stats")

    def get_usage(self) -> GetUsageResponse:
        """GET_USAGE.  Raises ConnectionError on an error reply or timeout."""
        return self._call("get_usage")

    def report_stats(self, entries: list[dict]) -> None:
        self._call("report_stats", entries)

    def heartbeat(self) -> bool:
        """True when the server answered without an error."""
        return self._call("heartbeat")

    def renew_lease(self, instance_id: str, lease_id: str, release: bool = False) -> dict:
        """HEARTBEAT naming a lease (docs/metadata-server.md); raw reply."""
        return self._call("renew_lease", instance_id, lease_id, release)

    def handshake(self) -> dict:
        """HANDSHAKE; the raw reply map (rm_address, ...)."""
        return self._call("handshake")

    # context manager
    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
