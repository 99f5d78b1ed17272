#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ttft_bench.py - time to first token with the prefix's KV cache from Maru
(shared index on and off), from Redis, or recomputed.

A small GPT-style decoder (PyTorch on the CPU, random weights from a fixed
seed: nothing is downloaded) serves a prompt in two processes:

  producer  prefills the whole prompt and stores its KV cache in chunks of
            CHUNK tokens the way LMCache does (a chunk: every layer's K and
            V for those tokens, float32, [layers, 2, CHUNK, d_model]; the
            key "vllm@<model>@1@0@<hash of the tokens up to the chunk's
            end>"), through Maru (MaruHandler.alloc/store, zero copy) and
            through Redis (SET);
  consumer  a fresh process that serves the same prompt: the first token
            from
              recompute  the whole prompt's forward pass,
              maru       the chunks' keys, exists() for each (LMCache's
                         lookup), MaruHandler.batch_retrieve ->
                         zero-copy views -> torch.frombuffer as the past
                         KV, the forward pass of the tail only,
              maru-rpc   the same with MARU_SHM_INDEX=0 (every lookup a
                         request),
              redis      EXISTS per chunk, then one MGET (copied), the
                         same forward pass of the tail;
            the first token must be the recomputed one (checked), and its
            time is the median of REPS runs; lookup_us is the part
            from the keys to the past KV (exists + fetch of the chunks).

Usage: ttft_bench.py --server URL --redis HOST:PORT [--lengths 512,1024,...]
       [--reps 5] [--out DIR]   (run_ttft_bench.sh starts the daemons)
Prints one line per (length, mode) and writes DIR/ttft.csv.
"""
import argparse
import csv
import hashlib
import math
import os
import statistics
import subprocess
import sys
import time

import torch

LAYERS, D, HEADS, VOCAB, CHUNK, TAIL = 4, 256, 4, 1024, 256, 16
MODEL = "maru-bench-gpt-4x256"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(4 * D, D))

    def forward(self, x, past):
        """x [T, D]; past (k, v) [P, D] or None -> y, (k, v) of all P+T"""
        t = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=1)
        if past is not None:
            k = torch.cat([past[0], k])
            v = torch.cat([past[1], v])
        p = k.shape[0] - t
        hd = D // HEADS
        qh = q.view(t, HEADS, hd).transpose(0, 1)           # [H, T, hd]
        kh = k.view(-1, HEADS, hd).transpose(0, 1)          # [H, P+T, hd]
        vh = v.view(-1, HEADS, hd).transpose(0, 1)
        att = qh @ kh.transpose(1, 2) / math.sqrt(hd)       # [H, T, P+T]
        mask = torch.ones(t, p + t, dtype=torch.bool).triu(p + 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ vh).transpose(0, 1).reshape(t, D)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1234)
        self.emb = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Embedding(8192, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)

    @torch.no_grad()
    def forward(self, tokens, past=None, start=0):
        x = self.emb(tokens) + self.pos(torch.arange(start, start +
                                                     len(tokens)))
        kv = []
        for i, b in enumerate(self.blocks):
            x, c = b(x, past[i] if past else None)
            kv.append(c)
        return self.head(self.ln(x[-1:])), kv


def prompt(n):
    g = torch.Generator().manual_seed(n)
    return torch.randint(0, VOCAB, (n,), generator=g)


def chunk_keys(tokens):
    """LMCache-style keys: one per full chunk, hashing the prefix."""
    keys, h = [], hashlib.sha256()
    for c in range(len(tokens) // CHUNK):
        h.update(tokens[c * CHUNK:(c + 1) * CHUNK].numpy().tobytes())
        keys.append(f"vllm@{MODEL}@1@0@{h.hexdigest()[:32]}")
    return keys


def chunk_tensor(kv, c):
    """[LAYERS, 2, CHUNK, D] of chunk c"""
    return torch.stack([torch.stack([k[c * CHUNK:(c + 1) * CHUNK],
                                     v[c * CHUNK:(c + 1) * CHUNK]])
                        for k, v in kv]).contiguous()


CHUNK_BYTES = LAYERS * 2 * CHUNK * D * 4


def past_from(buffers):
    """per layer (k, v) [P, D] from the chunks' buffers (zero copy views
    are wrapped, not copied; the cat joins the chunks)"""
    ts = [torch.frombuffer(b, dtype=torch.float32).view(LAYERS, 2, CHUNK, D)
          for b in buffers]
    return [(torch.cat([t[i, 0] for t in ts]), torch.cat([t[i, 1] for t in ts]))
            for i in range(LAYERS)]


def handler(url, index):
    from maru import MaruConfig, MaruHandler
    if not index:
        os.environ["MARU_SHM_INDEX"] = "0"
    h = MaruHandler(MaruConfig(server_url=url, pool_size=256 << 20,
                               chunk_size_bytes=CHUNK_BYTES,
                               auto_connect=False))
    assert h.connect(), h.connect_error
    os.environ.pop("MARU_SHM_INDEX", None)
    return h


def produce(args):
    import redis
    model = GPT()
    h = handler(args.server, True)
    r = redis.Redis(*args.redis.split(":"))
    for n in args.lengths:
        toks = prompt(n + TAIL)
        _, kv = model(toks[:n])
        for c, key in enumerate(chunk_keys(toks[:n])):
            t = chunk_tensor(kv, c)
            raw = t.numpy().tobytes()
            a = h.alloc(CHUNK_BYTES)
            a.buf[:] = raw
            assert h.store(key, a)
            r.set(key, raw)
    # the values stay after close (their region is kept for them)
    h.close()
    print("produced", args.lengths, flush=True)


def consume(args):
    import redis
    torch.set_num_threads(1)
    model = GPT()
    hi, hr = handler(args.server, True), handler(args.server, False)
    r = redis.Redis(*args.redis.split(":"))
    rows = []
    for n in args.lengths:
        toks = prompt(n + TAIL)
        want, _ = model(toks)                  # warm-up, and the answer
        first = int(want.argmax())

        def recompute():
            logits, _ = model(toks)
            return int(logits.argmax()), 0.0

        def from_maru(h):
            def run():
                # LMCache's order: contains() per chunk up to the first
                # miss (its lookup), then the chunks in one batch
                keys = chunk_keys(toks[:n])
                t0 = time.perf_counter()
                assert all(h.exists(k) for k in keys)
                infos = h.batch_retrieve(keys)
                t1 = time.perf_counter()
                assert all(i is not None for i in infos)
                past = past_from([i.view for i in infos])
                logits, _ = model(toks[n:], past, start=n)
                return int(logits.argmax()), t1 - t0
            return run

        def from_redis():
            keys = chunk_keys(toks[:n])
            t0 = time.perf_counter()
            assert all(r.exists(k) for k in keys)
            vals = r.mget(keys)
            t1 = time.perf_counter()
            assert all(v is not None for v in vals)
            past = past_from([bytearray(v) for v in vals])
            logits, _ = model(toks[n:], past, start=n)
            return int(logits.argmax()), t1 - t0

        modes = [("recompute", recompute), ("maru", from_maru(hi)),
                 ("maru-rpc", from_maru(hr)), ("redis", from_redis)]
        for name, fn in modes:
            fn()                               # warm (maps the regions)
            ts, ls = [], []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                tok, lookup = fn()
                ts.append(time.perf_counter() - t0)
                ls.append(lookup)
                assert tok == first, (name, n, tok, first)
            med = statistics.median(ts) * 1000
            lk = statistics.median(ls) * 1e6
            rows.append({"tokens": n + TAIL, "mode": name,
                         "ttft_ms": f"{med:.2f}",
                         "lookup_us": f"{lk:.1f}",
                         "chunks": n // CHUNK})
            print(f"tokens={n + TAIL} mode={name} ttft_ms={med:.2f} "
                  f"min_ms={min(ts) * 1000:.2f} lookup_us={lk:.1f}",
                  flush=True)
    st = hi.index_stats()
    print(f"index local_hits={st['local_hits']} fallbacks={st['fallbacks']}")
    hi.close()
    hr.close()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ttft.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--redis", required=True)
    ap.add_argument("--lengths", default="256,512,1024,2048",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=".")
    ap.add_argument("--role", default="both")
    args = ap.parse_args()
    for n in args.lengths:
        assert n % CHUNK == 0, "lengths are whole chunks (the tail is added)"
    if args.role == "producer":
        produce(args)
    elif args.role == "consumer":
        consume(args)
    else:
        base = [sys.executable, __file__, "--server", args.server,
                "--redis", args.redis, "--lengths",
                ",".join(map(str, args.lengths)), "--reps", str(args.reps),
                "--out", args.out]
        subprocess.run(base + ["--role", "producer"], check=True)
        subprocess.run(base + ["--role", "consumer"], check=True)


if __name__ == "__main__":
    main()
