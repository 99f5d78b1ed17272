# SPDX-License-Identifier: Apache-2.0
"""The systemd integration (systemd/, docs/operations.md "Running under
systemd"): the installed units pass `systemd-analyze verify` and stay
under an exposure bound of `systemd-analyze security`, the sysusers.d file
creates the maru user, and both
daemons tell a Type=notify supervisor READY=1 only once they serve, and
STOPPING=1 when SIGTERM stops them.

The analysis runs offline (no systemd as PID 1 is needed); a machine
without systemd-analyze or systemd-sysusers skips those tests.  Readiness
is tested without systemd: the test binds the AF_UNIX datagram socket
that $NOTIFY_SOCKET names, as systemd does, and reads what arrives.  The
units' system-call filter is applied with libseccomp to both daemons
through a store and a lookup.  As root (MARU_SYSTEMD_BOOT=0 turns it off),
the units also run under this machine's systemd, booted as PID 1 of private
namespaces (systemd_boot.sh): ordering by readiness, users, a worker
through both, an RM restart that leaves maru-server alone.
"""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

import mds_wire
import rm_wire
from conftest import BUILD_DIR, REPO, MetadataServer, ResourceManager, wait_until

UNITS = ("maru-resource-manager.service", "maru-server.service",
         "maru-agent.service")
# the targets: maru-server has no device access, the RM needs DAX, the
# agent DAX and the RDMA devices
EXPOSURE_MAX = {"maru-server.service": 3.0,
                "maru-resource-manager.service": 4.5,
                "maru-agent.service": 5.0}


def tool(name):
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed (Debian package systemd)")
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`cmake --install` of the build into a temporary prefix; its root
    (the prefix is <root>/usr, so the units' ExecStart names binaries
    that exist)."""
    if not os.path.exists(os.path.join(BUILD_DIR, "cmake_install.cmake")):
        pytest.fail(f"{BUILD_DIR} is not a configured build (./dev.sh setup)")
    root = tmp_path_factory.mktemp("inst")
    r = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix",
                        str(root / "usr")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def unit_path(root, unit):
    p = root / "usr" / "lib" / "systemd" / "system" / unit
    assert p.exists(), f"{p} not installed"
    return p


def test_units_verify_clean(installed):
    analyze = tool("systemd-analyze")
    paths = [str(unit_path(installed, u)) for u in UNITS]
    for u, p in zip(UNITS, paths):
        text = open(p).read()
        exe = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
        assert exe.startswith(str(installed / "usr" / "bin")), exe
        assert os.access(exe, os.X_OK), exe
    r = subprocess.run([analyze, "verify", "--man=no", *paths],
                       capture_output=True, text=True)
    # warnings go to stderr with rc 0: none may be about our units
    ours = [line for line in (r.stdout + r.stderr).splitlines()
            if "maru" in line]
    assert r.returncode == 0 and not ours, r.stdout + r.stderr


def exposure(analyze, path):
    r = subprocess.run([analyze, "security", "--offline=true", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    assert m, r.stdout + r.stderr
    return float(m.group(1)), r.stdout


@pytest.mark.parametrize("unit", UNITS)
def test_units_security_exposure(installed, unit):
    analyze = tool("systemd-analyze")
    level, report = exposure(analyze, unit_path(installed, unit))
    assert level <= EXPOSURE_MAX[unit], report
    # what the score stands for, beyond the number
    text = open(unit_path(installed, unit)).read()
    for line in ("Type=notify", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "CapabilityBoundingSet=\n"):
        assert line in text, (unit, line)


def test_units_run_unprivileged(installed):
    """The RM runs as maru with the DAX nodes and nothing else; maru-server
    as a user of its own, with the RM's key as a credential."""
    rm = open(unit_path(installed, UNITS[0])).read()
    mds = open(unit_path(installed, UNITS[1])).read()
    assert "User=maru\n" in rm and "Group=maru\n" in rm
    assert "StateDirectory=maru-resourced\n" in rm
    assert "StateDirectoryMode=0700\n" in rm      # client.key stays private
    assert "--state-dir %S/maru-resourced" in rm
    assert "DevicePolicy=closed\n" in rm and "DeviceAllow=char-dax rw\n" in rm
    assert "DynamicUser=yes\n" in mds and "PrivateDevices=yes\n" in mds
    assert "LoadCredential=rm-key:/var/lib/maru-resourced/client.key" in mds
    # ordered after the RM's readiness, never stopped or restarted with it
    assert re.search(r"^After=.*maru-resource-manager\.service", mds, re.M)
    assert not re.search(r"^(Requires|BindsTo|PartOf)=", mds, re.M)


def test_sysusers_creates_maru(installed, tmp_path):
    sysusers = tool("systemd-sysusers")
    conf = installed / "usr" / "lib" / "sysusers.d" / "maru.conf"
    assert conf.exists()
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "usr" / "lib" / "sysusers.d").mkdir(parents=True)
    shutil.copy(conf, root / "usr" / "lib" / "sysusers.d" / "maru.conf")
    r = subprocess.run([sysusers, f"--root={root}"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    users = {f[0]: f for f in (line.split(":") for line in
                               open(root / "etc" / "passwd").read().split("\n")
                               if line)}
    groups = {f[0]: f for f in (line.split(":") for line in
                                open(root / "etc" / "group").read().split("\n")
                                if line)}
    assert "maru" in users and "maru" in groups, (users, groups)
    name, _, uid, gid, _, _, shell = users["maru"]
    assert int(uid) < 1000, uid                  # a system user
    assert gid == groups["maru"][2]              # its own group
    assert shell.endswith("nologin"), shell
    # the udev rule gives the DAX nodes to that group
    rules = installed / "usr" / "lib" / "udev" / "rules.d" / "60-maru-dax.rules"
    text = open(rules).read()
    assert re.search(r'^SUBSYSTEM=="dax".*GROUP="maru", MODE="0660"', text,
                     re.M), text


class Notify:
    """The service manager's end of sd_notify(3): an AF_UNIX datagram
    socket whose path goes into $NOTIFY_SOCKET, with the sender's
    credentials on every message (as systemd checks NotifyAccess=main)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def wait_for(self, field, daemon=None, timeout=30.0):
        """The first message holding @field ("READY=1"), with the pid
        that sent it: (pid, {key: value}); fails after @timeout s, or
        as soon as @daemon (a conftest.Daemon) has exited."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {field} within {timeout} s")
            if daemon and not daemon.running():
                pytest.fail(f"exited with {daemon.proc.returncode} before "
                            f"{field}:\n{daemon.log()}")
            self.sock.settimeout(min(left, 0.5))
            try:
                data, anc, _, _ = self.sock.recvmsg(
                    4096, socket.CMSG_SPACE(struct.calcsize("3i")))
            except socket.timeout:
                continue
            pid = None
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and \
                        kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", cdata[:12])[0]
            lines = data.decode().split("\n")
            if field in lines:
                return pid, dict(line.split("=", 1) for line in lines
                                 if "=" in line)

    def close(self):
        self.sock.close()


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def check_ready_then_serves(daemon, notify, answer):
    """READY=1 comes from the daemon itself, and at that moment its port
    already listens: frozen (SIGSTOP) the instant READY arrives, it still
    completes a TCP handshake, which only a bound, listening socket does
    (a READY sent before listen() would find the connection refused).
    Thawed, @answer() gets a reply.  Then SIGTERM: STOPPING=1, exit 0."""
    pid, msg = notify.wait_for("READY=1", daemon)
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        assert pid == daemon.pid, (pid, daemon.pid)
        assert accepts(daemon.port), daemon.log()
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    assert msg.get("STATUS", "").startswith("listening on"), msg
    assert answer(), daemon.log()
    daemon.proc.send_signal(signal.SIGTERM)
    pid, msg = notify.wait_for("STOPPING=1")
    assert pid == daemon.pid
    assert daemon.proc.wait(30) == 0, daemon.log()


def test_rm_notifies_ready_and_stopping(tmp_path):
    notify = Notify(str(tmp_path / "notify"))
    r = ResourceManager(str(tmp_path), emulate_size="64M")
    r.env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    try:
        r.start(wait=False)
        check_ready_then_serves(
            r, notify, lambda: len(rm_wire.stats(r.address)) == 1)
    finally:
        r.cleanup()
        notify.close()


def test_mds_notifies_ready_and_stopping(tmp_path, rm):
    notify = Notify(str(tmp_path / "notify"))
    m = MetadataServer(str(tmp_path), rm.address)
    m.env = dict(m.env, NOTIFY_SOCKET=notify.path)

    def answer():
        c = mds_wire.ReqClient(m.url)
        try:
            return c.call(mds_wire.GET_STATS, {})[1] is not None
        finally:
            c.close()

    try:
        m.start(wait=False)
        check_ready_then_serves(m, notify, answer)
    finally:
        m.stop()
        notify.close()


def test_no_notify_socket_is_quiet(tmp_path, rm):
    """Without $NOTIFY_SOCKET nothing is sent and nothing is logged about
    it (a terminal, a test, another supervisor)."""
    m = MetadataServer(str(tmp_path), rm.address)
    m.env.pop("NOTIFY_SOCKET", None)
    m.start()
    try:
        assert m.stop() == 0
        assert "served" in m.log() and "sd_notify" not in m.log(), m.log()
    finally:
        m.stop()


# The units' seccomp sandbox, applied without systemd: SystemCallFilter=
# (groups expanded by systemd-analyze itself, in the unit's order: the
# first line is the allow list, then "~" removes and plain lines add),
# SystemCallErrorNumber=EPERM and RestrictAddressFamilies=, loaded with
# libseccomp (python3-seccomp) by a launcher that then execs the daemon.
SANDBOX = r"""
import errno, os, socket, sys
import seccomp
allowed, families = sys.argv[1].split(","), sys.argv[2].split(",")
f = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
for name in allowed:
    if name == "socket":
        continue
    try:
        f.add_rule(seccomp.ALLOW, name)
    except Exception:
        pass                        # not a system call of this architecture
for fam in families:
    f.add_rule(seccomp.ALLOW, "socket",
               seccomp.Arg(0, seccomp.EQ, getattr(socket, fam)))
f.load()
os.execv(sys.argv[3], sys.argv[3:])
"""
# allowed whatever the filter says (systemd.exec(5), SystemCallFilter=)
IMPLICIT = ("execve", "exit", "exit_group", "getrlimit", "rt_sigreturn",
            "sigreturn", "clock_gettime", "gettimeofday", "time",
            "nanosleep", "clock_nanosleep")


def expand(analyze, item, cache={}):
    """The system calls that @item (a name or an @group) stands for."""
    if not item.startswith("@"):
        return {item}
    if item not in cache:
        out = subprocess.run([analyze, "syscall-filter", item],
                             capture_output=True, text=True, check=True)
        names = set()
        for line in out.stdout.splitlines()[1:]:
            line = line.strip()
            if line and not line.startswith("#"):
                names |= expand(analyze, line)
        cache[item] = names
    return cache[item]


def unit_sandbox(analyze, text):
    """(allowed system calls, address families) of a unit's text."""
    allowed = None
    for value in re.findall(r"^SystemCallFilter=(.*)$", text, re.M):
        deny = value.startswith("~")
        names = set()
        for item in value.lstrip("~").split():
            names |= expand(analyze, item)
        if allowed is None:
            assert not deny, "the units use an allow list"
            allowed = names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    families = re.search(r"^RestrictAddressFamilies=(.*)$", text,
                         re.M).group(1).split()
    return sorted(allowed | set(IMPLICIT)), families


def sandboxed(daemon, analyze, unit_text):
    allowed, families = unit_sandbox(analyze, unit_text)
    daemon.argv = [sys.executable, "-c", SANDBOX, ",".join(allowed),
                   ",".join(families), *daemon.argv]
    return daemon


def sanitizer_build():
    """ASan/UBSan binaries make system calls the units' filter does not
    allow (the filter is for what users run): those tests need a plain
    build."""
    try:
        cache = open(os.path.join(BUILD_DIR, "CMakeCache.txt")).read()
    except OSError:
        return False
    return re.search(r"^MARU_SANITIZE:\w+=\S", cache, re.M) is not None


def test_daemons_run_in_the_units_sandbox(installed, tmp_path):
    if sanitizer_build():
        pytest.skip(f"{BUILD_DIR} is a sanitizer build: the filter is for plain ones")
    """Both daemons start, serve and stop cleanly under their unit's
    system-call filter: a pool created and mapped, a region allocated
    through maru-server, a key registered and found, READY=1 from each,
    then SIGTERM, exit 0 (the RM writes its checkpoint)."""
    analyze = tool("systemd-analyze")
    try:
        import seccomp  # noqa: F401
    except ImportError:
        pytest.skip("python3-seccomp is not installed")
    texts = [open(unit_path(installed, u)).read() for u in UNITS]
    notify = Notify(str(tmp_path / "notify"))
    r = sandboxed(ResourceManager(str(tmp_path), emulate_size="64M"),
                  analyze, texts[0])
    r.env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    m = None
    try:
        r.start(wait=False)
        pid, _ = notify.wait_for("READY=1", r)
        assert pid == r.pid, r.log()
        r.register_key()
        m = sandboxed(MetadataServer(str(tmp_path), r.address), analyze,
                      texts[1])
        m.env = dict(m.env, NOTIFY_SOCKET=notify.path)
        m.start(wait=False)
        pid, _ = notify.wait_for("READY=1", m)
        assert pid == m.pid, m.log()
        c = mds_wire.ReqClient(m.url)
        try:
            _, a = c.call(mds_wire.REQUEST_ALLOC,
                          {"instance_id": "sandbox", "size": 4 << 20})
            assert a["success"], (a, m.log(), r.log())
            h = mds_wire.handle_of(a)
            _, g = c.call(mds_wire.REGISTER_KV,
                          {"key": "k", "region_id": h["region_id"],
                           "kv_offset": 0, "kv_length": 4096})
            assert g.get("success"), g
            _, f = c.call(mds_wire.LOOKUP_KV, {"key": "k"})
            assert f.get("found"), f
        finally:
            c.close()
        assert m.stop() == 0, m.log()
        assert r.stop() == 0, r.log()
        assert "checkpoint written" in r.log(), r.log()
    finally:
        if m:
            m.stop()
        r.cleanup()
        notify.close()


# --- opt-in: the units under a real systemd -------------------------------
#
# As root, this boots this machine's systemd as PID 1 of private
# namespaces on an overlay of / (systemd_boot.sh says what is isolated and
# how) and runs the installed units there: sysusers creates maru at boot,
# maru-server starts only once the RM is ready, both run as their users,
# a worker stores and reads a chunk through them, and neither a restart
# nor a stop of the RM touches maru-server.  It needs root, overlayfs,
# cgroup2 and a systemd that tolerates a container (skipped without them);
# MARU_SYSTEMD_BOOT=0 skips it.

WORKER = r"""
import sys
from maru import MaruConfig, MaruHandler
key, mode = int(sys.argv[1]), sys.argv[2]
data = bytes([key % 256]) * (1 << 20)
with MaruHandler(MaruConfig(server_url="tcp://127.0.0.1:5555",
                            pool_size=8 << 20)) as h:
    if mode == "store":
        handle = h.alloc(size=len(data))
        handle.buf[:] = data
        h.store(key=key, handle=handle)
    else:
        for _ in range(2):      # the first one maps the region
            info = h.retrieve(key=key)
            assert info is not None and bytes(info.view) == data
        if h.index_stats()["local_hits"]:
            print("answered by the shared index")
print(mode, "ok")
"""

# LoadCredential= probe: some containers cannot give a credential to a
# unit's user at all (any unit); there maru-server gets the key another way
CRED_PROBE = """[Service]
Type=oneshot
DynamicUser=yes
LoadCredential=k:/etc/hostname
ExecStart=/bin/cat %d/k
"""
CRED_WORKAROUND = """[Service]
LoadCredential=
ExecStartPre=+/usr/bin/install -m 0400 -o maru-server \
/var/lib/maru-resourced/client.key /run/maru-test-rm-key
ExecStart=
ExecStart=/usr/local/bin/maru-server --rm-key-file /run/maru-test-rm-key \
--state-dir %S/maru-server --shm-index-group maru
"""


def cgroup2_dir():
    """This process's cgroup in the cgroup2 hierarchy, or None."""
    mnt = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a, b = line.split(" - ", 1)
            if b.split()[0] == "cgroup2":
                mnt = a.split()[4]
                break
    with open("/proc/self/cgroup") as f:
        rel = next((line.split(":", 2)[2].strip() for line in f
                    if line.startswith("0::")), None)
    if not mnt or rel is None:
        return None
    return os.path.join(mnt, rel.lstrip("/"))


class Booted:
    def __init__(self, init):
        self.init = init

    def run(self, *argv, check=True, stdin=None):
        r = subprocess.run(["nsenter", "-t", str(self.init), "-a", "-r",
                            "-w", *argv], capture_output=True, text=True,
                           input=stdin, timeout=120)
        if check and r.returncode and argv[:2] == ("systemctl", "start"):
            j = subprocess.run(["nsenter", "-t", str(self.init), "-a", "-r",
                                "-w", "journalctl", "--no-pager", "-n", "40",
                                "-u", argv[2]], capture_output=True, text=True,
                               timeout=60)
            print(j.stdout, file=sys.stderr)
            assert r.returncode == 0, (argv, r.stderr, j.stdout)
        if check:
            assert r.returncode == 0, (argv, r.stdout, r.stderr)
        return r

    def write(self, path, text):
        self.run("sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}",
                 stdin=text)

    def prop(self, unit, name):
        return self.run("systemctl", "show", "-p", name, "--value",
                        unit).stdout.strip()


def remove_cgroup(path):
    for top, dirs, _ in os.walk(path, topdown=False):
        for d in dirs:
            os.rmdir(os.path.join(top, d))
    os.rmdir(path)


@pytest.fixture
def booted(tmp_path):
    if os.environ.get("MARU_SYSTEMD_BOOT") == "0":
        pytest.skip("MARU_SYSTEMD_BOOT=0")
    if sanitizer_build():
        pytest.skip(f"{BUILD_DIR} is a sanitizer build: the filter is for plain ones")
    if os.geteuid() != 0:
        pytest.skip("needs root")
    for t in ("unshare", "nsenter", "pivot_root", "/lib/systemd/systemd"):
        if not shutil.which(t):
            pytest.skip(f"{t} is missing")
    base = cgroup2_dir()
    if not base or not os.path.isdir(base):
        pytest.skip("no cgroup2 hierarchy")
    cg = os.path.join(base, f"maru-boot-{os.getpid()}")
    os.mkdir(cg)
    w = tmp_path / "boot"
    w.mkdir()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "systemd_boot.sh")
    log = open(tmp_path / "boot.log", "wb")
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private",
                             script, BUILD_DIR, REPO, str(w), cg],
                            stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    init = None
    try:
        def children():
            try:
                with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                    return [int(p) for p in f.read().split()]
            except OSError:
                return []

        def systemd_up():
            nonlocal init
            if proc.poll() is not None:
                return True
            kids = children()
            if not kids:
                return False
            init = kids[0]
            try:
                comm = open(f"/proc/{init}/comm").read().strip()
            except OSError:
                return False
            if comm != "systemd":
                return False
            r = Booted(init).run("systemctl", "is-system-running",
                                 check=False)
            return r.stdout.strip() in ("running", "degraded")

        assert wait_until(systemd_up, timeout=120, step=0.2), \
            open(tmp_path / "boot.log").read()
        assert proc.poll() is None, open(tmp_path / "boot.log").read()
        yield Booted(init)
    finally:
        if init:
            try:
                os.kill(init, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None and not init:
            proc.kill()
        proc.wait(60)
        wait_until(lambda: not open(os.path.join(cg, "cgroup.procs")).read(),
                   timeout=30)
        remove_cgroup(cg)


def test_units_under_systemd(booted):
    b = booted
    assert b.run("getent", "passwd", "maru").stdout.startswith("maru:")
    b.write("/etc/systemd/system/maru-credprobe.service", CRED_PROBE)
    b.run("systemctl", "daemon-reload")
    if b.run("systemctl", "start", "maru-credprobe", check=False).returncode:
        b.write("/etc/systemd/system/maru-server.service.d/test.conf",
                CRED_WORKAROUND)
        b.run("systemctl", "daemon-reload")

    # starting maru-server starts the RM first and waits for its READY=1
    b.run("systemctl", "start", "maru-server")
    rm_ready = int(b.prop("maru-resource-manager.service",
                          "ActiveEnterTimestampMonotonic"))
    mds_began = int(b.prop("maru-server.service",
                           "InactiveExitTimestampMonotonic"))
    assert 0 < rm_ready <= mds_began, (rm_ready, mds_began)
    daemons = UNITS[:2]       # (the agent is not started here)
    for unit in daemons:
        assert b.prop(unit, "ActiveState") == "active", unit
        assert b.prop(unit, "StatusText").startswith("listening on"), unit
    users = {u: b.run("ps", "-o", "user=", "-p",
                      b.prop(u, "MainPID")).stdout.strip() for u in daemons}
    assert users == {"maru-resource-manager.service": "maru",
                     "maru-server.service": "maru-server"}, users
    assert b.run("stat", "-c", "%U %a",
                 "/var/lib/maru-resourced").stdout.split() == ["maru", "700"]

    python = os.path.join(os.path.dirname(sys.executable), "python")
    assert "store ok" in b.run(python, "-c", WORKER, "7", "store").stdout
    # an RM restart (and a stop) leaves maru-server and its index alone
    pid = b.prop("maru-server.service", "MainPID")
    b.run("systemctl", "restart", "maru-resource-manager")
    assert b.prop("maru-server.service", "MainPID") == pid
    out = b.run(python, "-c", WORKER, "7", "retrieve").stdout
    assert "retrieve ok" in out
    # the shared index: in the unit's RuntimeDirectory, which
    # its clients can see, read-only for them
    assert "answered by the shared index" in out, out
    # ... and readable only by the pool's readers (group maru), never
    # writable by them; the directory hides it from everyone else
    assert b.run("stat", "-c", "%U %G %a", "/run/maru-server/shm-index"
                 ).stdout.split() == ["maru-server", "maru", "640"]
    assert b.run("stat", "-L", "-c", "%G %a", "/run/maru-server"
                 ).stdout.split() == ["maru", "750"]
    as_user = ["setpriv", "--reuid=nobody", "--clear-groups"]
    assert b.run(*as_user, "--regid=maru", "head", "-c", "16",
                 "/run/maru-server/shm-index", check=False).returncode == 0
    assert b.run(*as_user, "--regid=nogroup", "head", "-c", "16",
                 "/run/maru-server/shm-index", check=False).returncode != 0
    b.run("systemctl", "stop", "maru-resource-manager")
    assert b.prop("maru-server.service", "ActiveState") == "active"
    assert b.prop("maru-server.service", "MainPID") == pid
    # a clean stop through STOPPING=1: inactive, not failed
    b.run("systemctl", "stop", "maru-server")
    assert b.prop("maru-server.service", "ActiveState") == "inactive"
    assert b.prop("maru-server.service", "Result") == "success"
