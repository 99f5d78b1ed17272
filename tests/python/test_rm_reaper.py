# SPDX-License-Identifier: Apache-2.0
"""maru-resource-manager reaper: dead local processes and departed clients
lose their regions; a client that comes back within --grace-period keeps
them; owners recovered after a restart are reaped by the same rules."""
import os
import platform
import signal
import subprocess
import sys
import time

import rm_wire
from rm_wire import RmConn

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def used(r):
    p = rm_wire.stats(r.address)[0]
    return p.total_size - p.free_size


def wait_used(r, want, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if used(r) == want:
            return time.monotonic()
        time.sleep(0.1)
    assert used(r) == want


ALLOCATOR = r"""
import sys, time
import rm_wire
c = rm_wire.RmConn(sys.argv[1])          # client_id = <host>:<this pid>
r = c.alloc(int(sys.argv[2]))
assert r.status == 0
print(r.handle.region_id, flush=True)
if sys.argv[3] == "exit":
    sys.exit(0)                           # dies, connection closes
time.sleep(600)                           # killed by the test
"""


def spawn(r, size, mode):
    p = subprocess.Popen([sys.executable, "-c", ALLOCATOR, r.address,
                          str(size), mode], cwd=HERE, stdout=subprocess.PIPE)
    line = p.stdout.readline()
    assert line.strip().isdigit(), line
    return p


def test_dead_process_is_reaped(start_rm):
    # a long grace period: only the pid rule can reap this quickly
    r = start_rm(extra=["--grace-period", "300"])
    p = spawn(r, 3 * MiB, "exit")
    assert p.wait(30) == 0
    # well inside the 300 s grace period (the 1 s reaper tick, plus room
    # for a loaded machine)
    wait_used(r, 0, 60)
    assert "process gone" in r.log()
    # the reaper's work, counted (COUNTERS)
    with rm_wire.RmConn(r.address) as c:
        k = c.counters()
    assert (k["reaped_clients"], k["reaped_regions"]) == (1, 1), k
    assert k["reaped_bytes"] == 4 * MiB and k["frees"] == 1, k  # 2M-aligned
    assert k["allocs"] == 1 and k["regions"] == 0, k


def test_killed_process_is_reaped_even_as_zombie(start_rm):
    r = start_rm(extra=["--grace-period", "300"])
    p = spawn(r, 5 * MiB, "sleep")
    assert used(r) == 6 * MiB
    os.kill(p.pid, signal.SIGKILL)        # not waited for: a zombie
    wait_used(r, 0, 10)
    p.wait()


def test_live_client_keeps_regions(start_rm):
    r = start_rm(extra=["--grace-period", "1"])
    with RmConn(r.address) as c:          # this test process, connected
        c.alloc(MiB)
        time.sleep(3)
        assert used(r) == 2 * MiB


def test_grace_period(start_rm):
    r = start_rm(extra=["--grace-period", "3"])
    cid = "far-away-host:77"              # remote: only the grace rule
    c = RmConn(r.address, client_id=cid)
    h = c.alloc(MiB).handle
    c.close()
    time.sleep(0.5)
    # back inside the grace period: pinning (an authenticated connection
    # with the client id) cancels the timer
    c = RmConn(r.address, client_id=cid)
    c.auth()
    assert c.get_access(h).status == 0
    time.sleep(4.5)
    assert used(r) == 2 * MiB
    t0 = time.monotonic()
    c.close()
    wait_used(r, 0, 20)
    assert time.monotonic() - t0 >= 2.5   # not before the grace period
    assert "grace period expired" in r.log()


def test_grace_waits_for_the_last_connection(start_rm):
    """Upstream quirk fixed: closing one of two connections with the same
    client_id does not start the grace timer."""
    r = start_rm(extra=["--grace-period", "1"])
    cid = "far-away-host:78"
    a = RmConn(r.address, client_id=cid)
    b = RmConn(r.address, client_id=cid)
    a.alloc(MiB)
    assert b.stats()
    b.auth()                                      # pins b as well
    a.close()
    time.sleep(3)
    assert used(r) == 2 * MiB
    b.close()
    wait_used(r, 0, 10)


def dead_owner_across_a_restart(start_rm, hold):
    """An RM whose local owner died while it was down; it runs again."""
    r = start_rm(extra=["--grace-period", "300", "--recovered-hold", hold])
    p = spawn(r, MiB, "sleep")
    r.kill()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    r.start()
    return r


def test_recovered_owners_keep_a_default_hold(start_rm):
    """A hold is not in the WAL, so after a restart a dead owner
    keeps its regions for --recovered-hold (its clients may still write
    until they fence), then loses them."""
    r = dead_owner_across_a_restart(start_rm, "3")
    t0 = time.monotonic()
    time.sleep(1.5)
    assert used(r) == 2 * MiB
    wait_used(r, 0, 20)
    assert time.monotonic() - t0 >= 2.5


def test_owners_after_restart_are_reaped_by_grace(start_rm):
    # --recovered-hold 0: see test_dead_local_owner_after_restart_is_reaped
    r = start_rm(extra=["--grace-period", "4", "--recovered-hold", "0"])
    with RmConn(r.address, client_id="gone-host:1") as c:
        c.alloc(MiB)
    with RmConn(r.address, client_id="back-host:2") as c:
        hb = c.alloc(MiB).handle
    r.kill()
    r.start()
    assert used(r) == 4 * MiB
    with RmConn(r.address, client_id="back-host:2") as c:
        c.auth()                                 # back within the grace
        assert c.get_access(hb).status == 0
        wait_used(r, 2 * MiB, 20)                # gone-host is reaped
        time.sleep(1)
        assert used(r) == 2 * MiB
        assert c.free(hb) == 0


def test_dead_local_owner_after_restart_is_reaped(start_rm):
    # --recovered-hold 0: a recovered owner's hold is not in
    # the WAL, and by default one long enough for maru-server's clients
    # to fence is assumed
    r = dead_owner_across_a_restart(start_rm, "0")
    wait_used(r, 0, 10)
