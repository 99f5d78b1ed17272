# SPDX-License-Identifier: Apache-2.0
"""bench/trace_replay.py, the replay of a real KV-cache trace
(docs/trace-replay.md):

  - its simulations reproduce the trace README's yardsticks on the whole
    conversation trace (one LRU of 10 % of the distinct blocks: 27.8 % of
    block references; four round-robin private LRUs of a quarter each:
    11.6 %; no bound: 36.6 %) -- the check that the replay's prefix-hit
    semantics are the README's;
  - a block's content check sees one wrong byte;
  - a replay of a cut of the trace on real daemons, with a pool small
    enough that eviction runs all along, reads back no wrong byte, has
    no failed store or allocation, hits, and leaves no process or
    /dev/shm file behind;
  - interrupted (Ctrl+C, SIGTERM) in the middle, it stops everything it
    started and removes its files.

The trace is the one in bench/traces/ (the tool's default).
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, wait_until

sys.path.insert(0, os.path.join(REPO, "bench"))
import trace_replay  # noqa: E402

TRACE = trace_replay.DEFAULT_TRACE
TOOL = os.path.join(REPO, "bench", "trace_replay.py")


def test_simulation_reproduces_the_readme():
    """The trace README's figures, from the tool's own functions; the
    simulations of the whole trace take well under a second."""
    reqs = trace_replay.load_trace(TRACE)
    refs, distinct = trace_replay.trace_counts(reqs)
    assert (len(reqs), refs, distinct) == (12031, 288500, 182790)
    seqs = [ids for _, ids in reqs]
    cap = int(0.10 * distinct)
    owner = trace_replay.route(reqs, 4, "rr", 0)
    t = time.monotonic()
    glob = 100.0 * trace_replay.simulate(seqs, cap) / refs
    priv = 100.0 * trace_replay.simulate(seqs, cap, owner, 4) / refs
    assert time.monotonic() - t < 10
    top = 100.0 * trace_replay.simulate(seqs, 1 << 62) / refs
    assert abs(glob - 27.8) <= 0.2, glob
    assert abs(priv - 11.6) <= 0.2, priv
    assert abs(top - 36.6) <= 0.1, top


def test_block_check_sees_one_wrong_byte():
    bb = 4096
    ramp = np.arange(bb // 8, dtype=np.uint64)
    good = (ramp + trace_replay.block_tag(7, bb)).tobytes()
    assert trace_replay.check_block(memoryview(good), 7, bb, ramp) == 0
    bad = bytearray(good)
    bad[1234] ^= 0x40
    assert trace_replay.check_block(memoryview(bad), 7, bb, ramp) == 1
    assert trace_replay.check_block(memoryview(good), 8, bb, ramp) > 0
    assert trace_replay.check_block(memoryview(good[:-8]), 7, bb, ramp) == 8


def started_things(out):
    """(pids, /dev/shm paths) the tool said it started, from its log."""
    pids, paths = [], []
    m = re.search(r"resource manager pid (\d+) pool (\S+); maru-server pid "
                  r"(\d+) \S+ index (\S+)", out)
    if m:
        pids += [int(m.group(1)), int(m.group(3))]
        paths += [m.group(2), m.group(4)]
    m = re.search(r"worker pids ([\d ]+)", out)
    if m:
        pids += [int(p) for p in m.group(1).split()]
    return pids, paths


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_all_gone(out):
    pids, paths = started_things(out)
    assert pids and paths, out
    assert wait_until(lambda: not any(alive(p) for p in pids), timeout=10), \
        [p for p in pids if alive(p)]
    assert not [p for p in paths if os.path.exists(p)]


def tool_env():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MARU_RM_KEY_FILE", None)     # the tool's own RM, its own key
    return env


def test_replay_of_a_cut_is_right_and_clean():
    """600 requests, two workers, a pool of 20 % of their distinct blocks
    (11 regions of 4 MiB: eviction from the third second on, some 13 000
    keys evicted)."""
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, TOOL, TRACE, "--cut", "600", "--workers", "2",
         "--pool-fraction", "0.2", "--strict"],
        capture_output=True, text=True, timeout=120, env=tool_env())
    took = time.monotonic() - t
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    res = dict(kv.split("=", 1) for kv in line.split()[1:])
    assert int(res["wrong_bytes"]) == 0
    assert int(res["failed_stores"]) == 0
    assert int(res["failed_allocs"]) == 0
    assert float(res["hit_rate"]) > 0
    assert int(res["evictions"]) > 0
    assert int(res["requests"]) == 600
    assert_all_gone(out)
    assert took < 90, took


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_replay_cleans_up(sig):
    """Stopped while it replays (paced, so that it is still running), the
    tool stops its workers and daemons and removes its files."""
    p = subprocess.Popen(
        [sys.executable, TOOL, TRACE, "--cut", "600", "--workers", "2",
         "--paced", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=tool_env())
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if line.startswith("replaying:"):
                break
        time.sleep(1.0)
        p.send_signal(sig)
        rest, _ = p.communicate(timeout=60)
        out.append(rest)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(out)
    assert p.returncode == 130, text
    assert "interrupted" in text
    assert_all_gone(text)
