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
from maru_shm import ipc


def test_constants():
    assert (PROTOCOL_MAGIC, PROTOCOL_VERSION, HEADER_SIZE) == (0xCF00, 1, 16)
    assert MessageType.REQUEST_ALLOC == 0x01 and MessageType.HANDSHAKE == 0xFE
    assert MessageType.BATCH_UNPIN_KV == 0x24 and MessageType.GET_USAGE == 0xF3
    assert MessageFlags.NO_REPLY == 0x08
    assert MessageType.get_request_type(0x92) == 0x12
    assert MessageType.is_response(0x92) and not MessageType.is_response(0x12)


def test_worked_example_exists_kv():
    # metadata-protocol.md §2: EXISTS_KV for "k1", sequence 1
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


def test_rm_codec_roundtrip():
    msg = ipc.encode_alloc_req(4096, "/dev/dax1.0", "host:12", 7)
    magic, ver, mtype, plen = ipc.unpack_header(msg)
    assert (magic, ver, mtype, plen) == (0x4D415255, 2, 1, len(msg) - 12)
    assert msg[:4] == b"URAM"
    size, plen_path, _ = struct.unpack_from("<QII", msg, 12)
    assert (size, plen_path) == (4096, 11)
    assert msg[12 + 16:12 + 16 + 11] == b"/dev/dax1.0"
    assert msg[12 + 27:12 + 29] == struct.pack("<H", 7)
    assert msg[-8:] == struct.pack("<Q", 7)

    h = MaruHandle(3, 4 << 20, 2 << 20, 99)
    body = (struct.pack("<iI", 0, 0) + h.pack() + struct.pack("<QI", 1000, 4)
            + b"/x/y" + struct.pack("<H", 3) + b"abc")
    r = ipc.decode_alloc_resp(body)
    assert (r.status, r.handle, r.requested_size, r.path, r.uuid) == (0, h, 1000, "/x/y", "abc")
    with pytest.raises(ValueError):
        ipc.decode_alloc_resp(body[:-1])
    st = struct.pack("<I", 1) + struct.pack("<IIQQQ", 3, 1, 100, 50, 2 << 20) + b"/mp"
    assert ipc.decode_stats_resp(st) == [MaruPoolInfo("/mp", DaxType.FS_DAX, 100, 50, 2 << 20)]
    ga = (struct.pack("<iI", 0, 2) + b"/p" + struct.pack("<QQH", 8, 16, 0))
    a = ipc.decode_get_access_resp(ga)
    assert (a.path, a.offset, a.length, a.uuid) == ("/p", 8, 16, "")
    er = struct.pack("<iI", -13, 5) + b"nope!"
    assert ipc.decode_error_resp(er) == (-13, "nope!")


def test_payload_is_msgpack_map_with_str_keys():
    s = create_serializer()
    raw = s.encode(MessageType.REQUEST_ALLOC, {"instance_id": "a", "size": 10})
    assert msgpack.unpackb(raw[16:]) == {"instance_id": "a", "size": 10}
