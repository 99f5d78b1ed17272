# SPDX-License-Identifier: Apache-2.0
"""maru_common protocol + serializer and maru_shm types/codec (no daemon)."""
import struct

import msgpack
import pytest

from maru_common import (
    HEADER_SIZE,
    PROTOCOL_MAGIC,
    PROTOCOL_VERSION,
    BatchLookupKVResponse,
    GetStatsResponse,
    LookupKVResponse,
    MessageFlags,
    MessageHeader,
    MessageType,
    RegisterKVRequest,
    create_serializer,
)
from maru_shm import DaxType, MaruHandle, MaruPoolInfo


def test_constants():
    assert (PROTOCOL_MAGIC, PROTOCOL_VERSION, HEADER_SIZE) == (0xCF00, 1, 16)
    assert MessageType.REQUEST_ALLOC == 0x01 and MessageType.HANDSHAKE == 0xFE
    assert MessageType.BATCH_UNPIN_KV == 0x24 and MessageType.GET_USAGE == 0xF3
    assert MessageFlags.NO_REPLY == 0x08
    assert MessageType.get_request_type(0x92) == 0x12
    assert MessageType.is_response(0x92) and not MessageType.is_response(0x12)


def test_worked_example_exists_kv():
    # docs/protocol.md §2: EXISTS_KV for "k1", sequence 1
    s = create_serializer()
    req = s.encode(MessageType.EXISTS_KV, {"key": "k1"})
    assert req.hex() == "cf000112000000000000000100000008" + "81a36b6579a26b31"
    hdr, payload = s.decode(req)
    assert (hdr.msg_type, hdr.sequence, payload) == (0x12, 1, {"key": "k1"})
    resp = s.encode_response(hdr, {"exists": True})
    assert resp.hex() == "cf000192000000000000000100000009" + "81a6657869737473c3"
    assert s.encode(MessageType.HEARTBEAT, {})[HEADER_SIZE:] == b"\x80"
    assert s.decode(s.encode(MessageType.HEARTBEAT, {}))[0].sequence == 3


def test_header_roundtrip_and_validation():
    h = MessageHeader(msg_type=0x21, flags=MessageFlags.BATCH, sequence=0xDEADBEEF,
                      payload_length=7)
    raw = h.pack()
    assert len(raw) == 16 and raw[5:8] == b"\0\0\0"
    assert MessageHeader.unpack(raw) == h and h.validate()
    assert not MessageHeader(magic=0xCF01).validate()
    s = create_serializer()
    with pytest.raises(ValueError):
        s.decode(b"\xcf\x00")
    bad = bytearray(s.encode(MessageType.HEARTBEAT, {}))
    bad[0] = 0
    with pytest.raises(ValueError):
        s.decode(bytes(bad))
    trunc = s.encode(MessageType.EXISTS_KV, {"key": "abc"})[:-1]
    with pytest.raises(ValueError):
        s.decode(trunc)


def test_keys_keep_their_type_and_u64_handles():
    s = create_serializer()
    for key in ("42", 42, 2**64 - 1):
        _, p = s.decode(s.encode(MessageType.LOOKUP_KV, {"key": key}))
        assert p["key"] == key and type(p["key"]) is type(key)
    tok = 2**64 - 3
    h = MaruHandle(region_id=7, offset=2 << 20, length=4 << 20, auth_token=tok)
    raw = s.encode(MessageType.LOOKUP_KV | 0x80, {"found": True, "handle": h,
                                                 "kv_offset": 5, "kv_length": 9})
    # the token is emitted as msgpack uint64 (0xcf), never as a negative int64
    assert b"\xcf" + struct.pack(">Q", tok) in raw
    _, resp = s.decode_response(raw)
    assert isinstance(resp, LookupKVResponse)
    assert resp.found and resp.handle == h and resp.kv_length == 9


def test_decode_typed_responses_with_defaults():
    s = create_serializer()
    _, r = s.decode_response(s.encode(0xA1, {"entries": [
        {"found": False},
        {"found": True, "handle": {"region_id": 1, "offset": 0, "length": 2,
                                    "auth_token": 3}, "kv_offset": 4, "kv_length": 5},
    ]}))
    assert isinstance(r, BatchLookupKVResponse)
    assert [e.found for e in r.entries] == [False, True]
    assert r.entries[1].handle.region_id == 1
    _, st = s.decode_response(s.encode(MessageType.GET_STATS, {"kv_manager": {
        "total_entries": 3}, "extra": 1}))
    assert isinstance(st, GetStatsResponse)
    assert st.kv_manager.total_entries == 3 and st.kv_manager.total_size == 0
    _, req = s.decode_request(s.encode(MessageType.REGISTER_KV, RegisterKVRequest(
        key=9, region_id=1, kv_offset=0, kv_length=10)))
    assert req == RegisterKVRequest(key=9, region_id=1, kv_offset=0, kv_length=10)
    with pytest.raises(ValueError):
        s.decode_request(s.encode(MessageType.REGISTER_KV, {"key": "x"}))


def test_maru_handle():
    h = MaruHandle(1, 2 << 20, 4 << 20, 0xFFFF_FFFF_FFFF_FFFE)
    raw = h.pack()
    assert raw == struct.pack("<QQQQ", 1, 2 << 20, 4 << 20, 0xFFFF_FFFF_FFFF_FFFE)
    assert MaruHandle.unpack(raw) == h
    d = h.to_dict()
    assert set(d) == {"region_id", "offset", "length", "auth_token"}
    assert MaruHandle.from_dict(d) == h
    with pytest.raises(KeyError):
        MaruHandle.from_dict({"region_id": 1, "offset": 0, "length": 1})
    assert str(0xFFFF_FFFF_FFFF_FFFE) not in repr(h) and "auth_token" in repr(h)
    assert MaruHandle() == MaruHandle(0, 0, 0, 0)


def test_pool_info_and_dax_type():
    assert DaxType.DEV_DAX == 0 and DaxType.FS_DAX == 1
    p = MaruPoolInfo("/dev/dax0.0", DaxType.FS_DAX, 10, 5, 2 << 20)
    assert MaruPoolInfo.from_dict(p.to_dict()) == p


def test_payload_is_msgpack_map_with_str_keys():
    s = create_serializer()
    raw = s.encode(MessageType.REQUEST_ALLOC, {"instance_id": "a", "size": 10})
    assert msgpack.unpackb(raw[16:]) == {"instance_id": "a", "size": 10}
