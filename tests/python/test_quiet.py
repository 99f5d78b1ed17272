# SPDX-License-Identifier: Apache-2.0
"""Logs at the level a library and a daemon should: a handler's connect is
its one INFO line (its expansions and its close are DEBUG), and a routine
restart of maru-server -- workers map its regions again -- makes the
resource manager warn about nothing."""
import os
import subprocess
import sys

WORKER = r"""
import sys
from maru import MaruConfig, MaruHandler
h = MaruHandler(MaruConfig(server_url=sys.argv[1], pool_size=2 << 20,
                           chunk_size_bytes=1 << 20, auto_connect=False,
                           timeout_ms=10000))
assert h.connect(), h.connect_error
for i in range(4):      # more than the first region: an expansion
    a = h.alloc(100)
    assert h.store(f"q{i}", a)
assert h.retrieve("q0") is not None
h.close()
"""


def run_worker(url):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MARU_LOG_LEVEL", "LMCACHE_LOG_LEVEL")}
    return subprocess.run([sys.executable, "-c", WORKER, url], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_handler_logs_one_line(mds):
    p = run_worker(mds.url)
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "maru INFO: connected to" in lines[0], \
        p.stderr


def test_routine_restart_warns_about_nothing(rm, mds):
    assert run_worker(mds.url).returncode == 0
    mds.stop()
    mds.start()
    p = run_worker(mds.url)          # maps the regions of before again
    assert p.returncode == 0, p.stderr
    warned = [l for l in rm.log().splitlines()
              if " warn " in l or " error " in l or "WARN" in l]
    assert not warned, warned
