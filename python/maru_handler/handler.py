# SPDX-License-Identifier: Apache-2.0
"""MaruHandler: upstream's handler API over libmaru (docs/python-api.md).

Every operation is one call into the extension maru_core._maru, which
releases the GIL around libmaru and raises upstream's state errors
("Handler is closing", "Not connected. Call connect() first.").  This module
adds what is Python-only: MaruConfig -> libmaru config, errno -> upstream's
exception messages, get_stats() assembly, and read-only facades
(allocator, owned_region_manager, mapper) that present libmaru's state with
upstream's classes.

Zero copy: AllocHandle.buf and MemoryInfo.view are memoryviews straight
over the shared mapping.  They become invalid after close().
"""

from __future__ import annotations

import atexit
import errno
import logging
import re
from typing import Callable

import msgpack

from maru_common.config import MaruConfig
from maru_core import _maru, lib
from maru_shm.types import MaruHandle

from .memory.allocator import PagedMemoryAllocator
from .memory.mapper import DaxMapper
from .memory.owned_region_manager import OwnedRegionManager
from .memory.types import AllocHandle, MappedRegion, MemoryInfo, OwnedRegion

logger = logging.getLogger(__name__)
_libmaru_logger = logging.getLogger("maru_handler.libmaru")

# syslog priority -> logging level
_PRIO_LEVEL = {0: 50, 1: 50, 2: 50, 3: 40, 4: 30, 5: 20, 6: 20, 7: 10}


def _log_sink(prio: int, file: str, line: int, func: str, msg: str) -> None:
    """libmaru's log lines, as records of logger maru_handler.libmaru."""
    level = _PRIO_LEVEL.get(prio, 10)
    if _libmaru_logger.isEnabledFor(level):
        rec = _libmaru_logger.makeRecord(_libmaru_logger.name, level, file, line,
                                         msg, None, None, func)
        _libmaru_logger.handle(rec)


if _maru is not None:
    _maru.set_types(AllocHandle, MemoryInfo)
    _maru.set_log_sink(_log_sink)
    atexit.register(_maru._shutdown)


def _errno_name(e: int) -> str:
    return errno.errorcode.get(e, str(e))


def _ttl_ms(ttl) -> int | None:
    """A pin's time to live in seconds as libmaru's milliseconds (None:
    a plain pin); a clear error for anything else."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be seconds (int or float), not "
                        f"{type(ttl).__name__}")
    if not ttl > 0 or ttl > 4294967.295:
        raise ValueError(f"ttl must be more than 0 and at most 4294967.295 "
                         f"seconds (49 days), not {ttl!r}")
    return max(1, int(round(ttl * 1000)))


def libmaru_handler(c: MaruConfig):
    """A libmaru handler for @c, not connected: MaruHandler's own, and the
    context of RpcClient/RpcAsyncClient (their raw calls, maru_handler_call)."""
    return lib().Handler(
        c.server_url,
        c.instance_id,
        int(c.pool_size),
        int(c.chunk_size_bytes),
        int(c.timeout_ms),
        bool(c.use_async_rpc),
        int(c.max_inflight),
        bool(c.eager_map),
        bool(c.auto_expand),
        int(c.expand_size or 0),
        c.rm_address,
        bool(c.enable_stats),
        _libmaru_logger.getEffectiveLevel(),
        getattr(c, "curve_server_key", None),
        getattr(c, "curve_secret_key_file", None),
        getattr(c, "agent_url", None),
        getattr(c, "remote", None),
        getattr(c, "agent_curve_key", None),
    )


class MaruHandler:
    """Client of one metadata server; owns regions of the shared pool.

    Construction does no I/O; connect() (or ``with`` when auto_connect)
    connects.  See docs/python-api.md for every method's semantics.
    """

    def __init__(self, config: MaruConfig | None = None):
        self._config = config if config is not None else MaruConfig()
        c = self._config
        self._h = libmaru_handler(c)
        self._chunk_size = int(c.chunk_size_bytes)
        self._orm: _OwnedRegionManagerView | None = None
        self._mapper_view: _HandlerMapperView | None = None
        self._connect_error = ""
        self._told: set[str] = set()     # causes store() warned of

    # ------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------
    @property
    def config(self) -> MaruConfig:
        return self._config

    def connect(self) -> bool:
        """Connect and obtain the first region; False on any failure.

        When the server answers but has no region for this handler now
        (the pool is full, the resource manager is away, a quota), it
        connects without one, says so at WARNING, and can read: the first
        alloc() asks again.  The cause of a failure is one error line of
        logger maru_handler.libmaru (e.g. "tcp://127.0.0.1:5555: connection
        refused (is maru-server running there?)"), kept in
        :attr:`connect_error`.
        """
        if self._h.connected:
            return True
        if self._h.closing:
            self._connect_error = "the handler was closed and cannot be reused"
            logger.error("connect: %s", self._connect_error)
            return False
        self._h.set_log_level(_libmaru_logger.getEffectiveLevel())
        rc = self._h.connect()
        if rc < 0:
            # libmaru logged the cause (one line); the errno only at debug
            self._connect_error = (self._h.connect_error or
                                   f"connect to {self._config.server_url} failed: "
                                   f"{errno_message(-rc)}")
            logger.debug("connect to %s failed: %s (%s)", self._config.server_url,
                         _errno_name(-rc), errno_message(-rc))
            return False
        self._connect_error = ""
        self._orm = _OwnedRegionManagerView(self)
        self._mapper_view = _HandlerMapperView(self)
        logger.debug("connected to %s as %s (chunk %d bytes, regions %s)",
                    self._config.server_url, self.instance_id, self._chunk_size,
                    self._h.owned_region_ids())
        return True

    def close(self) -> None:
        """Return every owned region and unmap everything (not reusable)."""
        if not self._h.connected:
            return
        self._h.close()
        self._orm = None
        self._mapper_view = None

    @property
    def connect_error(self) -> str:
        """Why the last connect() failed, one line; "" if it did not."""
        return self._connect_error

    def __enter__(self) -> "MaruHandler":
        # a with-block never runs unconnected: the cause is raised here,
        # not as "Not connected" at the first call (connect() itself still
        # returns False, as upstream's)
        if self._config.auto_connect and not self.connect():
            raise ConnectionError(self._connect_error)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    # ------------------------------------------------------------------
    # properties and accessors
    # ------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._h.connected

    @property
    def instance_id(self) -> str:
        return self._config.instance_id

    @property
    def pool_handle(self) -> MaruHandle | None:
        """Handle of the first owned region."""
        ids = self._h.owned_region_ids()
        if not ids:
            return None
        t = self._h.region_handle(ids[0])
        return MaruHandle(*t) if t is not None else None

    @property
    def allocator(self) -> PagedMemoryAllocator | None:
        """The first owned region's allocator (read-mostly view)."""
        if self._orm is None or not self._h.connected:
            return None
        return self._orm.get_first_allocator()

    @property
    def owned_region_manager(self) -> OwnedRegionManager | None:
        return self._orm if self._h.connected else None

    @property
    def mapper(self) -> DaxMapper | None:
        """Deprecated: the mapping accessors as a DaxMapper."""
        return self._mapper_view if self._h.connected else None

    _mapper = mapper

    @property
    def lease_ttl_ms(self) -> int:
        """Client lease granted by the server (0: none)."""
        return self._h.lease_ttl_ms

    def get_chunk_size(self) -> int:
        return self._chunk_size

    def get_owned_region_ids(self) -> list[int]:
        return self._h.owned_region_ids()

    def get_buffer_view(self, region_id: int, offset: int, size: int) -> memoryview | None:
        """Zero-copy view into any mapped region; None if unmapped/out of bounds."""
        if offset < 0 or size < 0 or region_id < 0:
            return None
        return self._h.get_buffer_view(region_id, offset, size)

    def get_region_page_count(self, region_id: int) -> int | None:
        if region_id < 0:
            return None
        return self._h.region_page_count(region_id)

    def set_on_region_added(self, callback: Callable[[int, int], None] | None) -> None:
        """cb(region_id, page_count): replayed now for every owned region,
        then called once per region added by expansion; None unregisters."""
        self._h.set_on_region_added(callback)

    # ------------------------------------------------------------------
    # pages
    # ------------------------------------------------------------------
    def alloc(self, size: int) -> AllocHandle:
        """A free page; write up to @size bytes into .buf, then store().
        A failure raises upstream's exception, its text followed by the
        cause ("...: the resource manager at ... is not reachable")."""
        try:
            return self._h.alloc(size)
        except OSError as e:
            raise _alloc_error(e.errno, size, self._chunk_size,
                               self._h.last_error) from None

    def free(self, handle: AllocHandle) -> None:
        """Return @handle's page (a stored key stays registered)."""
        rc = self._h.free(handle._region_id, handle._page_index)
        if rc == 0:
            return
        if rc == -errno.ENOENT:
            raise KeyError(f"Region {handle._region_id} is not owned by this handler")
        if rc == -errno.EINVAL:
            raise ValueError(
                f"Page {handle._page_index} of region {handle._region_id} "
                "is not allocated"
            )
        raise OSError(-rc, errno_message(-rc))

    # ------------------------------------------------------------------
    # key-value operations
    # ------------------------------------------------------------------
    def store(self, key, handle: AllocHandle) -> bool:
        """Register @handle's page, already written in place, under @key."""
        rc = self._h.store(key, handle._region_id, handle._page_index, handle._size)
        if rc >= 0:
            return True
        if rc == -errno.EINVAL:
            self._refused(f"region {handle._region_id} page "
                          f"{handle._page_index} is not an allocated page of "
                          "this handler")
        else:
            self._refused(self._h.last_error or errno_message(-rc))
        return False

    def _refused(self, cause: str) -> None:
        """A store() that returns False says why at WARNING, once per
        cause (not per call: a writer retrying through an outage would
        flood the log); later ones at DEBUG."""
        seen = re.sub(r"\d+", "#", cause)   # the cause, not its numbers
        if seen not in self._told:
            if len(self._told) >= 64:
                self._told.clear()
            self._told.add(seen)
            logger.warning("store: not stored: %s", cause)
        else:
            logger.debug("store: not stored: %s", cause)

    def retrieve(self, key) -> MemoryInfo | None:
        """A zero-copy view of the value stored under @key, or None."""
        info = self._h.retrieve(key)
        if info is not None:        # for info.is_valid()
            info._handler = self
            info._key = key
        return info

    def remote_stats(self) -> dict:
        """The remote path's figures (docs/remote.md): ``remote`` (the
        bytes go through maru-agent), pages and bytes put and got,
        failed transfers, endpoints made.  An addition to upstream's API."""
        return self._h.remote_stats()

    @property
    def is_remote(self) -> bool:
        """Does this handler move its bytes through maru-agent (a host
        that cannot map the pool)?  Known once connected."""
        return bool(self._h.remote_stats()["remote"])

    def is_valid(self, info: MemoryInfo) -> bool:
        """Are @info's bytes still the pool's?  False once its mapping was
        fenced (the server restarted or stopped answering, or the lease
        expired): the view then reads private memory, not the stored
        bytes.  An addition to upstream's API."""
        return self._h.view_valid(info.view, info.region_id)

    def recheck(self, key, info: MemoryInfo) -> bool:
        """After reading @info (retrieved under @key): were those the
        stored bytes all along?  False if the key was evicted, deleted or
        stored again meanwhile (discard what was read), or its mapping was
        fenced.  One lookup round trip.  An addition to upstream's API
        (docs/python-api.md, "Eviction")."""
        if info is None:
            return False
        return self._h.recheck(key, info.view, info.region_id,
                               info.kv_offset, info.ticket)

    def exists(self, key) -> bool:
        return self._h.exists(key)

    def pin(self, key, ttl=None) -> bool:
        """PIN_KV.  With ``ttl`` (seconds): a soft pin that maru-server
        drops by itself that long after, so that a process that pinned and
        died cannot hold the key forever (an addition to upstream's API;
        docs/python-api.md)."""
        return self._h.pin(key, _ttl_ms(ttl))

    def unpin(self, key) -> bool:
        return self._h.unpin(key)

    def delete(self, key) -> bool:
        """DELETE_KV; frees the page if this handler stored it.  False if
        absent or pinned."""
        return self._h.delete(key)

    def batch_store(self, keys, handles) -> list[bool]:
        out = self._h.batch_store(keys, handles)
        if not all(out):
            self._refused(self._h.last_error or
                          f"{out.count(False)} of {len(out)} keys refused")
        return out

    def batch_retrieve(self, keys) -> list[MemoryInfo | None]:
        if not isinstance(keys, (list, tuple)):
            keys = list(keys)
        infos = self._h.batch_retrieve(keys)
        for info, key in zip(infos, keys):
            if info is not None:
                info._handler = self
                info._key = key
        return infos

    def batch_exists(self, keys) -> list[bool]:
        return self._h.batch_exists(keys)

    def batch_pin(self, keys, ttl=None) -> list[bool]:
        """BATCH_PIN_KV (stops at the first missing key); ``ttl`` as
        pin()'s."""
        return self._h.batch_pin(keys, _ttl_ms(ttl))

    def batch_unpin(self, keys) -> list[bool]:
        return self._h.batch_unpin(keys)

    # ------------------------------------------------------------------
    # admin
    # ------------------------------------------------------------------
    def healthcheck(self) -> bool:
        return self._h.healthcheck()

    def get_stats(self) -> dict:
        """Server statistics plus this handler's page statistics."""
        try:
            raw = msgpack.unpackb(self._h.get_stats_raw(), raw=False)
        except OSError as e:
            logger.debug("get_stats: %s", e)
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        stats = {
            "kv_manager": raw.get("kv_manager", {"total_entries": 0, "total_size": 0}),
            "allocation_manager": raw.get(
                "allocation_manager",
                {"num_allocations": 0, "total_allocated": 0, "active_clients": 0},
            ),
            "stats_manager": raw.get("stats_manager", {}),
        }
        if "cxl_pool" in raw:
            stats["cxl_pool"] = raw["cxl_pool"]
        # the shared index (an addition to upstream's stats): the server's
        # side, and what this handler answered from it without a request
        if "shm_index" in raw:
            stats["shm_index"] = raw["shm_index"]
        stats["shm_index_local"] = self.index_stats()
        if self._orm is not None:
            store = self._orm.get_stats()
            stats["store_regions"] = store
            if store["regions"]:
                stats["allocator"] = store["regions"][0]
        return stats

    def index_stats(self) -> dict:
        """What this handler answered from maru-server's shared index
        (docs/shm-index.md): attached, local_hits, local_misses, fallbacks
        (lookups it could not answer, sent to the server).  An addition
        to upstream's API."""
        return self._h.index_stats()

    def __repr__(self) -> str:
        return (f"MaruHandler(server_url={self._config.server_url!r}, "
                f"instance_id={self.instance_id!r}, connected={self.connected})")


def errno_message(e: int) -> str:
    import os

    return os.strerror(e) if e > 0 else "unknown error"


def _alloc_error(e: int | None, size: int, chunk: int,
                 cause: str = "") -> Exception:
    """Upstream's exception for a failed maru_page_alloc(), its text
    followed by libmaru's cause when it gave one."""
    why = f": {cause}" if cause else ""
    if e == errno.EINVAL:
        if size > chunk:
            return ValueError(f"Requested size {size} exceeds chunk_size {chunk} "
                              f"(chunk_size_bytes)")
        return ValueError(f"Requested size {size} must be positive")
    if e == errno.ENOSPC:       # (upstream's words say it all)
        return ValueError("Cannot allocate page: pool exhausted and "
                          "auto_expand is disabled")
    if e == errno.ENOMEM:
        return ValueError("Cannot allocate page: pool exhausted after "
                          f"expansion attempt{why}")
    if e == errno.ENOBUFS:
        return ValueError(f"Cannot allocate page after expansion{why}")
    if e == errno.EKEYEXPIRED:
        return RuntimeError("Cannot allocate page: ownership of this client's "
                            "regions cannot be confirmed (metadata server "
                            "unreachable or restarted, or client lease "
                            f"expired){why}")
    return OSError(e, errno_message(e or errno.EIO) + why)


# ----------------------------------------------------------------------
# Facades: upstream's memory classes as views of libmaru's state
# ----------------------------------------------------------------------
_EMPTY_STATS = {"pool_size": 0, "chunk_size": 0, "page_count": 0,
                "free_pages": 0, "allocated_pages": 0}


class _RegionAllocatorView(PagedMemoryAllocator):
    """PagedMemoryAllocator of one owned region, read from libmaru."""

    def __init__(self, handler: MaruHandler, region_id: int):  # noqa: D107
        self._handler = handler
        self.region_id = region_id

    def _st(self) -> dict:
        st = self._handler._h.region_stats(self.region_id)
        return st if st is not None else _EMPTY_STATS

    @property
    def chunk_size(self) -> int:
        return self._handler._chunk_size

    @property
    def page_count(self) -> int:
        return self._st()["page_count"]

    @property
    def pool_size(self) -> int:
        return self._st()["pool_size"]

    @property
    def num_free_pages(self) -> int:
        return self._st()["free_pages"]

    @property
    def num_allocated(self) -> int:
        return self._st()["allocated_pages"]

    def is_allocated(self, page_index: int) -> bool:
        raise NotImplementedError("not tracked per page outside libmaru")

    def allocate(self) -> int | None:
        raise NotImplementedError(
            "a connected handler's pages are allocated with MaruHandler.alloc()"
        )

    def free(self, page_index: int) -> None:
        rc = self._handler._h.free(self.region_id, page_index)
        if rc == -errno.ENOENT:
            raise KeyError(f"Region {self.region_id} is not owned by this handler")
        if rc == -errno.EINVAL:
            raise ValueError(f"page {page_index} is not allocated or out of range")
        if rc < 0:
            raise OSError(-rc, errno_message(-rc))

    def get_stats(self) -> dict:
        st = dict(self._st())
        st.pop("region_id", None)
        pages = st["page_count"]
        st["utilization"] = st["allocated_pages"] / pages if pages else 0.0
        return st

    def close(self) -> None:
        """Nothing to do: the handler's close() returns the region."""

    def __repr__(self) -> str:
        return f"<PagedMemoryAllocator region {self.region_id} (libmaru)>"


class _OwnedRegionManagerView(OwnedRegionManager):
    """OwnedRegionManager of a connected handler, read from libmaru."""

    def __init__(self, handler: MaruHandler):  # noqa: D107
        self._handler = handler
        self._chunk_size = handler._chunk_size

    def add_region(self, handle, allocator=None):
        raise NotImplementedError("regions are added by MaruHandler (auto_expand)")

    def allocate(self) -> tuple[int, int] | None:
        """A free page of an owned region (no expansion), or None."""
        if self.is_full():
            return None
        try:
            h = self._handler._h.alloc(1)
        except OSError:
            return None
        return h.region_id, h.page_index

    def free(self, region_id: int, page_index: int) -> None:
        _RegionAllocatorView(self._handler, region_id).free(page_index)

    def is_owned(self, region_id: int) -> bool:
        return region_id >= 0 and self._handler._h.region_is_owned(region_id)

    def is_full(self) -> bool:
        return all(r["free_pages"] == 0 for r in self._region_stats())

    def get_region_ids(self) -> list[int]:
        return self._handler._h.owned_region_ids()

    def get_owned_region(self, region_id: int) -> OwnedRegion | None:
        if not self.is_owned(region_id):
            return None
        return OwnedRegion(region_id=region_id,
                           allocator=_RegionAllocatorView(self._handler, region_id))

    def get_allocator(self, region_id: int) -> PagedMemoryAllocator | None:
        r = self.get_owned_region(region_id)
        return r.allocator if r is not None else None

    def get_first_region_id(self) -> int | None:
        ids = self.get_region_ids()
        return ids[0] if ids else None

    def get_first_allocator(self) -> PagedMemoryAllocator | None:
        rid = self.get_first_region_id()
        return _RegionAllocatorView(self._handler, rid) if rid is not None else None

    def remove_region(self, region_id: int) -> None:
        raise NotImplementedError("regions are returned by MaruHandler.close()")

    def close(self) -> list[int]:
        """The owned region ids; the handler's close() returns them."""
        return self.get_region_ids()

    def _region_stats(self) -> list[dict]:
        """libmaru's stats of each owned region, as the allocator's."""
        out = []
        for rid in self.get_region_ids():
            st = self._handler._h.region_stats(rid)
            if st is None:
                continue
            r = {k: st[k] for k in ("pool_size", "chunk_size", "page_count",
                                    "free_pages", "allocated_pages")}
            r["utilization"] = (r["allocated_pages"] / r["page_count"]
                                if r["page_count"] else 0.0)
            r["region_id"] = rid
            out.append(r)
        return out


class _HandlerMapperView(DaxMapper):
    """DaxMapper accessors of a connected handler (libmaru maps)."""

    def __init__(self, handler: MaruHandler):  # noqa: D107
        self._handler = handler

    def map_region(self, handle, prefault_pages: bool = True):
        raise NotImplementedError("libmaru maps regions (eagerly or on retrieve)")

    def get_region(self, region_id: int) -> MappedRegion | None:
        t = self._handler._h.region_handle(region_id)
        if t is None:
            return None
        handle = MaruHandle(*t)
        view = self._handler._h.get_buffer_view(region_id, 0, handle.length)
        if view is None:
            return None
        return MappedRegion(region_id=region_id, handle=handle, size=handle.length,
                            _mmap_obj=view)

    def is_mapped(self, region_id: int) -> bool:
        return self._handler._h.region_handle(region_id) is not None

    def get_buffer_view(self, region_id: int, offset: int, size: int) -> memoryview | None:
        return self._handler.get_buffer_view(region_id, offset, size)

    def get_mapped_region_ids(self) -> list[int]:
        return self._handler.get_owned_region_ids()

    def unmap_region(self, region_id: int) -> bool:
        raise NotImplementedError("regions are unmapped by MaruHandler.close()")

    def close(self) -> None:
        """Nothing to do: the handler's close() unmaps."""
