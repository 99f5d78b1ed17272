# SPDX-License-Identifier: Apache-2.0
"""What a user installs, used the way a user would (docs/operations.md,
"Install").

One `cmake --install $MARU_BUILD_DIR --prefix <tmp>` per module, then:
  - pkg-config: `libmaru` resolves with only libmaru's .pc visible
    (PKG_CONFIG_LIBDIR hides msgpack's and every other system .pc), and
    examples/store_retrieve.c compiles and links with those flags and
    stores/retrieves a chunk on real daemons;
  - CMake: examples/ configured standalone with find_package(maru) against
    the installed tree, built, and run on real daemons; the example is
    installed as source (share/doc/maru/examples), not as a program;
  - Python: `pip install` of python/ (offline) into a fresh venv, libmaru
    found through pkg-config with no MARU_BUILD_DIR; the installed package
    connects to real daemons and stores/retrieves, and its command
    maru-exporter runs;
  - Debian: `cpack -G DEB` from the build dir; the package holds exactly
    the files `cmake --install` installs (under /usr), Depends from
    dpkg-shlibdeps, maintainer scripts, units whose ExecStart names the
    packaged binaries (systemd-analyze verify over the unpacked tree);
    the unpacked daemons and libmaru run the example end to end.
The package is not installed on this machine (not disposable): it is
unpacked with dpkg-deb -x; with MARU_TEST_CHROOT=<a Debian chroot> it is
also installed with apt into an overlay of that chroot and run there.

Nothing is rebuilt: everything comes from the existing build dir.
"""
import filecmp
import glob
import gzip
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, REPO, MetadataServer, ResourceManager

MiB = 1 << 20
BUILD = os.path.realpath(BUILD_DIR)
UNITS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "systemd", "*.service")))
BINARIES = ["maru-resource-manager", "maru-server", "maru-agent",
            "pool_monitor", "marutop", "maru-keygen"]
WARN = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]


def need(*tools):
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


def run(argv, timeout=300, env=None, cwd=None, expect=0, both=False):
    """@argv's stdout (+ stderr if @both), after checking its exit status."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=cwd)
    assert p.returncode == expect, (
        f"{argv} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p.stdout + p.stderr if both else p.stdout


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(maru VERSION ([0-9.]+)", f.read()).group(1)


def tree(root):
    """Every file and symlink under @root, as paths relative to it."""
    out = set()
    for d, _, files in os.walk(root):
        out.update(os.path.relpath(os.path.join(d, f), root) for f in files)
    return out


def pc_dir(prefix):
    dirs = glob.glob(os.path.join(prefix, "lib*", "**", "pkgconfig", "libmaru.pc"),
                     recursive=True)
    assert len(dirs) == 1, f"libmaru.pc under {prefix}: {dirs}"
    return os.path.dirname(dirs[0])


def lib_dir(prefix):
    return os.path.dirname(pc_dir(prefix))


def pkg_env(prefix):
    """Only @prefix's .pc files visible to pkg-config."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PKG_CONFIG_PATH", "PKG_CONFIG_SYSROOT_DIR")}
    env["PKG_CONFIG_LIBDIR"] = pc_dir(prefix)
    return env


def example_roundtrip(exe, url, key, env=None):
    """Store a 1 MiB chunk with @exe, retrieve it verified, and check that
    a wrong pattern is noticed (exit 1): the example really reads the pool."""
    common = ["--server", url, "--key", key, "--pool-size", "16M", "--size", "1M"]
    run([exe, "store", *common, "--pattern", "7"], timeout=60, env=env)
    run([exe, "retrieve", *common, "--pattern", "7"], timeout=60, env=env)
    run([exe, "retrieve", *common, "--pattern", "8"], timeout=60, env=env, expect=1)


def cmake_example(src, build, prefix_path):
    run(["cmake", "-S", src, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix_path}",
         f"-DCMAKE_C_FLAGS={' '.join(WARN)}"], timeout=120)
    run(["cmake", "--build", build], timeout=120)
    exe = os.path.join(build, "maru-example")
    assert os.access(exe, os.X_OK)
    return exe


def cache_value(name):
    """@name's value in the build dir's CMakeCache.txt ("" if unset)."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            m = re.search(rf"^{name}:\w+=(.*)$", f.read(), re.M)
    except OSError:
        pytest.fail(f"{BUILD} is not a configured build dir (run ./dev.sh setup)")
    return m.group(1) if m else ""


def plain_build():
    """A sanitizer build's libmaru needs the sanitizer runtime in whatever
    links it: not what a user installs."""
    need("cmake")
    if cache_value("MARU_SANITIZE") or (cache_value("MARU_FUZZ") in ("ON", "1", "TRUE")):
        pytest.skip(f"{BUILD} is a sanitizer/fuzz build; installing is tested on the plain one")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    plain_build()
    p = str(tmp_path_factory.mktemp("install") / "prefix")
    run(["cmake", "--install", BUILD, "--prefix", p])
    return p


def test_install_tree(prefix):
    """The product, its CMake package and .pc, the example as source only."""
    files = tree(prefix)
    for b in BINARIES:
        assert f"bin/{b}" in files
    assert not [f for f in files if f.startswith("bin/") and "example" in f], sorted(files)
    libdir = os.path.relpath(lib_dir(prefix), prefix)
    for f in ("libmaru.so", "libmaru.so.0", "pkgconfig/libmaru.pc",
              "cmake/maru/maruConfig.cmake", "cmake/maru/maruConfigVersion.cmake",
              "cmake/maru/maruTargets.cmake"):
        assert f"{libdir}/{f}" in files, (f, sorted(files))
    assert "include/maru/maru.h" in files
    # the tests' knobs are only in the test variant, which is not installed
    with open(os.path.join(lib_dir(prefix), "libmaru.so.0"), "rb") as f:
        lib = f.read()
    for knob in (b"MARU_TEST_NO_BACKGROUND_VERIFY", b"MARU_SHM_INDEX_FAULT"):
        assert knob not in lib, knob
    for f in ("store_retrieve.c", "CMakeLists.txt"):
        assert filecmp.cmp(os.path.join(REPO, "examples", f),
                           os.path.join(prefix, "share/doc/maru/examples", f), shallow=False)
    for u in UNITS:
        assert any(f.endswith(f"systemd/system/{u}") for f in files), (u, sorted(files))


def test_pkg_config_alone(prefix, mds, tmp_path):
    """pkg-config libmaru with msgpack's .pc out of sight, then cc with
    those flags, then the program on real daemons."""
    need("pkg-config", "cc")
    env = pkg_env(prefix)
    # the point: nothing but libmaru's .pc is visible
    p = subprocess.run(["pkg-config", "--exists", "msgpack"], env=env)
    assert p.returncode != 0, "msgpack.pc is still visible: the test would prove nothing"
    flags = run(["pkg-config", "--cflags", "--libs", "libmaru"], env=env).split()
    assert "-lmaru" in flags, flags
    assert not [f for f in flags if re.search(r"msgpack|sodium|crypto", f)], flags
    assert run(["pkg-config", "--modversion", "libmaru"], env=env).strip() == project_version()
    # the static form must not name modules that are not there either
    run(["pkg-config", "--static", "--libs", "libmaru"], env=env)

    exe = str(tmp_path / "store_retrieve")
    run(["cc", "-std=c11", *WARN, os.path.join(REPO, "examples", "store_retrieve.c"),
         "-o", exe, *flags], timeout=120)
    assert os.path.realpath(prefix) in run(
        ["env", f"LD_LIBRARY_PATH={lib_dir(prefix)}", "ldd", exe])
    example_roundtrip(exe, mds.url, "install-pc",
                      env={**os.environ, "LD_LIBRARY_PATH": lib_dir(prefix)})


def test_find_package_example(prefix, mds, tmp_path):
    """examples/ as its own project: find_package(maru CONFIG) -> maru::maru
    from the installed tree, built and run on real daemons."""
    need("cmake", "cc")
    exe = cmake_example(os.path.join(REPO, "examples"), str(tmp_path / "ex"), prefix)
    cache = open(str(tmp_path / "ex" / "CMakeCache.txt")).read()
    found = re.search(r"^maru_DIR:PATH=(.*)$", cache, re.M).group(1)
    assert os.path.realpath(found) == os.path.realpath(
        os.path.join(lib_dir(prefix), "cmake", "maru")), found
    example_roundtrip(exe, mds.url, "install-cmake",
                      env={**os.environ, "LD_LIBRARY_PATH": lib_dir(prefix)})


CLIENT = r"""
import sys
from maru import MaruConfig, MaruHandler
import maru_core._maru as ext

maps = open("/proc/self/maps").read()
libs = sorted({l.split()[-1] for l in maps.splitlines() if "libmaru.so" in l})
print("ext", ext.__file__)
# the benchmark's C loops are bench/py_bench_c.c, not the package's
assert not [n for n in dir(ext.Handler) if "bench" in n], dir(ext.Handler)
print("libmaru", *libs)
data = bytes(range(256)) * 4096
with MaruHandler(MaruConfig(server_url=sys.argv[1], pool_size=4 << 20,
                            chunk_size_bytes=1 << 20, timeout_ms=10000)) as h:
    a = h.alloc(size=len(data))
    a.buf[:] = data
    assert h.store(key="install-py", handle=a)
    info = h.retrieve(key="install-py")
    assert info is not None and bytes(info.view) == data
print("ok")
"""


def test_pip_install(prefix, mds, tmp_path):
    """pip install of python/ into a fresh venv against the installed
    libmaru (pkg-config, no MARU_BUILD_DIR), then a real store/retrieve."""
    need("pkg-config", "cc")
    venv = str(tmp_path / "venv")
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], timeout=120)
    # a copy of the source tree, not written to by this test; with the
    # python/build that the dev install (`./dev.sh setup`) leaves, linked
    # to the build tree's libmaru: setup.py must not reuse it
    src = str(tmp_path / "python")
    shutil.copytree(os.path.join(REPO, "python"), src,
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    env = pkg_env(prefix)
    env.pop("MARU_BUILD_DIR", None)
    env["MARU_REQUIRE_EXTENSION"] = "1"
    env["MARU_WERROR"] = "1"
    out = run([os.path.join(venv, "bin", "pip"), "install", "-v", "--no-build-isolation",
               "--no-index", src], env=env, timeout=300, both=True)
    assert "libmaru from pkg-config" in out, out[-3000:]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = run([os.path.join(venv, "bin", "python"), "-c", CLIENT, mds.url],
              env=env, cwd=str(tmp_path), timeout=120)
    lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
    assert lines["ext"].startswith(venv), out
    # the installed libmaru, through the rpath to its libdir
    assert lines["libmaru"].startswith(os.path.realpath(lib_dir(prefix))), out
    assert not glob.glob(os.path.join(os.path.dirname(lines["ext"]), "libmaru.so*"))
    assert out.splitlines()[-1] == "ok"
    # the package's command (console entry point), runnable from the venv
    out = run([os.path.join(venv, "bin", "maru-exporter"), "--version"], env=env,
              cwd=str(tmp_path), timeout=60)
    assert out.startswith("maru-exporter "), out


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    plain_build()
    need("cpack", "dpkg-deb")
    out = str(tmp_path_factory.mktemp("deb"))
    run(["cpack", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-G", "DEB",
         "-B", out], cwd=BUILD, timeout=300)
    debs = glob.glob(os.path.join(out, "*.deb"))
    assert len(debs) == 1, debs
    root = os.path.join(out, "root")
    run(["dpkg-deb", "-x", debs[0], root])
    return debs[0], root


def control(path):
    fields, key = {}, None
    for line in run(["dpkg-deb", "-f", path]).splitlines():
        if line.startswith(" ") and key:
            fields[key] += "\n" + line
        else:
            key, _, val = line.partition(":")
            fields[key] = val.strip()
    return fields


def test_deb_metadata(deb, tmp_path):
    """Name and version from the project, Depends from dpkg-shlibdeps, the
    maintainer scripts, the shlibs file of libmaru.so.0."""
    path, _ = deb
    f = control(path)
    assert f["Package"] == "maru"
    assert f["Version"] == project_version()
    deps = [d.strip().split()[0] for d in f["Depends"].split(",")]
    # from dpkg-shlibdeps: the daemons' and libmaru's runtime libraries,
    # and no -dev package
    for d in ("libc6", "libssl3", "libsodium23"):
        assert d in deps, f["Depends"]
    assert not [d for d in deps if d.endswith("-dev")], f["Depends"]
    info = run(["dpkg-deb", "-I", path])
    for script in ("postinst", "prerm", "postrm", "shlibs", "triggers"):
        assert re.search(rf"\b{script}\b", info), info
    ctl = str(tmp_path / "DEBIAN")
    run(["dpkg-deb", "-e", path, ctl])
    for script in ("postinst", "prerm", "postrm"):
        run(["sh", "-n", os.path.join(ctl, script)])
    assert "systemd-sysusers" in open(os.path.join(ctl, "postinst")).read()
    assert open(os.path.join(ctl, "shlibs")).read().split() == \
        ["libmaru", "0", "maru", "(>=", f"{project_version()})"]
    assert "activate-noawait ldconfig" in open(os.path.join(ctl, "triggers")).read()


def test_deb_license_docs_and_man_pages(deb):
    """A maintainer who can be written to, the copyright file where Debian
    looks for it (Apache-2.0, machine-readable), compressed man pages whose
    SEE ALSO resolves inside the package."""
    path, root = deb
    f = control(path)
    assert re.fullmatch(r"[^<>]+ <[^@<>\s]+@[^@<>\s]+\.[a-z]+>",
                        f["Maintainer"]), f["Maintainer"]
    assert "localhost" not in f["Maintainer"]
    doc = os.path.join(root, "usr", "share", "doc", "maru")
    cp = open(os.path.join(doc, "copyright")).read()
    assert cp.startswith("Format: https://www.debian.org/doc/packaging-"
                         "manuals/copyright-format/1.0/")
    assert re.search(r"^Files: \*\n(.+\n)*License: Apache-2\.0$", cp, re.M)
    assert "/usr/share/common-licenses/Apache-2.0" in cp
    mans = glob.glob(os.path.join(root, "usr", "share", "man", "man*", "*"))
    assert len(mans) == 7 and all(m.endswith(".gz") for m in mans), mans
    pages = {os.path.basename(m)[:-3] for m in mans}   # "maru-server.8"
    for m in mans:
        with gzip.open(m, "rt") as fh:
            text = fh.read()
        see = text[text.index("SEE ALSO"):]
        # other pages: "maru-server (8)" in roff
        for name, sec in re.findall(r"^\.BR? \\?\*?\*?([\w\\-]+)\*?\*? ?\((\d)\)",
                                    see, re.M):
            assert f"{name.replace(chr(92), '')}.{sec}" in pages, (m, name)
        docs = re.findall(r"[\w/-]+\.(?:md|c)\b", see)
        assert docs and "/usr/share/doc/maru" in see, (m, see)
        for d in docs:
            assert os.path.isfile(os.path.join(doc, d)), (m, d)


def unit_path(unit, names):
    """Where the package holds @unit: /usr/lib/systemd/system (what systemd/
    installs under the prefix) or /lib/systemd/system; None if nowhere."""
    for d in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if f"{d}/{unit}" in names:
            return f"{d}/{unit}"
    return None


def test_deb_contents(prefix, deb):
    """The package holds what `cmake --install` installs, under /usr."""
    path, root = deb
    listing = run(["dpkg-deb", "--contents", path])
    # "<mode> <owner> <size> <date> <time> ./path[ -> target]"
    names = {l.split(None, 5)[5].split(" -> ")[0].lstrip(".")
             for l in listing.splitlines() if not l.startswith("d")}
    # under the prefix /usr; only an absolute install destination (units in
    # /lib/systemd, rules in /etc) may land elsewhere
    assert not [n for n in names if not n.startswith(("/usr/", "/lib/", "/etc/"))], \
        sorted(names)
    packaged = {os.path.relpath(n, "/usr") for n in names if n.startswith("/usr/")}
    # same set as the install tree (whatever other parts add: man pages, ...)
    assert packaged == tree(prefix), (sorted(packaged ^ tree(prefix)))
    for b in BINARIES:
        assert f"/usr/bin/{b}" in names
    assert "/usr/include/maru/maru.h" in names
    assert [n for n in names if re.fullmatch(r"/usr/lib(/[^/]+)?/libmaru\.so\.0", n)]
    assert [n for n in names if n.endswith("/pkgconfig/libmaru.pc")]
    assert [n for n in names if n.endswith("/cmake/maru/maruConfig.cmake")]
    for u in UNITS:
        assert unit_path(u, names), sorted(names)


def test_deb_units(deb, tmp_path):
    """Every unit's ExecStart names a binary in the package (at /usr/bin),
    and systemd-analyze verify passes over the unpacked tree."""
    _, root = deb
    names = {"/" + p for p in tree(root)}
    paths = {u: unit_path(u, names) for u in UNITS}
    assert all(paths.values()), paths
    for u in UNITS:
        text = open(os.path.join(root, paths[u].lstrip("/"))).read()
        execs = re.findall(r"^Exec\w*=[-+!@:]*(\S+)", text, re.M)
        assert execs, u
        for e in execs:
            assert e.startswith("/usr/bin/"), (u, e)
            assert os.access(os.path.join(root, e.lstrip("/")), os.X_OK), (u, e)
    if shutil.which("systemd-analyze") is None or not os.path.isdir("/lib/systemd/system"):
        pytest.skip("systemd-analyze (or the host's units) not available")
    # a root holding the package and the host's own units (the targets the
    # maru units order themselves against)
    vroot = str(tmp_path / "vroot")
    shutil.copytree(root, vroot, symlinks=True)
    unitdir = os.path.join(vroot, "usr/lib/systemd/system")
    os.makedirs(unitdir, exist_ok=True)
    for name in os.listdir("/lib/systemd/system"):
        dst = os.path.join(unitdir, name)
        if not os.path.lexists(dst):
            src = os.path.join("/lib/systemd/system", name)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isfile(src):
                shutil.copyfile(src, dst)
    p = subprocess.run(["systemd-analyze", "verify", f"--root={vroot}",
                        *paths.values()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "maru" not in p.stderr, p.stderr


def test_deb_runs(deb, tmp_path):
    """The unpacked package works: its daemons serve, and the example built
    with find_package(maru) against the unpacked /usr (the package's CMake
    files are relocatable) stores and retrieves through its libmaru."""
    need("cmake", "cc")
    _, root = deb
    usr = os.path.join(root, "usr")
    tmp = str(tmp_path)
    rm = ResourceManager(tmp, emulate_size="64M")
    rm.argv[0] = os.path.join(usr, "bin", "maru-resource-manager")
    mds = None
    try:
        rm.start()
        mds = MetadataServer(tmp, rm.address)
        mds.argv[0] = os.path.join(usr, "bin", "maru-server")
        mds.start()
        exe = cmake_example(os.path.join(usr, "share/doc/maru/examples"),
                            os.path.join(tmp, "ex"), usr)
        example_roundtrip(exe, mds.url, "install-deb",
                          env={**os.environ, "LD_LIBRARY_PATH": lib_dir(usr)})
    finally:
        if mds:
            mds.stop()
        rm.cleanup()


CHROOT_SCRIPT = r"""
set -e
dpkg -s maru | grep -q '^Status: install ok installed'
ldconfig -p | grep -q 'libmaru.so.0 '
systemd-analyze verify {units}
maru-resource-manager --host 127.0.0.1 --port 9850 --state-dir /tmp/rm \
    --pool /dev/shm/{pool} --emulate-size 64M >/tmp/rm.log 2>&1 &
rm_pid=$!
i=0
while ! [ -s /tmp/rm/client.key ]; do
    i=$((i + 1)); [ $i -lt 300 ] || {{ cat /tmp/rm.log; exit 1; }}; sleep 0.1
done
maru-server --host 127.0.0.1 --port 5555 --rm-address 127.0.0.1:9850 \
    --rm-key-file /tmp/rm/client.key --state-dir /tmp/mds >/tmp/mds.log 2>&1 &
mds_pid=$!
export MARU_RM_KEY_FILE=/tmp/rm/client.key
rc=0
for cmd in store retrieve; do
    i=0
    until /tmp/maru-example $cmd --server tcp://127.0.0.1:5555 --key chroot \
            --size 1M --pattern 5 --pool-size 16M; do
        # maru-server may not listen yet: "cannot connect"
        i=$((i + 1)); [ $i -lt 50 ] || {{ rc=1; break; }}; sleep 0.2
    done
done
ldd /tmp/maru-example | grep libmaru
kill $mds_pid $rm_pid; wait || true
rm -f /dev/shm/{pool}
[ $rc = 0 ] || {{ cat /tmp/rm.log /tmp/mds.log; exit 1; }}
echo chroot-ok
"""


def test_deb_chroot(deb, tmp_path):
    """The package installed with apt into a clean Debian system (a chroot
    given as MARU_TEST_CHROOT, e.g. made with
    `mmdebstrap --variant=apt --include=systemd bookworm DIR`; it is not
    changed: an overlay holds the install): dependencies resolve, the
    ldconfig trigger runs, the units verify, and the installed daemons and
    libmaru serve maru-example in a network namespace of their own."""
    chroot = os.environ.get("MARU_TEST_CHROOT")
    if not chroot:
        pytest.skip("MARU_TEST_CHROOT is not set (a Debian chroot to install the .deb "
                    "into: mmdebstrap --variant=apt --include=systemd bookworm DIR)")
    if os.geteuid() != 0:
        pytest.skip("installing into a chroot needs root")
    need("unshare", "ip", "mount")
    if not os.access(os.path.join(chroot, "usr/bin/apt-get"), os.X_OK):
        pytest.fail(f"MARU_TEST_CHROOT={chroot} holds no Debian system")
    path, _ = deb
    upper, work, merged = (str(tmp_path / d) for d in ("upper", "work", "root"))
    for d in (upper, work, merged):
        os.makedirs(d)
    os.makedirs(os.path.join(upper, "tmp"))
    os.chmod(os.path.join(upper, "tmp"), 0o1777)    # as the chroot's own /tmp
    shutil.copyfile(path, os.path.join(upper, "tmp", "maru.deb"))
    shutil.copyfile(os.path.join(BUILD, "examples", "maru-example"),
                    os.path.join(upper, "tmp", "maru-example"))
    os.chmod(os.path.join(upper, "tmp", "maru-example"), 0o755)
    units = " ".join(f"/usr/lib/systemd/system/{u}" for u in UNITS)
    pool = f"maru-chroot-{os.getpid()}"
    with open(os.path.join(upper, "tmp", "run.sh"), "w") as f:
        f.write(CHROOT_SCRIPT.format(units=units, pool=pool))
    mount = (f"mount -t overlay overlay -o lowerdir={chroot},upperdir={upper},"
             f"workdir={work} {merged} && mount -t proc proc {merged}/proc && "
             f"mount --rbind /dev {merged}/dev")
    # offline when the chroot has the dependencies; else apt fetches them
    # (the host's network, package lists updated first)
    install = "apt-get install -y -q --no-install-recommends /tmp/maru.deb"
    run(["unshare", "-m", "sh", "-c",
         f"{mount} && chroot {merged} env DEBIAN_FRONTEND=noninteractive sh -c "
         f"'{install} || {{ apt-get update -q && {install}; }}'"], timeout=300)
    out = run(["unshare", "-mn", "sh", "-c",
               f"ip link set lo up && {mount} && chroot {merged} sh /tmp/run.sh"],
              timeout=120, both=True)
    assert "chroot-ok" in out, out
    assert re.search(r"libmaru\.so\.0 => /(usr/)?lib/", out), out
