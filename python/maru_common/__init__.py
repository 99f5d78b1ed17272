# SPDX-License-Identifier: Apache-2.0
"""maru_common: configuration, logging and the metadata server protocol."""

from .logging_setup import setup_package_logging

setup_package_logging("maru_common")

from .config import MaruConfig  # noqa: E402
from .protocol import (  # noqa: E402
    HEADER_SIZE,
    MESSAGE_CLASSES,
    PROTOCOL_MAGIC,
    PROTOCOL_VERSION,
    AllocationManagerStats,
    BatchExistsKVRequest,
    BatchExistsKVResponse,
    BatchKVEntry,
    BatchLookupKVRequest,
    BatchLookupKVResponse,
    BatchPinKVRequest,
    BatchPinKVResponse,
    BatchRegisterKVRequest,
    BatchRegisterKVResponse,
    BatchUnpinKVRequest,
    BatchUnpinKVResponse,
    DeleteKVRequest,
    DeleteKVResponse,
    ExistsKVRequest,
    ExistsKVResponse,
    GetStatsRequest,
    GetStatsResponse,
    GetUsageRequest,
    GetUsageResponse,
    HandshakeRequest,
    HandshakeResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InstanceUsage,
    KVManagerStats,
    ListAllocationsRequest,
    ListAllocationsResponse,
    LookupKVRequest,
    LookupKVResponse,
    LookupResult,
    MessageFlags,
    MessageHeader,
    MessageType,
    PinKVRequest,
    PinKVResponse,
    RegisterKVRequest,
    RegisterKVResponse,
    ReportStatsRequest,
    ReportStatsResponse,
    RequestAllocRequest,
    RequestAllocResponse,
    ReturnAllocRequest,
    ReturnAllocResponse,
    ShutdownRequest,
    ShutdownResponse,
    UnpinKVRequest,
    UnpinKVResponse,
)
from .serializer import Serializer, create_serializer  # noqa: E402

__all__ = [name for name in dir() if not name.startswith("_")]
