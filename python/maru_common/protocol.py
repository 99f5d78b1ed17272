# SPDX-License-Identifier: Apache-2.0
"""Metadata server protocol: header, message codes, payload dataclasses.

Every body frame is a 16-byte big-endian header followed by a MessagePack
map (docs/protocol.md §2).  The dataclasses below describe the
payloads; maru_common.serializer turns them into bytes and back.
"""

import struct
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

from maru_shm.types import MaruHandle

PROTOCOL_MAGIC = 0xCF00
PROTOCOL_VERSION = 1
HEADER_SIZE = 16
HEADER_FORMAT = "!HBBB3xII"  # magic, version, type, flags, reserved, seq, len
_HEADER = struct.Struct(HEADER_FORMAT)


class MessageType(IntEnum):
    """Message codes; a response is the request code | RESPONSE."""

    REQUEST_ALLOC = 0x01
    RETURN_ALLOC = 0x03
    LIST_ALLOCATIONS = 0x04

    REGISTER_KV = 0x10
    LOOKUP_KV = 0x11
    EXISTS_KV = 0x12
    DELETE_KV = 0x13
    PIN_KV = 0x14
    UNPIN_KV = 0x15

    BATCH_REGISTER_KV = 0x20
    BATCH_LOOKUP_KV = 0x21
    BATCH_EXISTS_KV = 0x22
    BATCH_PIN_KV = 0x23
    BATCH_UNPIN_KV = 0x24

    GET_STATS = 0xF0
    HEARTBEAT = 0xF1
    REPORT_STATS = 0xF2
    GET_USAGE = 0xF3
    HANDSHAKE = 0xFE
    SHUTDOWN = 0xFF

    RESPONSE = 0x80

    @classmethod
    def is_response(cls, msg_type: int) -> bool:
        return bool(msg_type & cls.RESPONSE)

    @classmethod
    def get_request_type(cls, msg_type: int) -> int:
        return msg_type & ~cls.RESPONSE & 0xFF


class MessageFlags(IntFlag):
    """Header flag bits: defined, never set by clients, echoed by servers."""

    NONE = 0x00
    BATCH = 0x01
    COMPRESSED = 0x02
    URGENT = 0x04
    NO_REPLY = 0x08


@dataclass
class MessageHeader:
    """The 16-byte frame header (network byte order)."""

    magic: int = PROTOCOL_MAGIC
    version: int = PROTOCOL_VERSION
    msg_type: int = 0
    flags: int = MessageFlags.NONE
    sequence: int = 0
    payload_length: int = 0

    def pack(self) -> bytes:
        return _HEADER.pack(self.magic, self.version, int(self.msg_type),
                            int(self.flags), self.sequence, self.payload_length)

    @classmethod
    def unpack(cls, data: bytes) -> "MessageHeader":
        if len(data) < HEADER_SIZE:
            raise ValueError(f"Header too short: {len(data)} < {HEADER_SIZE}")
        m, v, t, f, s, n = _HEADER.unpack_from(data)
        return cls(magic=m, version=v, msg_type=t, flags=f, sequence=s, payload_length=n)

    def validate(self) -> bool:
        return self.magic == PROTOCOL_MAGIC and self.version == PROTOCOL_VERSION


# ---------------------------------------------------------------------------
# Allocation management (0x01-0x0F)
# ---------------------------------------------------------------------------
@dataclass
class RequestAllocRequest:
    instance_id: str
    size: int
    lease_id: str = ""


@dataclass
class RequestAllocResponse:
    success: bool = False
    handle: MaruHandle | None = None
    error: str | None = None


@dataclass
class ReturnAllocRequest:
    instance_id: str
    region_id: int


@dataclass
class ReturnAllocResponse:
    success: bool = False
    error: str | None = None


@dataclass
class ListAllocationsRequest:
    exclude_instance_id: str | None = None


@dataclass
class ListAllocationsResponse:
    success: bool = False
    allocations: list[MaruHandle] = field(default_factory=list)
    error: str | None = None


# ---------------------------------------------------------------------------
# KV operations (0x10-0x1F).  Keys are str or int, never converted.
# ---------------------------------------------------------------------------
@dataclass
class RegisterKVRequest:
    key: str | int
    region_id: int
    kv_offset: int
    kv_length: int


@dataclass
class RegisterKVResponse:
    success: bool = False
    is_new: bool = False


@dataclass
class LookupKVRequest:
    key: str | int


@dataclass
class LookupKVResponse:
    found: bool = False
    handle: MaruHandle | None = None
    kv_offset: int = 0
    kv_length: int = 0


@dataclass
class ExistsKVRequest:
    key: str | int


@dataclass
class ExistsKVResponse:
    exists: bool = False


@dataclass
class DeleteKVRequest:
    key: str | int


@dataclass
class DeleteKVResponse:
    success: bool = False


@dataclass
class PinKVRequest:
    key: str | int


@dataclass
class PinKVResponse:
    exists: bool = False


@dataclass
class UnpinKVRequest:
    key: str | int


@dataclass
class UnpinKVResponse:
    success: bool = False


# ---------------------------------------------------------------------------
# Batch operations (0x20-0x2F)
# ---------------------------------------------------------------------------
@dataclass
class BatchKVEntry:
    key: str | int
    region_id: int
    kv_offset: int
    kv_length: int


@dataclass
class BatchRegisterKVRequest:
    entries: list[BatchKVEntry] = field(default_factory=list)


@dataclass
class BatchRegisterKVResponse:
    success: bool = False
    results: list[bool] = field(default_factory=list)


@dataclass
class BatchLookupKVRequest:
    keys: list = field(default_factory=list)


@dataclass
class LookupResult:
    found: bool = False
    handle: MaruHandle | None = None
    kv_offset: int = 0
    kv_length: int = 0


@dataclass
class BatchLookupKVResponse:
    entries: list[LookupResult] = field(default_factory=list)


@dataclass
class BatchExistsKVRequest:
    keys: list = field(default_factory=list)


@dataclass
class BatchExistsKVResponse:
    results: list[bool] = field(default_factory=list)


@dataclass
class BatchPinKVRequest:
    keys: list = field(default_factory=list)


@dataclass
class BatchPinKVResponse:
    results: list[bool] = field(default_factory=list)


@dataclass
class BatchUnpinKVRequest:
    keys: list = field(default_factory=list)


@dataclass
class BatchUnpinKVResponse:
    results: list[bool] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Admin (0xF0-0xFF)
# ---------------------------------------------------------------------------
@dataclass
class GetStatsRequest:
    pass


@dataclass
class KVManagerStats:
    total_entries: int = 0
    total_size: int = 0


@dataclass
class AllocationManagerStats:
    num_allocations: int = 0
    total_allocated: int = 0
    active_clients: int = 0


@dataclass
class GetStatsResponse:
    kv_manager: KVManagerStats = field(default_factory=KVManagerStats)
    allocation_manager: AllocationManagerStats = field(
        default_factory=AllocationManagerStats
    )
    stats_manager: dict = field(default_factory=dict)
    cxl_pool: dict = field(default_factory=dict)


@dataclass
class GetUsageRequest:
    pass


@dataclass
class InstanceUsage:
    instance_id: str = ""
    regions: int = 0
    allocated: int = 0
    used: int = 0
    devices: list = field(default_factory=list)


@dataclass
class GetUsageResponse:
    instances: list[InstanceUsage] = field(default_factory=list)
    pool_total: int = 0
    pool_free: int = 0
    error: str | None = None


@dataclass
class HeartbeatRequest:
    instance_id: str = ""
    lease_id: str = ""
    lease_release: bool = False


@dataclass
class HeartbeatResponse:
    lease_ttl: float = 0.0
    lease_expired: bool = False


@dataclass
class ReportStatsRequest:
    entries: list = field(default_factory=list)


@dataclass
class ReportStatsResponse:
    success: bool = False


@dataclass
class HandshakeRequest:
    client_version: int = PROTOCOL_VERSION
    instance_id: str | None = None


@dataclass
class HandshakeResponse:
    success: bool = False
    server_version: int = PROTOCOL_VERSION
    rm_address: str | None = None
    error: str | None = None


@dataclass
class ShutdownRequest:
    pass


@dataclass
class ShutdownResponse:
    success: bool = False


MESSAGE_CLASSES = {
    MessageType.REQUEST_ALLOC: (RequestAllocRequest, RequestAllocResponse),
    MessageType.RETURN_ALLOC: (ReturnAllocRequest, ReturnAllocResponse),
    MessageType.LIST_ALLOCATIONS: (ListAllocationsRequest, ListAllocationsResponse),
    MessageType.REGISTER_KV: (RegisterKVRequest, RegisterKVResponse),
    MessageType.LOOKUP_KV: (LookupKVRequest, LookupKVResponse),
    MessageType.EXISTS_KV: (ExistsKVRequest, ExistsKVResponse),
    MessageType.DELETE_KV: (DeleteKVRequest, DeleteKVResponse),
    MessageType.PIN_KV: (PinKVRequest, PinKVResponse),
    MessageType.UNPIN_KV: (UnpinKVRequest, UnpinKVResponse),
    MessageType.BATCH_REGISTER_KV: (BatchRegisterKVRequest, BatchRegisterKVResponse),
    MessageType.BATCH_LOOKUP_KV: (BatchLookupKVRequest, BatchLookupKVResponse),
    MessageType.BATCH_EXISTS_KV: (BatchExistsKVRequest, BatchExistsKVResponse),
    MessageType.BATCH_PIN_KV: (BatchPinKVRequest, BatchPinKVResponse),
    MessageType.BATCH_UNPIN_KV: (BatchUnpinKVRequest, BatchUnpinKVResponse),
    MessageType.GET_STATS: (GetStatsRequest, GetStatsResponse),
    MessageType.GET_USAGE: (GetUsageRequest, GetUsageResponse),
    MessageType.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    MessageType.REPORT_STATS: (ReportStatsRequest, ReportStatsResponse),
    MessageType.HANDSHAKE: (HandshakeRequest, HandshakeResponse),
    MessageType.SHUTDOWN: (ShutdownRequest, ShutdownResponse),
}
