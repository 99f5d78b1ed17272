# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures: real daemons on free ports, in temp dirs.

Every test that needs a daemon gets its own process, its own port and its
own state directory, and the emulated pool file lives on /dev/shm under a
unique name; all of it is removed when the test ends (Redis `start_server`).

    def test_x(rm):                 # a resource manager on a 256 MiB pool
        rm.address                  # "127.0.0.1:<port>"
    def test_y(rm, mds):            # plus a metadata server using it
        mds.url                     # "tcp://127.0.0.1:<port>"
    def test_z(start_rm):           # custom options / restarts
        r = start_rm(emulate_size="64M", extra=["--grace-period", "2"])
        r.stop(); r.start()         # same port, state dir and pool file

Binaries come from $MARU_BUILD_DIR (default: <repo>/build).

The test variant of libmaru is loaded into this process before any test
imports maru_handler (LIBMARU_TEST below): the knobs the tests set in the
environment (MARU_TEST_NO_BACKGROUND_VERIFY, MARU_SHM_INDEX_FAULT) are read
only by it, never by the library users install.
"""
import ctypes
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import pytest

import rm_wire

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("MARU_BUILD_DIR", os.path.join(REPO, "build"))


def _plain_build(build_dir):
    """Is @build_dir a build without sanitizers, whose libraries any
    process can load?"""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        return False
    return not re.search(r"^MARU_SANITIZE:\w+=\S", cache, re.M) and \
        not re.search(r"^MARU_FUZZ:\w+=(ON|1|TRUE|YES)$", cache, re.M | re.I)


def _load_libmaru_test():
    """<build>/src/libmaru/test/libmaru.so.0, the test variant of libmaru
    (src/libmaru/CMakeLists.txt): the product's code, exports and soname,
    plus the tests' knobs.  Loaded now, the extension of the installed
    Python package (which carries the product library beside it) finds a
    libmaru.so.0 loaded already when a test imports it, and uses that one:
    the dynamic linker matches it by soname.  Python processes a test
    starts load the product library, without the knobs.  From a sanitizer
    build it could not be loaded (its runtime must come first): then from
    <repo>/build, which the package is normally built from (./dev.sh)."""
    for d in (BUILD_DIR, os.path.join(REPO, "build")):
        path = os.path.join(d, "src", "libmaru", "test", "libmaru.so.0")
        if os.path.exists(path) and _plain_build(d):
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return None


LIBMARU_TEST = _load_libmaru_test()


@pytest.fixture
def libmaru_knobs():
    """For a test that sets a knob of libmaru's test variant in this
    process: fail, saying why, when the variant is not loaded."""
    if LIBMARU_TEST is None:
        pytest.fail(f"no test variant of libmaru in {BUILD_DIR}/src/libmaru/test "
                    "(a plain build with BUILD_TESTING: ./dev.sh setup)")


def binary(*parts):
    """Path of a built program, e.g. binary("src", "resource_manager", "maru-resource-manager")."""
    path = os.path.join(BUILD_DIR, *parts)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built (run ./dev.sh setup)")
    return path


RM_BIN = ("src", "resource_manager", "maru-resource-manager")
MDS_BIN = ("src", "metadata_server", "maru-server")
AGENT_BIN = ("src", "agent", "maru-agent")
POOL_MONITOR_BIN = ("tools", "pool_monitor", "pool_monitor")


def free_port():
    """A TCP port nobody listens on right now (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout=20.0, step=0.05):
    """Poll @cond until it is true or @timeout seconds pass; its last
    value.  Tests decide by a condition with a deadline, never by a sleep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def usage(pid):
    """(resident KiB, open fds) of process @pid."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f
                   if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def assert_flat(pid, before, slack_kib=2048):
    """After a flood: the daemon's fds are back to @before's (once it has
    seen the closes) and its resident memory within 10 % (+ @slack_kib for
    allocator granularity) of it."""
    rss0, fds0 = before

    def flat():
        rss, fds = usage(pid)
        return fds <= fds0 and rss <= rss0 * 1.1 + slack_kib

    assert wait_until(flat, timeout=20), (before, usage(pid))


def pool_free(rm):
    """Free bytes over all pools of the resource manager @rm (STATS)."""
    import rm_wire

    return sum(p.free_size for p in rm_wire.stats(rm.address))


def wait_port(port, proc, timeout=30.0, log=None):
    """Wait until 127.0.0.1:port accepts connections; fail if proc exits.
    (Generous: only a daemon that never listens waits this long.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = open(log).read() if log and os.path.exists(log) else ""
            pytest.fail(f"daemon exited with {proc.returncode} before listening:\n{out}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    pytest.fail(f"nothing listens on port {port} after {timeout}s")


class Daemon:
    """A daemon process with a fixed command line that can be restarted."""

    def __init__(self, argv, port, log_path, env=None):
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self.env = env
        self.proc = None

    def start(self, wait=True):
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        logf.close()
        if wait:
            wait_port(self.port, self.proc, log=self.log_path)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Stop with @sig (SIGKILL for a crash); return the exit code.
        After @timeout it is killed (and the code is then -9): generous,
        since a clean stop writes a checkpoint with fsync."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class ResourceManager(Daemon):
    def __init__(self, tmp, emulate_size="256M", extra=(), port=None, pool=None,
                 state_dir=None):
        self.port = port or free_port()
        self.state_dir = state_dir or os.path.join(tmp, "rm-state")
        self.pool_path = pool or f"/dev/shm/maru-test-{uuid.uuid4().hex[:12]}"
        argv = [binary(*RM_BIN), "--host", "127.0.0.1", "--port", str(self.port),
                "--state-dir", self.state_dir, "--pool", self.pool_path,
                "--emulate-size", emulate_size, "--log-level", "debug", *extra]
        super().__init__(argv, self.port, os.path.join(tmp, f"rm-{self.port}.log"))

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def key_file(self):
        return os.path.join(self.state_dir, "client.key")

    def start(self, wait=True):
        super().start(wait=wait)
        if wait:
            self.register_key()
        return self

    def register_key(self):
        """Clients of this RM authenticate with its key: rm_wire's by
        address, libmaru's (MaruShmClient) through MARU_RM_KEY_FILE."""
        if not os.path.exists(self.key_file):
            return                     # an older build, with no client key
        rm_wire.KEYS[self.address] = rm_wire.load_key(self.key_file)
        KEY_FILES[self.address] = self.key_file
        os.environ["MARU_RM_KEY_FILE"] = self.key_file

    def cleanup(self):
        self.stop()
        if os.environ.get("MARU_RM_KEY_FILE") == self.key_file:
            del os.environ["MARU_RM_KEY_FILE"]
        rm_wire.KEYS.pop(self.address, None)
        KEY_FILES.pop(self.address, None)
        try:
            os.unlink(self.pool_path)
        except OSError:
            pass


KEY_FILES = {}   # resource manager address -> its client.key
INDEX_FILES = set()  # every maru-server's shared-index file (removed at
                     # the end: not every test stops its servers through
                     # start_mds, and a killed server leaves its file)


def pytest_sessionfinish(session, exitstatus):
    for path in INDEX_FILES:
        try:
            os.unlink(path)
        except OSError:
            pass


class MetadataServer(Daemon):
    """maru-server; its journal in a state directory of its own (the same
    one across stop()/start() of this object: a restart recovers), unless
    @extra says --state-dir or --durability."""

    def __init__(self, tmp, rm_address, extra=(), port=None, state_dir=None):
        self.port = port or free_port()
        key = ["--rm-key-file", KEY_FILES[rm_address]] \
            if rm_address in KEY_FILES and "--rm-key-file" not in extra else []
        self.state_dir = state_dir or os.path.join(tmp, f"mds-state-{self.port}")
        journal = [] if {"--state-dir", "--durability"} & set(extra) \
            else ["--state-dir", self.state_dir]
        # the shared index's file: one of its own (kept across restarts,
        # removed with the test), not the default /dev/shm/maru-index-PORT
        self.index_path = f"/dev/shm/maru-test-idx-{uuid.uuid4().hex[:12]}"
        index = [] if {"--shm-index", "--shm-index-path"} & set(extra) \
            else ["--shm-index-path", self.index_path]
        INDEX_FILES.add(self.index_path if index
                        else f"/dev/shm/maru-index-{self.port}")
        argv = [binary(*MDS_BIN), "--host", "127.0.0.1", "--port", str(self.port),
                "--rm-address", rm_address, "--log-level", "DEBUG", *key,
                *journal, *index, *extra]
        # the key is given (or not) on purpose, never inherited
        env = {k: v for k, v in os.environ.items() if k != "MARU_RM_KEY_FILE"}
        super().__init__(argv, self.port,
                         os.path.join(tmp, f"mds-{self.port}.log"), env=env)

    @property
    def url(self):
        return f"tcp://127.0.0.1:{self.port}"


class Agent(Daemon):
    """maru-agent on loopback, without CURVE, lending the pool of the
    resource manager at @rm_address.  UCX over TCP (UCX_TLS=tcp): on one
    machine UCX would otherwise pick shared memory, which a remote host
    has not; a handler of this process needs the same (the start_agent
    fixture sets it).  The agent checks tokens at the RM with the key the
    environment names (MARU_RM_KEY_FILE, set by ResourceManager)."""

    def __init__(self, tmp, rm_address, extra=(), port=None):
        self.port = port or free_port()
        argv = [binary(*AGENT_BIN), "--host", "127.0.0.1", "--port",
                str(self.port), "--rm-address", rm_address,
                "--ucx-devices", "lo", "--log-level", "DEBUG", *extra]
        env = dict(os.environ, UCX_TLS="tcp")
        super().__init__(argv, self.port,
                         os.path.join(tmp, f"agent-{self.port}.log"), env=env)

    @property
    def url(self):
        return f"tcp://127.0.0.1:{self.port}"


@pytest.fixture
def start_agent(tmp_path, monkeypatch):
    """Factory: start_agent(rm_address, extra=[...]) -> Agent.  A handler
    made with MaruConfig(agent_url=a.url, remote="on") is remote: its
    bytes go through the agent (UCX over TCP in this process too)."""
    made = []
    monkeypatch.setenv("UCX_TLS", "tcp")

    def start(rm_address, wait=True, **kw):
        a = Agent(str(tmp_path), rm_address, **kw)
        made.append(a)
        return a.start(wait=wait)

    yield start
    for a in made:
        a.stop()


@pytest.fixture
def start_rm(tmp_path):
    """Factory: start_rm(emulate_size=..., extra=[...]) -> ResourceManager."""
    made = []

    def start(wait=True, **kw):
        r = ResourceManager(str(tmp_path), **kw)
        made.append(r)
        return r.start(wait=wait)

    yield start
    for r in made:
        r.cleanup()


@pytest.fixture
def rm(start_rm):
    return start_rm()


@pytest.fixture
def start_mds(tmp_path):
    """Factory: start_mds(rm_address, extra=[...]) -> MetadataServer."""
    made = []

    def start(rm_address, wait=True, **kw):
        m = MetadataServer(str(tmp_path), rm_address, **kw)
        made.append(m)
        return m.start(wait=wait)

    yield start
    for m in made:
        m.stop()
        try:
            os.unlink(m.index_path)
        except OSError:
            pass


@pytest.fixture
def mds(rm, start_mds):
    return start_mds(rm.address)
