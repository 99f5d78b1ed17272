# SPDX-License-Identifier: Apache-2.0
"""The main job, `./dev.sh demo` (scripts/demo.sh), run as a first user
runs it, on the binaries already built: both daemons on an emulated pool,
a KV chunk stored by one process and read in place by another through the
shared index.  It must succeed, say what it did, and leave nothing behind:
no process, no pool file, no shared-index file on /dev/shm.
"""
import os
import re
import subprocess

from conftest import BUILD_DIR, REPO

DEMO = os.path.join(REPO, "scripts", "demo.sh")


def run_demo(**env):
    e = dict(os.environ, BUILD_DIR=BUILD_DIR, **env)
    e.pop("MARU_DEMO_PORT", None)  # 9850 / 5555 when free, else any
    return subprocess.run(["bash", DEMO], capture_output=True, text=True,
                          env=e, timeout=300)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def leftovers(out):
    """what the demo said it made, and is still there"""
    files = re.findall(r"pool file (/dev/shm/\S+)", out) + \
        re.findall(r"shared index (/dev/shm/\S+)", out)
    pids = [int(p) for p in re.findall(r"ready: pid (\d+)", out)]
    assert files and pids, out           # the demo names them
    return [f for f in files if os.path.exists(f)] + \
        [p for p in pids if alive(p)]


def test_demo_shares_a_chunk_through_the_index_and_cleans_up():
    p = run_demo()
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "==> done" in out
    assert ": the same bytes" in out and "DIFFERENT" not in out
    assert "looked up in the shared index, no request" in out
    assert "--shm-index-path /dev/shm/maru-demo-" in out
    assert leftovers(out) == []


def test_demo_without_the_index_asks_the_server():
    # the reader's words follow what happened, not the script
    p = run_demo(MARU_SHM_INDEX="0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "looked up with a request to maru-server" in p.stdout
    assert ": the same bytes" in p.stdout
    assert leftovers(p.stdout) == []
