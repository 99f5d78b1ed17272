# SPDX-License-Identifier: Apache-2.0
"""Message serialization: 16-byte header + MessagePack map.

Serializer.encode() numbers requests from 1 (one counter per serializer,
thread-safe).  Decoding to dataclasses is lenient like upstream's: unknown
keys are ignored, missing keys take the dataclass default, nested handles
and records become MaruHandle / dataclass objects.
"""

import dataclasses
import threading
import typing
from typing import Any, TypeVar

import msgpack

from maru_shm.types import MaruHandle, MaruPoolInfo

from .protocol import (
    HEADER_SIZE,
    MESSAGE_CLASSES,
    PROTOCOL_MAGIC,
    PROTOCOL_VERSION,
    MessageFlags,
    MessageHeader,
    MessageType,
)

T = TypeVar("T")

_hints_cache: dict[type, dict[str, Any]] = {}


def _to_serializable(obj: Any) -> Any:
    """Dataclasses and objects with to_dict() -> plain msgpack-able values."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _to_serializable(getattr(obj, f.name))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: _to_serializable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_serializable(v) for v in obj]
    return obj


def _convert(tp: Any, value: Any) -> Any:
    """Turn a decoded msgpack value into an instance of type hint @tp."""
    if value is None:
        return None
    if tp is MaruHandle:
        return MaruHandle.from_dict(value) if isinstance(value, dict) else value
    if tp is MaruPoolInfo:
        return MaruPoolInfo.from_dict(value) if isinstance(value, dict) else value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value) if isinstance(value, dict) else value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and args and isinstance(value, list):
        return [_convert(args[0], v) for v in value]
    if args and origin is not list:  # Optional/Union: first dataclass-ish member
        for a in args:
            if a is type(None):
                continue
            if a is MaruHandle or (isinstance(a, type) and dataclasses.is_dataclass(a)):
                return _convert(a, value)
    return value


def from_dict(data_class: type[T], data: dict) -> T:
    """Build @data_class from @data with defaults for missing keys."""
    hints = _hints_cache.get(data_class)
    if hints is None:
        hints = typing.get_type_hints(data_class)
        _hints_cache[data_class] = hints
    kwargs = {}
    for f in dataclasses.fields(data_class):
        if not f.init:
            continue
        if f.name in data:
            kwargs[f.name] = _convert(hints.get(f.name), data[f.name])
        elif (f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING):
            raise ValueError(f"{data_class.__name__}: missing field {f.name!r}")
    return data_class(**kwargs)


class Serializer:
    """Encodes requests/responses and decodes them back."""

    def __init__(self) -> None:
        self._seq = 0
        self._seq_lock = threading.Lock()

    def _next_seq(self) -> int:
        """1, 2, ... 2^32-1, then 1 again (the header field is a u32)."""
        with self._seq_lock:
            self._seq = self._seq % 0xFFFFFFFF + 1
            return self._seq

    def _encode_raw(self, msg_type: int, data: Any, flags: int = MessageFlags.NONE,
                    seq: int | None = None) -> bytes:
        payload_dict = _to_serializable(data) if data is not None else {}
        if not isinstance(payload_dict, dict):
            payload_dict = {"value": payload_dict}
        payload = msgpack.packb(payload_dict, use_bin_type=True)
        header = MessageHeader(
            msg_type=int(msg_type),
            flags=int(flags),
            sequence=self._next_seq() if seq is None else seq,
            payload_length=len(payload),
        )
        return header.pack() + payload

    def encode(self, msg_type: MessageType, data: Any,
               flags: int = MessageFlags.NONE, seq: int | None = None) -> bytes:
        """Header + MessagePack payload for one message."""
        return self._encode_raw(msg_type, data, flags, seq)

    def encode_response(self, request_header: MessageHeader, data: Any) -> bytes:
        """A response echoing the request's flags and sequence."""
        return self._encode_raw(int(request_header.msg_type) | MessageType.RESPONSE,
                                data, request_header.flags, request_header.sequence)

    def decode(self, data: bytes) -> tuple[MessageHeader, dict]:
        """(header, payload dict); ValueError for a malformed message."""
        if len(data) < HEADER_SIZE:
            raise ValueError(f"Message too short: {len(data)} bytes")
        header = MessageHeader.unpack(data)
        if header.magic != PROTOCOL_MAGIC:
            raise ValueError(f"Invalid magic number: 0x{header.magic:04X}")
        if header.version != PROTOCOL_VERSION:
            raise ValueError(f"Unsupported protocol version: {header.version}")
        end = HEADER_SIZE + header.payload_length
        if len(data) < end:
            raise ValueError(
                f"Payload truncated: {len(data) - HEADER_SIZE} < {header.payload_length}"
            )
        payload = msgpack.unpackb(data[HEADER_SIZE:end], raw=False)
        if not isinstance(payload, dict):
            raise ValueError("Payload is not a map")
        return header, payload

    def decode_request(self, data: bytes) -> tuple[MessageHeader, Any]:
        header, payload = self.decode(data)
        if header.msg_type not in MESSAGE_CLASSES:
            raise ValueError(f"Unknown message type: 0x{header.msg_type:02X}")
        req_cls, _ = MESSAGE_CLASSES[header.msg_type]
        return header, from_dict(req_cls, payload)

    def decode_response(self, data: bytes) -> tuple[MessageHeader, Any]:
        header, payload = self.decode(data)
        t = header.msg_type
        if t in MESSAGE_CLASSES:
            _, resp_cls = MESSAGE_CLASSES[t]
        elif MessageType.get_request_type(t) in MESSAGE_CLASSES:
            _, resp_cls = MESSAGE_CLASSES[MessageType.get_request_type(t)]
        else:
            raise ValueError(f"Unknown message type: 0x{t:02X}")
        return header, from_dict(resp_cls, payload)

    def decode_as(self, data: bytes, data_class: type[T]) -> tuple[MessageHeader, T]:
        header, payload = self.decode(data)
        return header, from_dict(data_class, payload)


def create_serializer() -> Serializer:
    """A new serializer (its own sequence counter)."""
    return Serializer()
