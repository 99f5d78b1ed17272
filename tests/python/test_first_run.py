# SPDX-License-Identifier: Apache-2.0
"""A first run as anyone: default state directories, one daemon per state
directory and pool, workers that are not root.

- The README's "Using it" commands, run verbatim, as root and as a user
  made for the test, each in a private mount and network namespace (a
  tmpfs on /dev/shm and, for root, on /var/lib; loopback of its own), so
  that the fixed names they use (/dev/shm/maru-pool, ports 9850 and 5555,
  /var/lib/maru-*) touch nothing of the machine's.
- A second resource manager on a held state directory or pool, and a
  second maru-server on a held state directory, are refused and name the
  holder's pid.
- Daemons run as root with --pool-group: a worker in the group stores and
  retrieves; one outside it is refused by the pool file's mode.

Users and groups are created with useradd/groupadd and removed again;
these tests need root and skip without it.
"""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import textwrap
import uuid

import pytest

from conftest import BUILD_DIR, MDS_BIN, REPO, RM_BIN, binary, free_port

VENV_PY = os.path.join(REPO, ".venv", "bin", "python")
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="creates users and namespaces: needs root")


def readme_block(lang, section="## Using it"):
    """The first ```@lang block after @section in README.md."""
    text = open(os.path.join(REPO, "README.md")).read()
    text = text[text.index(section):]
    m = re.search(r"```" + lang + r"\n(.*?)```", text, re.S)
    assert m, f"no {lang} block in README {section}"
    return m.group(1)


@pytest.fixture
def user():
    """A user (and its own group) made for the test; removed afterwards."""
    name = f"maru{uuid.uuid4().hex[:8]}"
    home = tempfile.mkdtemp(prefix="maru-home-")
    subprocess.run(["useradd", "--user-group", "--home-dir", home,
                    "--shell", "/bin/sh", name], check=True)
    os.chown(home, pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid)
    os.chmod(home, 0o700)
    yield name, home
    subprocess.run(["userdel", name], check=False)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def group():
    name = f"marug{uuid.uuid4().hex[:6]}"
    subprocess.run(["groupadd", name], check=True)
    yield name
    subprocess.run(["groupdel", name], check=False)


def as_user(name, argv, **kw):
    return subprocess.run([RUNUSER, "-u", name, "--", *argv],
                          capture_output=True, text=True, **kw)


def can_reach_tree(name):
    """Whether @name can run our binaries and the venv's python (a tree
    under a directory only root may enter, e.g. /root, cannot)."""
    r = as_user(name, ["sh", "-c", f"test -x {binary(*RM_BIN)} && test -x {VENV_PY}"])
    return r.returncode == 0


# Runs in the namespace: the README's shell block, then its Python block,
# then prints both daemons' logs.  {sh} and {py} are the README's text.
DRIVER = r'''
set -u
cd "$REPO"
{sh}
for i in $(seq 1 300); do
    "$PY" -c 'import socket; socket.create_connection(("127.0.0.1", 5555), 0.2)' \
        2>/dev/null && break
    sleep 0.1
done
"$PY" - <<'PYEOF'
{py}
print("README-PYTHON-OK")
PYEOF
rc=$?
kill $(jobs -p) 2>/dev/null
wait
exit $rc
'''


def run_readme(tmp, as_name=None, home=None):
    """The README's commands in a private mount+net namespace.  Return:
    the CompletedProcess (stdout+stderr of the daemons and the snippet)."""
    sh = readme_block("sh")
    py = readme_block("python")
    build = os.path.relpath(BUILD_DIR, REPO)
    if build != "build":
        sh = sh.replace("build/", build + "/")
    script = os.path.join(tmp, "readme.sh")
    with open(script, "w") as f:
        f.write(DRIVER.replace("{sh}", sh).replace("{py}", py))
    os.chmod(script, 0o755)
    env_user = f"env HOME={home} REPO={REPO} PY={VENV_PY} " \
        f"XDG_STATE_HOME= PATH=/usr/bin:/bin"
    if as_name:
        inner = f"runuser -u {as_name} -- {env_user} bash {script}"
        private = "mount -t tmpfs -o mode=1777 none /dev/shm"
    else:
        inner = f"{env_user} bash {script}"
        private = ("mount -t tmpfs -o mode=1777 none /dev/shm && "
                   "mount -t tmpfs none /var/lib")
    outer = f"ip link set lo up && {private} && {inner}"
    return subprocess.run(["unshare", "--mount", "--net", "sh", "-c", outer],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def require_unshare():
    r = subprocess.run(["unshare", "--mount", "--net", "true"],
                       capture_output=True)
    if r.returncode != 0 or not shutil.which("ip"):
        pytest.skip("no mount/net namespaces here (unshare, ip)")


@needs_root
def test_readme_as_root(tmp_path):
    require_unshare()
    r = run_readme(str(tmp_path), home="/root")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "README-PYTHON-OK" in out, out
    # the first line names the state directory
    assert "starting (state dir /var/lib/maru-resourced)" in out, out
    assert "/var/lib/maru-server" in out, out
    # maru-server found the key without --rm-key-file
    assert "no resource-manager key" not in out, out


@needs_root
def test_readme_as_user(tmp_path, user):
    require_unshare()
    name, home = user
    if not can_reach_tree(name):
        pytest.skip(f"{name} cannot reach {REPO} (a directory only root enters)")
    tmp = tempfile.mkdtemp(prefix="maru-readme-")
    try:
        os.chmod(tmp, 0o755)
        r = run_readme(tmp, as_name=name, home=home)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = r.stdout + r.stderr
    state = os.path.join(home, ".local", "state", "maru")
    assert r.returncode == 0 and "README-PYTHON-OK" in out, out
    assert f"starting (state dir {state}/resource-manager)" in out, out
    assert f"{state}/server" in out, out
    assert "no resource-manager key" not in out, out
    # what it made is the user's, in the user's home
    st = os.stat(os.path.join(state, "resource-manager", "client.key"))
    assert st.st_uid == pwd.getpwnam(name).pw_uid


def run_rm(port, state_dir, pool, *extra):
    return subprocess.run([binary(*RM_BIN), "--port", str(port), "--state-dir",
                           state_dir, "--pool", pool, "--emulate-size", "64M",
                           *extra], capture_output=True, text=True, timeout=60)


def test_second_rm_on_a_held_state_dir(rm):
    other_pool = f"/dev/shm/maru-test-{uuid.uuid4().hex[:12]}"
    r = run_rm(free_port(), rm.state_dir, other_pool)
    assert r.returncode == 1, r.stderr
    assert (f"{rm.state_dir} is in use by another maru-resource-manager "
            f"(pid {rm.pid})") in r.stderr, r.stderr
    # refused before it touched a pool
    assert not os.path.exists(other_pool)
    assert rm.running()


def test_second_rm_on_a_held_pool(rm, tmp_path):
    before = os.stat(rm.pool_path)
    r = run_rm(free_port(), str(tmp_path / "other-state"), rm.pool_path,
               "--pool-mode", "0640")
    assert r.returncode == 1, r.stderr
    assert (f"pool {rm.pool_path} is in use by another maru-resource-manager "
            f"(pid {rm.pid})") in r.stderr, r.stderr
    assert rm.running()
    # refused before it touched the pool: mode and owner as they were
    after = os.stat(rm.pool_path)
    assert (after.st_mode, after.st_gid) == (before.st_mode, before.st_gid)


def test_held_state_dir_is_free_after_a_crash(start_rm):
    # the lock is the kernel's: a SIGKILLed holder leaves nothing behind
    r = start_rm()
    r.kill()
    r.start()
    assert r.running()


def test_second_mds_on_a_held_state_dir(rm, mds):
    r = subprocess.run([binary(*MDS_BIN), "--port", str(free_port()),
                        "--rm-address", rm.address, "--rm-key-file",
                        rm.key_file, "--state-dir", mds.state_dir],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stderr
    assert (f"{mds.state_dir} is in use by another maru-server "
            f"(pid {mds.pid})") in r.stderr, r.stderr
    assert mds.running()


WORKER = textwrap.dedent('''
    import sys
    from maru import MaruConfig, MaruHandler
    h = MaruHandler(MaruConfig(server_url=sys.argv[1], pool_size=4 << 20))
    if not h.connect():
        print("CONNECT-FAILED"); sys.exit(3)
    data = b"w" * 65536
    handle = h.alloc(size=len(data))
    handle.buf[:] = data
    h.store(key=7, handle=handle)
    info = h.retrieve(key=7)
    assert bytes(info.view) == data
    print("WORKER-OK")
    h.close()
''')


def worker_as(name, url, tmp):
    script = os.path.join(tmp, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    os.chmod(script, 0o644)
    return as_user(name, [VENV_PY, script, url], timeout=120,
                   cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": tmp})


@pytest.fixture
def worker_dir():
    d = tempfile.mkdtemp(prefix="maru-worker-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("in_group", [True, False])
def test_worker_that_is_not_root(start_rm, start_mds, user, group, worker_dir,
                                 in_group):
    name, _ = user
    if not can_reach_tree(name):
        pytest.skip(f"{name} cannot reach {REPO} (a directory only root enters)")
    if in_group:
        subprocess.run(["usermod", "-a", "-G", group, name], check=True)
    r = start_rm(extra=["--pool-group", group])
    st = os.stat(r.pool_path)
    assert oct(st.st_mode & 0o777) == oct(0o660)
    assert st.st_gid == __import__("grp").getgrnam(group).gr_gid
    m = start_mds(r.address)
    w = worker_as(name, m.url, worker_dir)
    out = w.stdout + w.stderr
    if in_group:
        assert w.returncode == 0 and "WORKER-OK" in out, out
    else:
        assert w.returncode != 0 and "WORKER-OK" not in out, out
        assert "Permission denied" in out or "EACCES" in out, out


@needs_root
def test_worker_without_pool_group_is_refused(rm, mds, user, worker_dir):
    # the default stays 0600: it is --pool-group that lets the worker in
    name, _ = user
    if not can_reach_tree(name):
        pytest.skip(f"{name} cannot reach {REPO} (a directory only root enters)")
    assert os.stat(rm.pool_path).st_mode & 0o777 == 0o600
    w = worker_as(name, mds.url, worker_dir)
    assert w.returncode != 0 and "WORKER-OK" not in w.stdout, w.stdout + w.stderr


def test_pool_mode_and_group_are_checked(tmp_path):
    for bad in (["--pool-mode", "0755"], ["--pool-mode", "0066"],
                ["--pool-mode", "0400"], ["--pool-mode", "nine"],
                ["--pool-group", "no-such-group-x"]):
        r = subprocess.run([binary(*RM_BIN), "--state-dir", str(tmp_path),
                            *bad], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and r.stderr, (bad, r.stderr)
        assert not os.path.exists(tmp_path / "lock"), bad


@needs_root
def test_pool_group_of_others_is_refused(user, worker_dir):
    # a user may give files only to a group it is in (chown(2)): said at
    # start, not at the first FS_DAX allocation
    name, _ = user
    if not can_reach_tree(name):
        pytest.skip(f"{name} cannot reach {REPO} (a directory only root enters)")
    r = as_user(name, [binary(*RM_BIN), "--state-dir",
                       os.path.join(worker_dir, "s"), "--pool-group", "root"],
                timeout=30)
    assert r.returncode == 2, r.stderr
    assert "not root and not a member" in r.stderr, r.stderr
