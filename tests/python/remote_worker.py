# SPDX-License-Identifier: Apache-2.0
"""A worker on the "remote host" of test_remote.py: a process in another
network namespace, with a /dev/shm of its own (no pool file, no shared
index), driven one JSON command per line on stdin, one JSON answer per
line on stdout.

Values are made from their key, so that any reader can check any bytes it
gets: value(key, size) below, shared with the test.
"""
import hashlib
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def value(key, size, salt=""):
    """The bytes stored under @key: SHA-256 in counter mode, @size long."""
    seed = hashlib.sha256(f"{salt}{key}".encode()).digest()
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(seed + i.to_bytes(8, "little")).digest()
        i += 1
    return bytes(out[:size])


def digest(b):
    return hashlib.sha256(b).hexdigest()


def main():
    # the answers get a descriptor of their own: libraries (UCX) may print
    # to stdout, which now goes to stderr
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from maru_common.config import MaruConfig
    from maru_handler import MaruHandler

    h = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        out = {}
        t0 = time.monotonic()
        try:
            if op == "connect":
                h = MaruHandler(MaruConfig(**cmd["config"]))
                out["connected"] = bool(h.connect())
                out["remote"] = h.is_remote if out["connected"] else None
                out["sees_pool"] = os.path.exists(cmd.get("pool", "/nonexistent"))
                out["error"] = "" if out["connected"] else h.connect_error
            elif op == "store":
                data = value(cmd["key"], cmd["size"], cmd.get("salt", ""))
                a = h.alloc(cmd["size"])
                a.buf[:] = data
                out["ok"] = bool(h.store(cmd["key"], a))
            elif op == "retrieve":
                info = h.retrieve(cmd["key"])
                out["found"] = info is not None
                if info is not None:
                    out["sha"] = digest(bytes(info.view))
                    out["len"] = len(info.view)
            elif op == "batch_store":
                hs = []
                for k in cmd["keys"]:
                    a = h.alloc(cmd["size"])
                    a.buf[:] = value(k, cmd["size"], cmd.get("salt", ""))
                    hs.append(a)
                out["ok"] = [bool(x) for x in h.batch_store(cmd["keys"], hs)]
            elif op == "batch_retrieve":
                infos = h.batch_retrieve(cmd["keys"])
                out["sha"] = [digest(bytes(i.view)) if i is not None else None
                              for i in infos]
            elif op in ("exists", "pin", "unpin", "delete"):
                out["ok"] = bool(getattr(h, op)(cmd["key"]))
            elif op == "stats":
                out["stats"] = h.remote_stats()
            elif op == "lmcache":
                out.update(lmcache_put(cmd))
            elif op == "close":
                h.close()
                h = None
            else:
                out["error"] = f"unknown op {op}"
        except Exception as e:  # the test reads the cause
            out["exception"] = f"{type(e).__name__}: {e}"
            out["trace"] = traceback.format_exc()
        out["ms"] = (time.monotonic() - t0) * 1000
        answers.write(json.dumps(out) + "\n")
        answers.flush()
    if h is not None:
        h.close()


def lmcache_put(cmd):
    """What LMCache's MaruBackend does on a remote host: its handler (from
    MaruConfig with no agent field: MARU_AGENT_URL says it) and the
    adapter; stores @n chunks and reads them back."""
    sys.path.insert(0, os.path.join(HERE, "lmcache_stub"))
    import torch
    from lmcache.v1.memory_management import MemoryFormat
    from maru import MaruConfig, MaruHandler
    from maru_lmcache import CxlMemoryAdapter

    shape = torch.Size(cmd["shape"])
    dtype = torch.float16
    chunk = shape.numel() * 2
    h = MaruHandler(MaruConfig(server_url=cmd["url"], pool_size=8 * chunk,
                               chunk_size_bytes=chunk, auto_connect=False,
                               timeout_ms=5000, eager_map=True))
    if not h.connect():
        return {"error": h.connect_error}
    try:
        ad = CxlMemoryAdapter(handler=h, shapes=[shape], dtypes=[dtype],
                              fmt=MemoryFormat.KV_2LTD,
                              chunk_size=h.get_chunk_size())
        objs = ad.batched_allocate(shape, dtype, cmd["n"], MemoryFormat.KV_2LTD)
        shas = []
        for i, o in enumerate(objs):
            g = torch.Generator().manual_seed(i)
            o.tensor.copy_(torch.randint(0, 250, shape, generator=g,
                                         dtype=torch.int32).to(dtype))
            shas.append(digest(o.tensor.numpy().tobytes()))
        keys = [f"{cmd['prefix']}@{i}" for i in range(cmd["n"])]
        ok = h.batch_store(keys, [ad.create_store_handle(o) for o in objs])
        back = [digest(bytes(i.view)) if i is not None else None
                for i in h.batch_retrieve(keys)]
        return {"ok": [bool(x) for x in ok], "sha": shas, "back": back,
                "remote": h.is_remote}
    finally:
        h.close()


if __name__ == "__main__":
    main()
