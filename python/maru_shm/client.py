# SPDX-License-Identifier: Apache-2.0
"""MaruShmClient: upstream's resource-manager (RM) client, over libmaru.

The wire client is libmaru's (maru_rm_*, through maru_core._maru): one
persistent TCP connection, one request at a time, reconnect and retry once
on a broken connection with the same request id (process-global ids, so the
RM's idempotency cache answers a retry instead of executing it twice), client
id "<hostname>:<pid>".  A forked child gets a connection of its own.  What is
Python here is upstream's surface: MaruHandle / MaruPoolInfo values, its
exception messages, and the mmap cache.

mmap() maps a region read+write, shared, at the handle's offset.  The device
path comes from GET_ACCESS (or from the ALLOC reply); a UUID found in the
local device table (uuid -> local path, filled by the handler from
device_scanner.scan_dax_devices()) overrides the server's path, for hosts
that see the same CXL device under another name.
"""

import errno
import logging
import mmap as mmap_module
import os
import platform
import socket
import threading
from dataclasses import dataclass

from maru_core import lib

from .constants import (
    CONNECT_TIMEOUT_S,
    DEFAULT_ADDRESS,
    MAP_SHARED,
    PROT_READ,
    PROT_WRITE,
    RPC_TIMEOUT_S,
)
from .types import DaxType, MaruHandle, MaruPoolInfo

logger = logging.getLogger(__name__)

# transport failures that mean nobody (reachable) listens at the address
_NOT_RUNNING = (errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
                errno.ENETUNREACH, errno.EADDRNOTAVAIL)


def make_client_id() -> str:
    """The RM client id of this process: "<hostname>:<pid>"."""
    return f"{platform.node()}:{os.getpid()}"


def parse_address(address: str) -> tuple[str, int]:
    """Split "host:port" (host defaults to 127.0.0.1)."""
    host, _, port = address.rpartition(":")
    return (host or "127.0.0.1"), int(port)


@dataclass
class AccessResult:
    """GET_ACCESS: where to open a region."""

    status: int
    path: str
    offset: int
    length: int
    uuid: str


class MaruShmClient:
    """Client of the resource manager at @address ("host:port").

    @device_table maps device UUIDs to local paths; a reply whose UUID is in
    the table is opened under the local path.
    """

    def __init__(self, address: str | None = None,
                 device_table: dict[str, str] | None = None):
        self._address = address or DEFAULT_ADDRESS
        self._device_table = dict(device_table or {})
        self._rm = None  # _maru.RmClient of process @_rm_pid
        self._rm_pid = 0
        self._conn_lock = threading.Lock()  # @_rm, and its requests
        self._lock = threading.Lock()  # caches below
        self._paths: dict[int, str] = {}  # region_id -> path to open
        self._mmaps: dict[int, mmap_module.mmap] = {}  # region_id -> mapping

    @property
    def address(self) -> str:
        return self._address

    @property
    def client_id(self) -> str:
        return make_client_id()

    def is_running(self) -> bool:
        """True when something accepts TCP connections at the address."""
        try:
            host, port = parse_address(self._address)
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return True
        except (OSError, ValueError):
            return False

    def _request(self, context: str, op: str, *args):
        """RmClient.@op(*args), its failures as upstream raised them."""
        ext = lib()
        # held across the call (libmaru serialises requests anyway), so
        # that close() waits for it
        with self._conn_lock:
            if self._rm is None or self._rm_pid != os.getpid():
                self._rm = ext.RmClient(self._address, int(RPC_TIMEOUT_S * 1000))
                self._rm_pid = os.getpid()
            try:
                return getattr(self._rm, op)(*args)
            except ext.RmError as e:
                err, answered, msg = e.args
        if answered and msg:
            raise RuntimeError(f"{context} ({-err}): {msg}")
        if answered:
            raise RuntimeError(f"{context} with status {-err}")
        if err in _NOT_RUNNING:
            raise ConnectionError(f"Resource manager is not running (address: "
                                  f"{self._address}): {os.strerror(err)}")
        raise ConnectionError(f"resource manager at {self._address}: "
                              f"{os.strerror(err)}")

    def _local_path(self, path: str, uuid: str) -> str:
        if uuid and uuid in self._device_table:
            return self._device_table[uuid]
        return path

    # ------------------------------------------------------------------
    # requests
    # ------------------------------------------------------------------
    def stats(self) -> list[MaruPoolInfo]:
        """Every pool of the RM with its total and free bytes."""
        pools = []
        for path, t, total, free, align in self._request("Stats failed", "stats"):
            try:
                t = DaxType(t)
            except ValueError:
                pass
            pools.append(MaruPoolInfo(path, t, total, free, align))
        return pools

    def alloc(self, size: int, dax_path: str = "") -> MaruHandle:
        """Allocate a region of at least @size bytes (from pool @dax_path).

        Raises RuntimeError when the RM refuses.
        """
        rid, off, length, tok, _, path, uuid = self._request(
            "Alloc failed", "alloc", size, dax_path or "")
        if path:
            with self._lock:
                self._paths[rid] = self._local_path(path, uuid)
        return MaruHandle(rid, off, length, tok)

    def free(self, handle: MaruHandle) -> None:
        """Free a region this process allocated; also drops its mapping."""
        self._request("Free failed", "free", handle.region_id, handle.offset,
                      handle.length, handle.auth_token)
        with self._lock:
            self._forget_locked(handle.region_id)

    def get_access(self, handle: MaruHandle) -> AccessResult:
        """GET_ACCESS: where to open @handle's region."""
        path, off, length, uuid = self._request(
            "GetAccess failed", "get_access", handle.region_id, handle.offset,
            handle.length, handle.auth_token)
        return AccessResult(0, path, off, length, uuid)

    def mmap(self, handle: MaruHandle, prot: int = PROT_READ | PROT_WRITE,
             flags: int = MAP_SHARED) -> mmap_module.mmap:
        """Map @handle's region (cached per region id)."""
        with self._lock:
            mm = self._mmaps.get(handle.region_id)
            if mm is not None:
                return mm
            path = self._paths.get(handle.region_id)
        if path is None:
            res = self.get_access(handle)
            path = self._local_path(res.path, res.uuid)
        access = mmap_module.ACCESS_WRITE if prot & PROT_WRITE else mmap_module.ACCESS_READ
        oflags = os.O_RDWR if prot & PROT_WRITE else os.O_RDONLY
        fd = os.open(path, oflags)
        try:
            mm = mmap_module.mmap(fd, handle.length, access=access, offset=handle.offset)
        finally:
            os.close(fd)
        with self._lock:
            old = self._mmaps.get(handle.region_id)
            if old is not None:  # another thread won the race
                mm.close()
                return old
            self._paths[handle.region_id] = path
            self._mmaps[handle.region_id] = mm
        logger.debug("region %d: mapped %d bytes at %d of %s",
                     handle.region_id, handle.length, handle.offset, path)
        return mm

    def munmap(self, handle: MaruHandle) -> None:
        with self._lock:
            mm = self._mmaps.pop(handle.region_id, None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                logger.warning("region %d: mapping still exported, left to the GC",
                               handle.region_id)

    def _forget_locked(self, region_id: int) -> None:
        mm = self._mmaps.pop(region_id, None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass
        self._paths.pop(region_id, None)

    def close(self) -> None:
        """Close the connection and every mapping."""
        with self._conn_lock:
            if self._rm is not None:
                self._rm.close()
            self._rm = None
        with self._lock:
            for rid in list(self._mmaps):
                self._forget_locked(rid)
            self._paths.clear()

    def __enter__(self) -> "MaruShmClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
