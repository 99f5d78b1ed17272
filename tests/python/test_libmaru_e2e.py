# SPDX-License-Identifier: Apache-2.0
"""libmaru (C API) end to end against the real daemons.

Each test starts maru-resource-manager (emulated pool on /dev/shm) and
maru-server through the conftest fixtures, then runs one scenario of the C
driver tests/unit/test_libmaru_e2e.c or the example program maru-example.
The C code does the checking; a scenario exits 0 only when every check
passed (77 = cannot run here, reported as a skip).
"""
import os
import signal
import subprocess
import time

import pytest

from conftest import binary

DRIVER = ("tests", "test_libmaru_e2e")
EXAMPLE = ("examples", "maru-example")
MiB = 1 << 20


def run(argv, timeout=120, expect=0):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode == 77:
        pytest.skip(f"{argv[1]}: cannot run here\n{p.stderr}")
    assert p.returncode == expect, (
        f"{argv} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p.stdout


def scenario(name, url, *args, **kw):
    return run([binary(*DRIVER), name, url, *args], **kw)


def example(cmd, url, key, *args, expect=0):
    return run([binary(*EXAMPLE), cmd, "--server", url, "--key", key,
                "--pool-size", "16M", *args], expect=expect)


def rm_free(rm):
    """Free bytes summed over the resource manager's pools (RM STATS)."""
    out = scenario("rmstats", rm.address)
    total, free = (int(x) for x in out.split())
    return free


def wait_free(rm, want, timeout=15.0):
    deadline = time.monotonic() + timeout
    free = rm_free(rm)
    while free != want and time.monotonic() < deadline:
        time.sleep(0.2)
        free = rm_free(rm)
    return free


class Driver:
    """A scenario that talks on stdin/stdout ("ready" lines)."""

    def __init__(self, name, url, *args):
        self.p = subprocess.Popen([binary(*DRIVER), name, url, *args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def ready(self):
        line = self.p.stdout.readline()
        if not line and self.p.wait(timeout=30) == 77:
            pytest.skip(self.p.stderr.read())
        assert line.startswith("ready"), (
            f"no ready line: {line!r}\n{self.p.stderr.read() if self.p.poll() is not None else ''}")
        return line

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def finish(self, timeout=60.0):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            pytest.fail(f"driver hung\n{err}")
        if self.p.returncode == 77:
            pytest.skip(err)
        assert self.p.returncode == 0, f"exit {self.p.returncode}\n{out}\n{err}"
        return out

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass


@pytest.mark.parametrize("name", ["basic", "reuse", "expand", "firstwriter",
                                  "batch", "eager", "stats"])
def test_scenario(mds, name):
    assert "ok" in scenario(name, mds.url)


def test_many_threads_retrieving(mds):
    assert "ok" in scenario("threads", mds.url, "8")


def test_two_processes_share_a_chunk(mds):
    out = example("store", mds.url, "chunk-1", "--size", "1M", "--pattern", "7")
    assert out.startswith("stored key chunk-1")
    # another process maps the region and checks every byte
    out = example("retrieve", mds.url, "chunk-1", "--size", "1M", "--pattern", "7")
    assert out.startswith("verified key chunk-1")
    # a different pattern does not verify, a missing key is not found
    example("retrieve", mds.url, "chunk-1", "--pattern", "8", expect=1)
    example("retrieve", mds.url, "chunk-1", "--size", "2M", "--pattern", "7", expect=1)
    example("retrieve", mds.url, "chunk-2", expect=2)
    # a second store of the key: first writer wins
    assert example("store", mds.url, "chunk-1", "--pattern", "9").startswith("exists")
    example("retrieve", mds.url, "chunk-1", "--pattern", "7")


def test_writes_through_one_process_are_seen_by_another(mds):
    example("store", mds.url, "zc", "--size", "300K", "--pattern", "1")
    # a third process overwrites the value in place through its own mapping
    scenario("xwrite", mds.url, "zc", "5")
    example("retrieve", mds.url, "zc", "--size", "300K", "--pattern", "5")
    example("retrieve", mds.url, "zc", "--pattern", "1", expect=1)


def test_int_and_str_keys_are_distinct(mds):
    example("store", mds.url, "42", "--int-key", "--size", "1000")
    example("retrieve", mds.url, "42", "--int-key", "--size", "1000")
    example("retrieve", mds.url, "42", expect=2)
    example("retrieve", mds.url, "42", "--int-key", "--sync")


def test_delete_from_another_process(mds):
    example("store", mds.url, "del-me", "--size", "4K")
    example("delete", mds.url, "del-me")
    example("retrieve", mds.url, "del-me", expect=2)
    example("delete", mds.url, "del-me", expect=2)


def test_timeouts_when_the_server_is_stopped(rm, start_mds):
    m = start_mds(rm.address)
    d = Driver("timeout", m.url)
    try:
        d.ready()
        m.stop()
        t0 = time.monotonic()
        d.go()
        assert "ok" in d.finish(timeout=90)
        # about 10 timeouts of 0.5 s and a close: a bound against a hang,
        # with room for a loaded machine (the driver checks its own parts)
        assert time.monotonic() - t0 < 45
    finally:
        d.kill()


def test_connect_fails_cleanly_without_a_server(rm):
    # nothing listens on this port: connect must fail (not hang)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    example("store", f"tcp://127.0.0.1:{port}", "x", "--timeout-ms", "300",
            expect=3)
    assert time.monotonic() - t0 < 10


def test_close_returns_regions(rm, mds):
    free0 = rm_free(rm)
    d = Driver("hold", mds.url)
    try:
        d.ready()
        free1 = rm_free(rm)
        assert free1 <= free0 - 8 * MiB
        d.p.stdin.close()        # the driver closes its handler and exits
        assert d.p.wait(timeout=30) == 0
        assert wait_free(rm, free0) == free0
    finally:
        d.kill()


def test_killed_process_regions_are_reclaimed(rm, start_mds):
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    free0 = rm_free(rm)
    d = Driver("hold", m.url)
    try:
        line = d.ready()
        if "lease_ms 0" in line:
            pytest.skip("maru-server grants no lease")
        assert rm_free(rm) < free0
        d.p.send_signal(signal.SIGKILL)
        d.p.wait()
        # the lease expires after 2 s; the empty region is freed at once
        assert wait_free(rm, free0, timeout=20) == free0
    finally:
        d.kill()


def test_killed_process_with_a_stored_key(rm, start_mds):
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    free0 = rm_free(rm)
    d = Driver("hold", m.url, "kept-key")
    try:
        line = d.ready()
        if "lease_ms 0" in line:
            pytest.skip("maru-server grants no lease")
        d.p.send_signal(signal.SIGKILL)
        d.p.wait()
        time.sleep(4)
        # the region stays while a key references it ...
        assert rm_free(rm) < free0
        run([binary(*EXAMPLE), "delete", "--server", m.url, "--key", "kept-key",
             "--pool-size", "2M"])
        # ... and goes with the last key (the deleter's own region is
        # returned when it exits)
        assert wait_free(rm, free0, timeout=20) == free0
    finally:
        d.kill()


def test_lease_lapse_stops_writes(rm, start_mds):
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    d = Driver("leasestop", m.url)
    try:
        d.ready()
        m.proc.send_signal(signal.SIGSTOP)
        try:
            d.go()
            d.ready()
        finally:
            m.proc.send_signal(signal.SIGCONT)
        d.go()
        assert "ok" in d.finish()
    finally:
        d.kill()
