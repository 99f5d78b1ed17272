# SPDX-License-Identifier: Apache-2.0
"""MaruShmClient: pure-Python client of the resource manager (RM).

One persistent TCP connection per client object, strictly one request then
one response, serialised by a lock (the RM processes one request per
connection at a time).  On a broken connection the client reconnects and
retries the request once; ALLOC and FREE carry a process-global request id
so the RM answers a retried request from its idempotency cache instead of
executing it twice.

mmap() maps a region read+write, shared, at the handle's offset.  The device
path comes from GET_ACCESS (or from the ALLOC reply); a UUID found in the
local device table (uuid -> local path, filled by the handler from
device_scanner.scan_dax_devices()) overrides the server's path, for hosts
that see the same CXL device under another name.
"""

import itertools
import logging
import mmap as mmap_module
import os
import platform
import socket
import threading

from . import ipc
from .constants import (
    CONNECT_TIMEOUT_S,
    DEFAULT_ADDRESS,
    MAP_SHARED,
    MSG_ERROR_RESP,
    PROT_READ,
    PROT_WRITE,
    RM_HEADER_SIZE,
    RM_MAGIC,
    RM_VERSION,
    RPC_TIMEOUT_S,
)
from .types import MaruHandle, MaruPoolInfo

logger = logging.getLogger(__name__)

# Process-global request ids, from 1 (RM spec §5).
_request_ids = itertools.count(1)
_request_ids_lock = threading.Lock()


def _next_request_id() -> int:
    with _request_ids_lock:
        return next(_request_ids)


def make_client_id() -> str:
    """The RM client id of this process: "<hostname>:<pid>"."""
    return f"{platform.node()}:{os.getpid()}"


def parse_address(address: str) -> tuple[str, int]:
    """Split "host:port" (host defaults to 127.0.0.1)."""
    host, _, port = address.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ConnectionError("resource manager closed the connection")
        got += r
    return bytes(buf)


class MaruShmClient:
    """Client of the resource manager at @address ("host:port").

    @device_table maps device UUIDs to local paths; a reply whose UUID is in
    the table is opened under the local path.
    """

    def __init__(self, address: str | None = None,
                 device_table: dict[str, str] | None = None):
        self._address = address or DEFAULT_ADDRESS
        self._device_table = dict(device_table or {})
        self._sock: socket.socket | None = None
        self._sock_pid = 0
        self._conn_lock = threading.Lock()  # one request/response at a time
        self._lock = threading.Lock()  # caches below
        self._paths: dict[int, str] = {}  # region_id -> path to open
        self._mmaps: dict[int, mmap_module.mmap] = {}  # region_id -> mapping

    @property
    def address(self) -> str:
        return self._address

    @property
    def client_id(self) -> str:
        return make_client_id()

    # ------------------------------------------------------------------
    # connection
    # ------------------------------------------------------------------
    def is_running(self) -> bool:
        """True when something accepts TCP connections at the address."""
        try:
            host, port = parse_address(self._address)
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return True
        except (OSError, ValueError):
            return False

    def _connect_locked(self) -> socket.socket:
        if self._sock is not None and self._sock_pid == os.getpid():
            return self._sock
        self._drop_locked()
        host, port = parse_address(self._address)
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise ConnectionError(
                f"Resource manager is not running (address: {self._address}): {e}"
            ) from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(RPC_TIMEOUT_S)
        self._sock = sock
        self._sock_pid = os.getpid()
        return sock

    def _drop_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None

    def _rpc(self, message: bytes) -> tuple[int, bytes]:
        """Send one whole message, return (response type, payload).

        Reconnects and retries once when the connection breaks.
        """
        with self._conn_lock:
            for attempt in (0, 1):
                sock = self._connect_locked()
                try:
                    sock.sendall(message)
                    hdr = _recv_exact(sock, RM_HEADER_SIZE)
                    magic, version, mtype, plen = ipc.unpack_header(hdr)
                    if magic != RM_MAGIC or version != RM_VERSION:
                        raise ConnectionError(
                            f"bad response header: magic=0x{magic:08X} version={version}"
                        )
                    payload = _recv_exact(sock, plen) if plen else b""
                    return mtype, payload
                except (OSError, ConnectionError):
                    self._drop_locked()
                    if attempt == 1:
                        raise
        raise AssertionError("unreachable")

    @staticmethod
    def _check_error(mtype: int, payload: bytes, context: str) -> None:
        if mtype == MSG_ERROR_RESP:
            status, msg = ipc.decode_error_resp(payload)
            raise RuntimeError(f"{context} ({status}): {msg}")

    def _local_path(self, path: str, uuid: str) -> str:
        if uuid and uuid in self._device_table:
            return self._device_table[uuid]
        return path

    # ------------------------------------------------------------------
    # requests
    # ------------------------------------------------------------------
    def stats(self) -> list[MaruPoolInfo]:
        """Every pool of the RM with its total and free bytes."""
        mtype, payload = self._rpc(ipc.encode_stats_req())
        self._check_error(mtype, payload, "Stats failed")
        return ipc.decode_stats_resp(payload)

    def alloc(self, size: int, dax_path: str = "") -> MaruHandle:
        """Allocate a region of at least @size bytes (from pool @dax_path).

        Raises RuntimeError when the RM refuses.
        """
        msg = ipc.encode_alloc_req(size, dax_path, make_client_id(), _next_request_id())
        mtype, payload = self._rpc(msg)
        self._check_error(mtype, payload, "Alloc failed")
        res = ipc.decode_alloc_resp(payload)
        if res.status != 0:
            raise RuntimeError(f"Alloc failed with status {res.status}")
        if res.path:
            with self._lock:
                self._paths[res.handle.region_id] = self._local_path(res.path, res.uuid)
        return res.handle

    def free(self, handle: MaruHandle) -> None:
        """Free a region this process allocated; also drops its mapping."""
        msg = ipc.encode_free_req(handle, make_client_id(), _next_request_id())
        mtype, payload = self._rpc(msg)
        self._check_error(mtype, payload, "Free failed")
        status = ipc.decode_free_resp(payload)
        if status != 0:
            raise RuntimeError(f"Free failed with status {status}")
        with self._lock:
            self._forget_locked(handle.region_id)

    def get_access(self, handle: MaruHandle) -> ipc.AccessResult:
        """GET_ACCESS: where to open @handle's region."""
        msg = ipc.encode_get_access_req(handle, make_client_id())
        mtype, payload = self._rpc(msg)
        self._check_error(mtype, payload, "GetAccess failed")
        res = ipc.decode_get_access_resp(payload)
        if res.status != 0:
            raise RuntimeError(f"GetAccess failed with status {res.status}")
        return res

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
            self._drop_locked()
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
