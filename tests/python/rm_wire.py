# SPDX-License-Identifier: Apache-2.0
"""rm_wire - a small, independent pure-Python client of the resource
manager's TCP protocol v2 (docs/protocol.md §1), written with
`struct` only, for tests.

It does not share code with the C codec on purpose: the tests check the
daemon against a second implementation of docs/protocol.md §1.

    with RmConn("127.0.0.1:9850", client_id="host:123") as c:
        r = c.alloc(4 << 20)            # AllocResp
        assert r.status == 0
        c.get_access(r.handle)          # GetAccessResp
        c.free(r.handle)                # status int
        c.stats()                       # [PoolStat, ...]

ALLOC and FREE authenticate the connection first (AUTH_REQ, see
src/common/rm_auth.h) when the connection has a key: by default the one
registered in KEYS for its address (conftest registers every resource
manager it starts); RmConn(addr, key=None) sends without.  The MACs come
from Python's hmac module: an independent peer for the C code.

Raw access for malformed-input tests: c.send_raw(bytes), c.recv_msg() ->
(type, payload), msg(type, payload) builds a frame, and the encode_*
functions build payloads.
"""
import hashlib
import hmac
import os
import platform
import socket
import struct
from dataclasses import dataclass

MAGIC = 0x4D415255
VERSION = 2
HDR = struct.Struct("<IHHI")

ALLOC_REQ, ALLOC_RESP = 1, 2
FREE_REQ, FREE_RESP = 3, 4
STATS_REQ, STATS_RESP = 5, 6
COUNTERS_REQ, COUNTERS_RESP = 13, 14  # an addition
OWNERS_REQ, OWNERS_RESP = 15, 16      # an addition: owners, who is away
RELEASE_REQ, RELEASE_RESP = 17, 18    # an addition: free an absent owner's
HOLD_UNTIL_BACK = 0xFFFFFFFF          # AUTH hold_ms: until we come back
GET_ACCESS_REQ, GET_ACCESS_RESP = 9, 10
AUTH_REQ, AUTH_RESP = 11, 12
ERROR_RESP = 255

EPERM, ENOENT, EIO, ENOMEM, EACCES = 1, 2, 5, 12, 13
ENODEV, EINVAL, ENOSYS, EPROTO, EMSGSIZE = 19, 22, 38, 71, 90

DEV_DAX, FS_DAX = 0, 1

_next_request_id = 1

KEYS = {}        # "host:port" -> the resource manager's client key (bytes)
_AUTO = object()


def load_key(path):
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def auth_mac(key, role, cn, sn, client_id):
    """The AUTH proof of @role (b"S" or b"C"), as rm_auth.h defines it."""
    return hmac.new(key, b"maru-rm-auth-1" + role + cn + sn +
                    client_id.encode(), hashlib.sha256).digest()


def default_client_id():
    return f"{platform.node()}:{os.getpid()}"


@dataclass(frozen=True)
class Handle:
    region_id: int
    offset: int
    length: int
    auth_token: int

    def pack(self):
        return struct.pack("<QQQQ", self.region_id, self.offset, self.length,
                           self.auth_token)

    @classmethod
    def unpack(cls, b):
        return cls(*struct.unpack_from("<QQQQ", b))

    def replace(self, **kw):
        d = dict(region_id=self.region_id, offset=self.offset,
                 length=self.length, auth_token=self.auth_token)
        d.update(kw)
        return Handle(**d)


@dataclass
class AllocResp:
    status: int
    access_type: int
    handle: Handle
    requested_size: int
    path: str
    uuid: str
    raw: bytes = b""


@dataclass
class GetAccessResp:
    status: int
    path: str
    offset: int
    length: int
    uuid: str


@dataclass
class PoolStat:
    path: str
    dax_type: int
    total_size: int
    free_size: int
    align_bytes: int


class RmError(Exception):
    """An ERROR_RESP (type 255)."""

    def __init__(self, status, message):
        super().__init__(f"ERROR_RESP {status}: {message}")
        self.status = status
        self.message = message


def msg(mtype, payload=b"", magic=MAGIC, version=VERSION, length=None):
    """One frame; magic/version/length can be forged for tests."""
    n = len(payload) if length is None else length
    return HDR.pack(magic, version, mtype, n) + payload


def encode_client_id(client_id):
    if client_id is None:
        return b""
    b = client_id.encode() if isinstance(client_id, str) else client_id
    return struct.pack("<H", len(b)) + b


def encode_alloc(size, dax_path="", client_id=None, request_id=None):
    p = dax_path.encode() if isinstance(dax_path, str) else dax_path
    out = struct.pack("<QII", size, len(p), 0) + p + encode_client_id(client_id)
    if request_id is not None:
        out += struct.pack("<Q", request_id)
    return out


def encode_free(handle, client_id=None, request_id=None):
    out = handle.pack() + encode_client_id(client_id)
    if request_id is not None:
        out += struct.pack("<Q", request_id)
    return out


def encode_get_access(handle, client_id=None):
    return handle.pack() + encode_client_id(client_id)


def decode_alloc_resp(p):
    status, access = struct.unpack_from("<iI", p)
    handle = Handle.unpack(p[8:40])
    (req,) = struct.unpack_from("<Q", p, 40)
    (plen,) = struct.unpack_from("<I", p, 48)
    path = p[52:52 + plen].decode()
    (ulen,) = struct.unpack_from("<H", p, 52 + plen)
    uuid = p[54 + plen:54 + plen + ulen].decode()
    assert len(p) == 54 + plen + ulen, "ALLOC_RESP has trailing bytes"
    return AllocResp(status, access, handle, req, path, uuid, bytes(p))


def decode_get_access_resp(p):
    status, plen = struct.unpack_from("<iI", p)
    path = p[8:8 + plen].decode()
    off, length = struct.unpack_from("<QQ", p, 8 + plen)
    (ulen,) = struct.unpack_from("<H", p, 24 + plen)
    uuid = p[26 + plen:26 + plen + ulen].decode()
    assert len(p) == 26 + plen + ulen, "GET_ACCESS_RESP has trailing bytes"
    return GetAccessResp(status, path, off, length, uuid)


def decode_stats_resp(p):
    (n,) = struct.unpack_from("<I", p)
    off, pools = 4, []
    for _ in range(n):
        plen, dtype, total, free, align = struct.unpack_from("<IIQQQ", p, off)
        path = p[off + 32:off + 32 + plen].decode()
        pools.append(PoolStat(path, dtype, total, free, align))
        off += 32 + plen
    assert off == len(p), "STATS_RESP has trailing bytes"
    return pools


def decode_counters_resp(p):
    """{name: value} of COUNTERS_RESP: u32 n, then u8 len, name, u64."""
    (n,) = struct.unpack_from("<I", p)
    off, out = 4, {}
    for _ in range(n):
        k = p[off]
        assert 1 <= k <= 63, k
        name = p[off + 1:off + 1 + k].decode("ascii")
        (out[name],) = struct.unpack_from("<Q", p, off + 1 + k)
        off += 1 + k + 8
    assert off == len(p), "COUNTERS_RESP has trailing bytes"
    return out


def decode_owners_resp(p):
    """[{id, regions, connections, bytes, hold_ms, away_since}] of
    OWNERS_RESP: u32 n, u32 omitted, then per owner u16 id_len, id, u32
    regions, u32 connections, u64 bytes, u32 hold_ms, u32 0, u64
    away_since."""
    n, omitted = struct.unpack_from("<II", p)
    off, out = 8, []
    for _ in range(n):
        (k,) = struct.unpack_from("<H", p, off)
        oid = p[off + 2:off + 2 + k].decode()
        regions, conns, nbytes, hold, zero, away = struct.unpack_from(
            "<IIQIIQ", p, off + 2 + k)
        assert zero == 0
        out.append({"id": oid, "regions": regions, "connections": conns,
                    "bytes": nbytes, "hold_ms": hold, "away_since": away})
        off += 2 + k + 32
    assert off == len(p), "OWNERS_RESP has trailing bytes"
    return out


def decode_error(p):
    status, n = struct.unpack_from("<iI", p)
    return status, p[8:8 + n].decode(errors="replace")


class RmConn:
    """One TCP connection; strictly one request, then one response."""

    def __init__(self, address, client_id=None, timeout=10.0, key=_AUTO):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = default_client_id() if client_id is None else client_id
        if key is _AUTO:
            # conftest's registry, else (a child process) the env var
            key = KEYS.get(address)
            if key is None and os.environ.get("MARU_RM_KEY_FILE"):
                key = load_key(os.environ["MARU_RM_KEY_FILE"])
        self.key = key
        self.authed = False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- raw frames --
    def send_raw(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def recv_msg(self):
        """(type, payload) of the next response; checks magic and version."""
        magic, version, mtype, n = HDR.unpack(self.recv_exact(HDR.size))
        assert magic == MAGIC and version == VERSION, (hex(magic), version)
        return mtype, self.recv_exact(n)

    def recv_raw_msg(self):
        """The next whole response frame as bytes (header included)."""
        h = self.recv_exact(HDR.size)
        return h + self.recv_exact(HDR.unpack(h)[3])

    def call(self, mtype, payload, want):
        self.send_raw(msg(mtype, payload))
        rtype, p = self.recv_msg()
        if rtype == ERROR_RESP:
            raise RmError(*decode_error(p))
        assert rtype == want, f"response type {rtype}, expected {want}"
        return p

    def is_closed(self, timeout=10.0):
        """True if the server closed this connection (EOF or reset);
        False if it is still open after @timeout (generous: the daemon
        closes at once, but a loaded machine may run it late)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def auth(self, key=None, check_server=True, hold_ms=0, reader=False):
        """The AUTH exchange; raises RmError when refused.  @hold_ms:
        keep our regions that long after we are gone; @reader: @key is a
        reader.key."""
        key = key or self.key
        cn = os.urandom(32)
        p = self.call(AUTH_REQ, struct.pack("<BB2x", 1, int(reader)) + cn +
                      encode_client_id(self.client_id) +
                      (struct.pack("<I", hold_ms) if hold_ms else b""),
                      AUTH_RESP)
        status, sn, proof = struct.unpack("<i", p[:4])[0], p[4:36], p[36:68]
        assert status == 0 and len(p) == 68, (status, len(p))
        if check_server:
            assert hmac.compare_digest(
                proof, auth_mac(key, b"S", cn, sn, self.client_id)), \
                "the resource manager does not know our key"
        p = self.call(AUTH_REQ, struct.pack("<B3x", 2) +
                      auth_mac(key, b"C", cn, sn, self.client_id), AUTH_RESP)
        assert p == bytes(68)
        self.authed = True

    def _auth_first(self):
        if self.key and not self.authed:
            self.auth()

    # -- requests --
    @staticmethod
    def _rid(request_id):
        """Like the Python client: a process-global counter from 1."""
        global _next_request_id
        if request_id is None:
            request_id = _next_request_id
            _next_request_id += 1
        return request_id

    def alloc(self, size, dax_path="", request_id=None, client_id=None):
        cid = self.client_id if client_id is None else client_id
        self._auth_first()
        p = self.call(ALLOC_REQ,
                      encode_alloc(size, dax_path, cid, self._rid(request_id)),
                      ALLOC_RESP)
        return decode_alloc_resp(p)

    def free(self, handle, request_id=None, client_id=None):
        cid = self.client_id if client_id is None else client_id
        self._auth_first()
        p = self.call(FREE_REQ, encode_free(handle, cid, self._rid(request_id)),
                      FREE_RESP)
        assert len(p) == 4
        return struct.unpack("<i", p)[0]

    def get_access(self, handle, client_id=None):
        cid = self.client_id if client_id is None else client_id
        p = self.call(GET_ACCESS_REQ,
                      encode_get_access(handle, cid or None), GET_ACCESS_RESP)
        return decode_get_access_resp(p)

    def stats(self):
        return decode_stats_resp(self.call(STATS_REQ, b"", STATS_RESP))

    def counters(self):
        return decode_counters_resp(self.call(COUNTERS_REQ, b"", COUNTERS_RESP))

    def owners(self):
        return decode_owners_resp(self.call(OWNERS_REQ, b"", OWNERS_RESP))

    def release(self, owner):
        """RELEASE_REQ: (status, regions, bytes); authenticates first."""
        self._auth_first()
        p = self.call(RELEASE_REQ, encode_client_id(owner), RELEASE_RESP)
        assert len(p) == 16
        return struct.unpack("<iIQ", p)


def stats(address):
    with RmConn(address) as c:
        return c.stats()


def owners(address):
    with RmConn(address) as c:
        return c.owners()
