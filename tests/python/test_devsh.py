# SPDX-License-Identifier: Apache-2.0
"""dev.sh set-up tells the truth: it repairs an interrupted dpkg, waits
for an apt lock, and otherwise stops with one message naming the packages
still missing, a non-zero exit and no build, whatever command called it.

No real apt runs here.  dev.sh is copied into a temp dir (so that its
$TOP has no python/ and its .venv is a dummy) and run with a PATH whose
first directory holds stub `dpkg`, `dpkg-query`, `apt-get`, `id`, `sudo`,
`sleep` and `cmake` scripts.  They act on a small fake dpkg database in
files:
    missing        packages dpkg-query reports as not installed
    broken         packages `apt-get install` cannot find
    audit          present: `dpkg --audit` reports an interrupted run
    repairable     present: `dpkg --configure -a` repairs it
    locks          N: the next N apt-get/dpkg runs find the lock held
    calls          every stub call, one a line (cmake's mean: a build began)
"""
import os
import shutil
import stat
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STUBS = {
    # dpkg-query -W -f='${Status}' PKG
    "dpkg-query": r'''
pkg=${@: -1}
if grep -qx -- "$pkg" "$DB/missing"; then
	echo "dpkg-query: no packages found matching $pkg" >&2
	exit 1
fi
printf 'install ok installed'
''',
    "dpkg": r'''
case "$*" in
--audit)
	[ -e "$DB/audit" ] && echo "The following packages are only half configured: foo"
	exit 0 ;;
"--configure -a")
	if take_lock; then
		echo "dpkg: error: dpkg frontend lock was locked by another process with pid 4242" >&2
		exit 2
	fi
	if [ -e "$DB/repairable" ]; then rm -f "$DB/audit"; exit 0; fi
	echo "dpkg: error processing package foo (--configure): installed foo post-installation script subprocess returned error exit status 1" >&2
	exit 1 ;;
esac
exit 0
''',
    "apt-get": r'''
if take_lock; then
	echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
	echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
	exit 100
fi
[ "$1" = update ] && exit 0
shift  # install
bad=0
for p in "$@"; do
	case "$p" in -*) continue ;; esac
	if grep -qx -- "$p" "$DB/broken"; then
		echo "E: Unable to locate package $p" >&2
		bad=1
	fi
done
[ $bad = 1 ] && exit 100
for p in "$@"; do grep -vx -- "$p" "$DB/missing" >"$DB/m" || true; mv "$DB/m" "$DB/missing"; done
exit 0
''',
    "id": 'echo 1000',
    "sudo": 'exec "$@"',   # (removed from PATH with MARU_NO_SUDO=1)
    "sleep": 'exit 0',
    "cmake": 'exit 0',
}

PRELUDE = r'''#!/bin/bash
echo "$(basename "$0") $*" >>"$DB/calls"
take_lock() {
	local n
	n=$(cat "$DB/locks")
	[ "$n" -gt 0 ] || return 1
	echo $((n - 1)) >"$DB/locks"
}
'''


@pytest.fixture
def devsh(tmp_path):
    """Run the copied dev.sh with the stubs; returns run(cmd, **state)."""
    top = tmp_path / "top"
    stubs = tmp_path / "stubs"
    db = tmp_path / "db"
    for d in (top / ".venv" / "bin", stubs, db):
        d.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "dev.sh"), top / "dev.sh")
    venv_python = top / ".venv" / "bin" / "python"
    venv_python.write_text("#!/bin/sh\nexit 0\n")
    venv_python.chmod(0o755)
    for name, body in STUBS.items():
        f = stubs / name
        f.write_text(PRELUDE + body + "\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)

    def run(cmd="setup", missing=(), broken=(), audit=False, repairable=False,
            locks=0, env_extra=None):
        (db / "missing").write_text("".join(p + "\n" for p in missing))
        (db / "broken").write_text("".join(p + "\n" for p in broken))
        (db / "locks").write_text(f"{locks}\n")
        (db / "calls").write_text("")
        for name, on in (("audit", audit), ("repairable", repairable)):
            if on:
                (db / name).write_text("")
            elif (db / name).exists():
                (db / name).unlink()
        env = {k: v for k, v in os.environ.items()
               if k not in ("MARU_SKIP_APT", "BUILD_DIR", "MARU_LOCK_TRIES")}
        env.update(PATH=f"{stubs}:/usr/bin:/bin", DB=str(db),
                   BUILD_DIR=str(tmp_path / "build"), MARU_SKIP_HW="1")
        env.update(env_extra or {})
        sudo = stubs / "sudo"
        if env.get("MARU_NO_SUDO") and sudo.exists():
            sudo.rename(stubs / "sudo.off")
        elif not env.get("MARU_NO_SUDO") and (stubs / "sudo.off").exists():
            (stubs / "sudo.off").rename(sudo)
        p = subprocess.run(["bash", str(top / "dev.sh"), cmd], env=env,
                           capture_output=True, text=True, timeout=120)
        calls = (db / "calls").read_text().splitlines()
        p.calls = calls
        p.built = any(c.startswith("cmake") for c in calls)
        p.apt_installs = [c for c in calls if c.startswith("apt-get install")]
        p.still_missing = (db / "missing").read_text().split()
        return p
    return run


def test_all_installed_builds(devsh):
    p = devsh()
    assert p.returncode == 0, p.stderr
    assert p.built and not p.apt_installs


def test_interrupted_dpkg_repaired_then_carries_on(devsh):
    p = devsh(audit=True, repairable=True, missing=["libisal-dev"])
    assert p.returncode == 0, p.stderr
    assert "dpkg --configure -a" in p.calls
    assert p.apt_installs and p.still_missing == []
    assert p.built


@pytest.mark.parametrize("cmd", ["setup", "test", "demo", "deps"])
def test_interrupted_dpkg_unrepairable_stops(devsh, cmd):
    p = devsh(cmd, audit=True, repairable=False, missing=["libisal-dev"])
    assert p.returncode != 0
    assert "still in an interrupted state" in p.stderr
    assert "dpkg --audit" in p.stderr
    assert not p.built and not p.apt_installs


@pytest.mark.parametrize("cmd", ["setup", "test", "demo", "deps"])
def test_package_apt_cannot_install_stops_naming_it(devsh, cmd):
    # (python3-msgpack: a package of the demo's list too)
    p = devsh(cmd, missing=["libisal-dev", "python3-msgpack"],
              broken=["python3-msgpack"])
    assert p.returncode != 0
    assert not p.built
    msg = [line for line in p.stderr.splitlines()
           if line.startswith("dev.sh: ")]
    assert len(msg) == 1, p.stderr
    assert "still not installed" in msg[0]
    assert "python3-msgpack" in msg[0] and "libisal-dev" in msg[0]
    assert "apt-get install failed" not in p.stderr
    # one try, then once more after apt-get update: not thirty
    assert len(p.apt_installs) == 2
    assert "apt-get update -q" in p.calls


def test_lock_held_is_waited_for(devsh):
    p = devsh(missing=["libisal-dev"], locks=3)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("holds its lock") == 1
    assert len(p.apt_installs) == 4       # 3 refused by the lock, then ok
    assert p.still_missing == [] and p.built


def test_lock_held_during_repair_is_waited_for(devsh):
    p = devsh(audit=True, repairable=True, locks=2)
    assert p.returncode == 0, p.stderr
    assert p.calls.count("dpkg --configure -a") == 3
    assert p.built


def test_skip_apt_touches_no_package_tool(devsh):
    p = devsh(missing=["libisal-dev"], audit=True,
              env_extra={"MARU_SKIP_APT": "1"})
    assert p.returncode == 0, p.stderr
    assert not [c for c in p.calls if c.split()[0] in ("dpkg", "apt-get")]
    assert p.built


def package_lists():
    """dev.sh's DEMO_PACKAGES and TEST_PACKAGES, as bash expands them."""
    out = subprocess.run(
        ["bash", "-c", f'eval "$(sed -n \'/^DEMO_PACKAGES=(/,/^DEB_PACKAGES=/p\' '
                       f'{REPO}/dev.sh)"; echo "${{DEMO_PACKAGES[*]}}"; '
                       f'echo "${{TEST_PACKAGES[*]}}"'],
        capture_output=True, text=True, check=True).stdout.splitlines()
    return out[0].split(), out[1].split()


def test_demo_installs_only_its_packages(devsh):
    """With only the demo's packages installed, `dev.sh demo` installs
    nothing and builds without tests, benchmarks and man pages (no test
    tool needed); `dev.sh test` then asks for exactly the rest."""
    demo, test = package_lists()
    assert demo and test and not set(demo) & set(test)
    for heavy in ("qemu-system-x86", "python3-torch", "llvm", "pandoc",
                  "redis-server", "clang", "libcmocka-dev", "help2man"):
        assert heavy in test and heavy not in demo
    p = devsh("demo", missing=test)
    assert not p.apt_installs, p.calls
    configure = [c for c in p.calls if c.startswith("cmake -S")]
    assert configure and "-DBUILD_TESTING=OFF" in configure[0] and \
        "-DMARU_MAN_PAGES=OFF" in configure[0] and \
        "-DMARU_BUILD_BENCH=OFF" in configure[0], p.calls
    p = devsh("test", missing=test)
    assert len(p.apt_installs) == 1
    assert p.apt_installs[0].split()[5:] == test, p.apt_installs
    configure = [c for c in p.calls if c.startswith("cmake -S")]
    assert "-DBUILD_TESTING=ON" in configure[0]


@pytest.mark.parametrize("cmd", ["demo", "test"])
def test_no_root_needed_when_everything_is_there(devsh, cmd):
    """Not root and no sudo: with the packages present set-up carries on;
    with one missing it stops naming it (no apt, no build)."""
    p = devsh(cmd, env_extra={"MARU_NO_SUDO": "1"})
    assert p.built and not p.apt_installs, p.stderr
    p = devsh(cmd, missing=["libisal-dev"], env_extra={"MARU_NO_SUDO": "1"})
    assert p.returncode != 0 and not p.built and not p.apt_installs
    assert "not root and no sudo" in p.stderr and "libisal-dev" in p.stderr
