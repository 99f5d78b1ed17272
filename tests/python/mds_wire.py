# SPDX-License-Identifier: Apache-2.0
"""mds_wire - an independent raw-frame client of the metadata protocol
(docs/protocol.md §2, with its additions), for tests.

Frames are built by hand: the 16-byte big-endian header with `struct`,
payloads with python3-msgpack, sockets with python3-zmq.  Nothing here
shares code with the C server or with our client library, so the tests
check the wire format against a second reading of docs/protocol.md §2.

    c = ReqClient(mds.url)
    h, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": 1 << 20})
    assert h.seq == c.last_seq and r["success"]

    d = DealerClient(mds.url)             # pipelined, out-of-order safe
    seqs = [d.send(EXISTS_KV, {"key": k}) for k in keys]
    replies = d.collect(seqs)             # {seq: (hdr, obj)}

Raw access for malformed-input tests: frame(...) builds any header
(bad magic, wrong length ...), ReqClient.call_raw(body) and
DealerClient.send_frames([...]) send arbitrary bytes/frames.
"""
import itertools
import struct
from dataclasses import dataclass

import msgpack
import zmq

MAGIC = 0xCF00
VERSION = 1
HDR = struct.Struct(">HBBB3xII")

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


@dataclass
class Hdr:
    magic: int
    version: int
    type: int
    flags: int
    seq: int
    length: int


def pack(obj):
    """MessagePack the way Python clients do (str as str, bytes as bin)."""
    return msgpack.packb(obj, use_bin_type=True)


def frame(mtype, obj=None, seq=1, flags=0, payload=None, magic=MAGIC,
          version=VERSION, length=None):
    """One body frame: header + payload (obj packed, or raw payload bytes)."""
    if payload is None:
        payload = pack({} if obj is None else obj)
    if length is None:
        length = len(payload)
    return HDR.pack(magic, version, mtype, flags, seq, length) + payload


def parse(body):
    """(Hdr, obj) of a reply body; strict like the Python clients."""
    assert len(body) >= HDR.size, f"short reply: {body!r}"
    h = Hdr(*HDR.unpack_from(body))
    assert h.magic == MAGIC and h.version == VERSION, h
    payload = body[HDR.size:HDR.size + h.length]
    assert len(payload) == h.length, "reply shorter than its header says"
    assert len(body) == HDR.size + h.length, "bytes after the payload"
    obj = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    return h, obj


def resp_type(mtype):
    return mtype | 0x80


def set_curve(sock, curve):
    """CURVE client options on a libzmq socket: @curve is (server public
    key, our public key, our secret key), Z85, or None for NULL."""
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve


class ReqClient:
    """A REQ socket in lock-step, like upstream's sync RpcClient."""

    def __init__(self, url, timeout_ms=10000, ctx=None, curve=None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        set_curve(self.sock, curve)
        self.sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        self.sock.connect(url)
        self._seq = itertools.count(1)
        self.last_seq = 0

    def call_raw(self, body):
        self.sock.send(body)
        return self.sock.recv()

    def call(self, mtype, obj=None, **kw):
        self.last_seq = next(self._seq)
        h, r = parse(self.call_raw(frame(mtype, obj, seq=self.last_seq, **kw)))
        assert h.seq == self.last_seq, (h, self.last_seq)
        assert h.type == resp_type(mtype), (hex(h.type), hex(mtype))
        return h, r

    def close(self):
        self.sock.close(0)


class DealerClient:
    """A DEALER with up to N requests in flight, like RpcAsyncClient:
    sends [b"", body], matches replies by sequence only."""

    def __init__(self, url, identity=None, ctx=None, timeout_ms=10000,
                 curve=None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        set_curve(self.sock, curve)
        if identity is not None:
            self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(url)
        self.timeout_ms = timeout_ms
        self._seq = itertools.count(1)

    def send(self, mtype, obj=None, **kw):
        seq = next(self._seq)
        self.sock.send_multipart([b"", frame(mtype, obj, seq=seq, **kw)])
        return seq

    def send_frames(self, frames):
        self.sock.send_multipart(frames)

    def recv_frames(self, timeout_ms=None):
        if not self.sock.poll(timeout_ms or self.timeout_ms):
            raise TimeoutError("no reply")
        return self.sock.recv_multipart()

    def recv(self, timeout_ms=None):
        frames = self.recv_frames(timeout_ms)
        return parse(frames[-1])

    def collect(self, seqs):
        """Replies for every sequence in seqs, in any arrival order."""
        want, got = set(seqs), {}
        while want:
            h, r = self.recv()
            assert h.seq in want, f"unexpected seq {h.seq}"
            want.discard(h.seq)
            got[h.seq] = (h, r)
        return got

    def call(self, mtype, obj=None):
        seq = self.send(mtype, obj)
        h, r = self.collect([seq])[seq]
        assert h.type == resp_type(mtype)
        return h, r

    def close(self):
        self.sock.close(0)


def handle_of(r):
    """The handle map of a REQUEST_ALLOC reply, checked for exact keys."""
    h = r["handle"]
    assert set(h) == {"region_id", "offset", "length", "auth_token"}, h
    assert all(isinstance(v, int) and v >= 0 for v in h.values()), h
    return h
