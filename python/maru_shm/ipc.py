# SPDX-License-Identifier: Apache-2.0
"""Resource manager wire codec (resource-manager-protocol.md §1-4).

Pure functions: encoders return one whole message (12-byte little-endian
header + payload); decoders take a payload and raise ValueError when it is
too short.  Used by MaruShmClient and by tests that speak the protocol raw.
"""

import struct
from dataclasses import dataclass

from .constants import (
    MSG_ALLOC_REQ,
    MSG_FREE_REQ,
    MSG_GET_ACCESS_REQ,
    MSG_STATS_REQ,
    RM_HEADER_SIZE,
    RM_MAGIC,
    RM_VERSION,
)
from .types import HANDLE_SIZE, DaxType, MaruHandle, MaruPoolInfo

_HDR = struct.Struct("<IHHI")


def pack_header(msg_type: int, payload_len: int) -> bytes:
    return _HDR.pack(RM_MAGIC, RM_VERSION, msg_type, payload_len)


def unpack_header(data: bytes) -> tuple[int, int, int, int]:
    """Return (magic, version, type, payload_len)."""
    if len(data) < RM_HEADER_SIZE:
        raise ValueError("short header")
    return _HDR.unpack_from(data)


def _client_id_field(client_id: str) -> bytes:
    raw = client_id.encode("utf-8")
    return struct.pack("<H", len(raw)) + raw


def encode_alloc_req(size: int, dax_path: str, client_id: str, request_id: int) -> bytes:
    path = dax_path.encode("utf-8")
    payload = (
        struct.pack("<QII", size, len(path), 0)
        + path
        + _client_id_field(client_id)
        + struct.pack("<Q", request_id)
    )
    return pack_header(MSG_ALLOC_REQ, len(payload)) + payload


def encode_free_req(handle: MaruHandle, client_id: str, request_id: int) -> bytes:
    payload = handle.pack() + _client_id_field(client_id) + struct.pack("<Q", request_id)
    return pack_header(MSG_FREE_REQ, len(payload)) + payload


def encode_stats_req() -> bytes:
    return pack_header(MSG_STATS_REQ, 0)


def encode_get_access_req(handle: MaruHandle, client_id: str) -> bytes:
    payload = handle.pack()
    if client_id:
        payload += _client_id_field(client_id)
    return pack_header(MSG_GET_ACCESS_REQ, len(payload)) + payload


@dataclass
class AllocResult:
    status: int
    access_type: int
    handle: MaruHandle
    requested_size: int
    path: str
    uuid: str


@dataclass
class AccessResult:
    status: int
    path: str
    offset: int
    length: int
    uuid: str


def _need(data: bytes, n: int, what: str) -> None:
    if len(data) < n:
        raise ValueError(f"truncated {what}")


def decode_error_resp(data: bytes) -> tuple[int, str]:
    _need(data, 8, "error response")
    status, msg_len = struct.unpack_from("<iI", data)
    _need(data, 8 + msg_len, "error response")
    return status, data[8 : 8 + msg_len].decode("utf-8", "replace")


def decode_alloc_resp(data: bytes) -> AllocResult:
    _need(data, 52, "alloc response")
    status, access = struct.unpack_from("<iI", data)
    handle = MaruHandle.unpack(data[8 : 8 + HANDLE_SIZE])
    (req_size, path_len) = struct.unpack_from("<QI", data, 40)
    _need(data, 52 + path_len + 2, "alloc response")
    path = data[52 : 52 + path_len].decode("utf-8", "replace")
    (uuid_len,) = struct.unpack_from("<H", data, 52 + path_len)
    off = 54 + path_len
    _need(data, off + uuid_len, "alloc response")
    uuid = data[off : off + uuid_len].decode("utf-8", "replace")
    return AllocResult(status, access, handle, req_size, path, uuid)


def decode_free_resp(data: bytes) -> int:
    _need(data, 4, "free response")
    return struct.unpack_from("<i", data)[0]


def decode_stats_resp(data: bytes) -> list[MaruPoolInfo]:
    _need(data, 4, "stats response")
    (n,) = struct.unpack_from("<I", data)
    off = 4
    pools = []
    for _ in range(n):
        _need(data, off + 32, "stats record")
        path_len, dax_type, total, free, align = struct.unpack_from("<IIQQQ", data, off)
        off += 32
        _need(data, off + path_len, "stats record")
        path = data[off : off + path_len].decode("utf-8", "replace")
        off += path_len
        try:
            dt = DaxType(dax_type)
        except ValueError:
            dt = dax_type
        pools.append(MaruPoolInfo(path, dt, total, free, align))
    return pools


def decode_get_access_resp(data: bytes) -> AccessResult:
    _need(data, 8, "get_access response")
    status, path_len = struct.unpack_from("<iI", data)
    _need(data, 8 + path_len + 18, "get_access response")
    path = data[8 : 8 + path_len].decode("utf-8", "replace")
    offset, length, uuid_len = struct.unpack_from("<QQH", data, 8 + path_len)
    off = 26 + path_len
    _need(data, off + uuid_len, "get_access response")
    uuid = data[off : off + uuid_len].decode("utf-8", "replace")
    return AccessResult(status, path, offset, length, uuid)
