# SPDX-License-Identifier: Apache-2.0
"""Command-line conventions of every installed program.

* --version prints "<name> <project version>" (the version of CMakeLists.txt's
  project()) and --help prints the usage to stdout, both exit 0;
* bad usage (unknown option, bad value, missing argument) exits 2 with a
  message on stderr; a runtime failure exits 1;
* log lines: MARU_LOG_FORMAT=plain (an ISO-8601 UTC timestamp with
  milliseconds and the level first), json (one object a line), journal
  ("<N>" prefix), and the default chosen by whether stderr is the stream
  JOURNAL_STREAM names (the daemons and libmaru's default sink);
* `cmake --install` puts the man pages into share/man/manN, and they are
  readable man pages of this version.
"""
import gzip
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import (BUILD_DIR, MDS_BIN, POOL_MONITOR_BIN, REPO, RM_BIN,
                      ResourceManager, binary, free_port, wait_until)

KEYGEN_BIN = ("tools", "keygen", "maru-keygen")
MARUTOP_BIN = ("tools", "marutop", "marutop")
EXAMPLE_BIN = ("examples", "maru-example")
AGENT_BIN = ("src", "agent", "maru-agent")
PROGRAMS = {
    "maru-resource-manager": RM_BIN,
    "maru-server": MDS_BIN,
    "maru-agent": AGENT_BIN,
    "pool_monitor": POOL_MONITOR_BIN,
    "marutop": MARUTOP_BIN,
    "maru-keygen": KEYGEN_BIN,
}
# the man pages cmake --install puts under <prefix>/share/man
MAN_PAGES = {
    "man8/maru-resource-manager.8": "MARU-RESOURCE-MANAGER",
    "man8/maru-server.8": "MARU-SERVER",
    "man8/maru-agent.8": "MARU-AGENT",
    "man1/pool_monitor.1": "POOL_MONITOR",
    "man1/marutop.1": "MARUTOP",
    "man1/maru-keygen.1": "MARU-KEYGEN",
    "man3/libmaru.3": "LIBMARU",
}
LEVELS = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"}
# 2026-12-03T12:34:56.789Z info maru-server: text
PLAIN_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) "
                      r"(emerg|alert|crit|error|warn|notice|info|debug) "
                      r"([\w.-]+): (.*)$")
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*maru\s+VERSION\s+([0-9][0-9.]*)", f.read())
    assert m, "no project(maru VERSION x.y.z) in CMakeLists.txt"
    return m.group(1)


def run(argv, env=None, timeout=30):
    return subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_version(name):
    p = run([binary(*PROGRAMS[name]), "--version"])
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{name} {project_version()}\n"
    assert p.stderr == ""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_help(name):
    p = run([binary(*PROGRAMS[name]), "--help"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"Usage: {name}"), p.stdout
    assert "--version" in p.stdout and "Exit status:" in p.stdout
    assert p.stderr == ""


BAD_USAGE = [
    # (program, argv, text on stderr)
    ("maru-resource-manager", ["--bogus"], "unrecognized option"),
    ("maru-resource-manager", ["--port"], "requires an argument"),
    ("maru-resource-manager", ["--port", "0"], "invalid port"),
    ("maru-resource-manager", ["--emulate-size", "1M"], "invalid emulate-size"),
    ("maru-resource-manager", ["--pool", ""], "invalid pool: ''"),
    ("maru-resource-manager", ["extra"], "unexpected argument"),
    ("maru-server", ["--bogus"], "unrecognized option"),
    ("maru-server", ["--port"], "requires an argument"),
    ("maru-server", ["--port", "x"], "invalid port: x (must be 1-65535)"),
    ("maru-server", ["--durability", "maybe"], "invalid durability: maybe (one of none, process or host)"),
    ("maru-server", ["extra"], "unexpected argument"),
    ("maru-server", ["--log-level", "loud"], "invalid log-level: loud"),
    ("maru-agent", ["--bogus"], "maru-agent: unrecognized option"),
    ("maru-agent", ["--port", "0"], "invalid port"),
    ("maru-agent", ["--rm-address", "nocolon"], "invalid rm-address"),
    ("maru-agent", ["--recheck-ms", "1"], "invalid recheck-ms"),
    ("maru-agent", ["extra"], "unexpected argument"),
    ("pool_monitor", ["--bogus"], "pool_monitor: unrecognized option"),
    ("pool_monitor", ["--watch"], "requires an argument"),
    ("pool_monitor", ["--count", "-1"], "invalid count"),
    ("pool_monitor", ["--address", "nocolon"], "invalid address"),
    ("marutop", ["--bogus"], "marutop: unrecognized option"),
    ("marutop", ["-w"], "requires an argument"),
    ("marutop", ["--count", "-1"], "invalid count"),
    ("marutop", ["--server", "nocolon"], "invalid server"),
    ("maru-keygen", ["--bogus"], "maru-keygen: unrecognized option"),
    ("maru-keygen", [], "a NAME to write, or --public CERT-FILE"),
    ("maru-keygen", ["a", "b"], "unexpected argument: b"),
    ("maru-keygen", ["--public", "x.key", "a"], "--public takes no NAME"),
]


@pytest.mark.parametrize("name,args,text", BAD_USAGE)
def test_bad_usage_exits_2(name, args, text):
    p = run([binary(*PROGRAMS[name]), *args])
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert text in p.stderr, (args, p.stderr)
    assert p.stdout == ""


def test_options_before_version_are_parsed():
    # values are checked as they come; a level in any case is a level
    # (upstream's names, and the lower-case ones the log knows)
    for level in ("DEBUG", "warning", "Error", "warn"):
        p = run([binary(*MDS_BIN), "--log-level", level, "--version"])
        assert p.returncode == 0, (level, p.stderr)
    p = run([binary(*MDS_BIN), "--port", "0", "--version"])
    assert p.returncode == 2 and "invalid port: 0" in p.stderr


def test_runtime_failure_exits_1(tmp_path):
    # maru-server pointed at a resource manager that is not there
    p = run([binary(*MDS_BIN), "--port", str(free_port()), "--rm-address",
             f"127.0.0.1:{free_port()}", "--durability", "none",
             "--rm-wait", "0"])
    assert p.returncode == 1, p.stderr
    assert "Resource manager is not running" in p.stderr
    # the resource manager on a state directory it cannot make (a file is
    # in the way: also refused to root)
    (tmp_path / "file").write_text("")
    pool = f"/dev/shm/maru-test-cli-{os.getpid()}"
    try:
        p = run([binary(*RM_BIN), "--port", str(free_port()), "--state-dir",
                 str(tmp_path / "file" / "state"), "--pool", pool,
                 "--emulate-size", "8M"])
    finally:
        if os.path.exists(pool):
            os.unlink(pool)
    assert p.returncode == 1, p.stderr
    assert "Not a directory" in p.stderr
    # pool_monitor against nothing
    p = run([binary(*POOL_MONITOR_BIN), "--address", f"127.0.0.1:{free_port()}"])
    assert p.returncode == 1 and p.stderr.startswith("pool_monitor: ")
    # marutop against nothing
    p = run([binary(*MARUTOP_BIN), "--once", "--server",
             f"tcp://127.0.0.1:{free_port()}"])
    assert p.returncode == 1 and p.stderr.startswith("marutop: ")
    # maru-keygen on a certificate that is not there
    p = run([binary(*KEYGEN_BIN), "--public", str(tmp_path / "none.key")])
    assert p.returncode == 1 and p.stderr.startswith("maru-keygen: ")


def log_env(**kw):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MARU_LOG_FORMAT", "JOURNAL_STREAM")}
    env.update(kw)
    return env


def rm_lines(tmp_path, env, state_dir=None):
    """Start a resource manager with @env, wait for "ready", stop it; the
    lines of its stderr."""
    r = ResourceManager(str(tmp_path), emulate_size="8M", state_dir=state_dir)
    r.env = env
    try:
        r.start()
        assert wait_until(lambda: "ready" in r.log(), timeout=30), r.log()
    finally:
        r.cleanup()
    return r.log().splitlines(), r


def test_log_plain(tmp_path):
    lines, r = rm_lines(tmp_path, log_env(MARU_LOG_FORMAT="plain"))
    assert lines
    for line in lines:
        m = PLAIN_RE.match(line)
        assert m, line
        assert m.group(3) == "maru-resource-manager"
    assert any(PLAIN_RE.match(l).group(2) == "info" and
               "ready" in l for l in lines)
    assert any(PLAIN_RE.match(l).group(2) == "debug" for l in lines)


def test_log_default_is_plain_off_the_journal(tmp_path):
    # no JOURNAL_STREAM, or one that names another file than stderr
    for env in (log_env(), log_env(JOURNAL_STREAM="1:1")):
        lines, _ = rm_lines(tmp_path, env)
        assert lines and all(PLAIN_RE.match(l) for l in lines), lines[:3]


def test_log_journal(tmp_path):
    lines, r = rm_lines(tmp_path, log_env(MARU_LOG_FORMAT="journal"))
    assert lines
    for line in lines:
        assert re.match(r"^<[0-7]>maru-resource-manager: ", line), line
    assert any(l.startswith("<6>") and "ready" in l for l in lines)
    assert any(l.startswith("<7>") for l in lines)


def test_log_default_is_journal_on_journal_stream(tmp_path):
    """As systemd documents: journal lines only when stderr's dev:inode is
    JOURNAL_STREAM's (here the log file stands in for the journal's
    socket)."""
    r = ResourceManager(str(tmp_path), emulate_size="8M")
    open(r.log_path, "ab").close()
    st = os.stat(r.log_path)
    r.env = log_env(JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
    try:
        r.start()
        assert wait_until(lambda: "ready" in r.log(), timeout=30), r.log()
    finally:
        r.cleanup()
    lines = r.log().splitlines()
    assert lines and all(re.match(r"^<[0-7]>maru-resource-manager: ", l)
                         for l in lines), lines[:3]


def test_log_json(tmp_path):
    # a state directory whose name needs escaping: quote, backslash, tab,
    # and a byte that is not UTF-8 (written as U+FFFD)
    odd = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)),
                                   b'st"a\\te\t\xff'))
    lines, r = rm_lines(tmp_path, log_env(MARU_LOG_FORMAT="json"),
                        state_dir=odd)
    assert lines
    objs = [json.loads(line) for line in lines]
    for o in objs:
        assert set(o) == {"ts", "level", "ident", "msg"}, o
        assert TS_RE.match(o["ts"]) and o["level"] in LEVELS, o
        assert o["ident"] == "maru-resource-manager"
    assert any(o["level"] == "info" and o["msg"].startswith("ready")
               for o in objs)
    want = os.path.join(str(tmp_path), 'st"a\\te\t\ufffd')
    assert any(o["msg"].endswith(want) for o in objs), \
        [o["msg"] for o in objs if "state dir" in o["msg"]]


def test_log_maru_server_and_unknown_format(tmp_path):
    """maru-server logs through the same code; an unknown MARU_LOG_FORMAT
    is said once, and the default is used."""
    p = run([binary(*MDS_BIN), "--port", str(free_port()), "--rm-address",
             f"127.0.0.1:{free_port()}", "--durability", "none",
             "--rm-wait", "0"],
            env=log_env(MARU_LOG_FORMAT="fancy"))
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert lines and all(PLAIN_RE.match(l) for l in lines), lines
    assert PLAIN_RE.match(lines[0]).group(4) == \
        "MARU_LOG_FORMAT=fancy: not plain, journal or json; using plain"
    assert PLAIN_RE.match(lines[-1]).group(2) == "error"
    p = run([binary(*MDS_BIN), "--port", str(free_port()), "--rm-address",
             f"127.0.0.1:{free_port()}", "--durability", "none",
             "--rm-wait", "0"],
            env=log_env(MARU_LOG_FORMAT="json"))
    objs = [json.loads(l) for l in p.stderr.splitlines()]
    assert objs and {o["ident"] for o in objs} == {"maru-server"}
    assert objs[-1]["level"] == "error"


def test_log_libmaru_default_sink(tmp_path):
    """libmaru's own stderr lines (MARU_LOG set, no sink installed) take
    the same formats, with "libmaru" as the ident."""
    argv = [binary(*EXAMPLE_BIN), "store", "--server",
            f"tcp://127.0.0.1:{free_port()}", "--key", "k", "--size", "1M",
            "--timeout-ms", "500"]
    p = run(argv, env=log_env(MARU_LOG="err", MARU_LOG_FORMAT="plain"))
    assert p.returncode != 0
    mine = [PLAIN_RE.match(l) for l in p.stderr.splitlines()
            if "libmaru:" in l]
    assert mine and all(m and m.group(3) == "libmaru" and
                        m.group(2) == "error" for m in mine), p.stderr
    p = run(argv, env=log_env(MARU_LOG="err", MARU_LOG_FORMAT="json"))
    objs = [json.loads(l) for l in p.stderr.splitlines() if l.startswith("{")]
    assert objs and all(o["ident"] == "libmaru" and o["level"] == "error"
                        for o in objs), p.stderr
    p = run(argv, env=log_env(MARU_LOG="err", MARU_LOG_FORMAT="journal"))
    assert re.search(r"^<3>libmaru: ", p.stderr, re.M), p.stderr


def test_man_pages_installed(tmp_path):
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed")
    cache = os.path.join(BUILD_DIR, "CMakeCache.txt")
    if "MARU_MAN_PAGES:BOOL=OFF" in open(cache).read():
        pytest.skip(f"{BUILD_DIR} is configured with -DMARU_MAN_PAGES=OFF")
    prefix = tmp_path / "prefix"
    p = subprocess.run([cmake, "--install", BUILD_DIR, "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    version = project_version()
    groff = shutil.which("groff")
    for rel, title in MAN_PAGES.items():
        # compressed as Debian ships them, SEE ALSO naming the installed
        # documentation
        path = prefix / "share" / "man" / (rel + ".gz")
        assert path.is_file(), f"{rel}.gz not installed:\n{p.stdout}"
        assert not (prefix / "share" / "man" / rel).exists()
        text = gzip.decompress(path.read_bytes()).decode()
        assert "MARU_DOCDIR" not in text and "source tree" not in text
        for doc in re.findall(r"([\w/.-]*/share/doc/maru)(?:/[\w/.-]*)?",
                              text):
            assert doc == f"{prefix}/share/doc/maru", (rel, doc)
        see = text[text.index("SEE ALSO"):]
        docs = re.findall(r"[\w/-]+\.(?:md|c)\b", see)
        assert docs, (rel, see)
        for d in docs:  # every document it names is installed
            assert (prefix / "share" / "doc" / "maru" / d).is_file(), (rel, d)
        th = next(l for l in text.splitlines() if l.startswith(".TH "))
        section = rel.rsplit(".", 1)[1]
        assert th.startswith(f'.TH "{title}" "{section}"') or \
            th.startswith(f'.TH {title} "{section}"'), th
        assert version in th, th
        for sh in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
            assert re.search(rf'^\.SH "?{sh}"?$', text, re.M), (rel, sh)
        if groff:
            # (as the package has it: the test's long prefix would not
            # fit a line)
            shown_text = text.replace(f"{prefix}/share/doc/maru",
                                      "/usr/share/doc/maru")
            out = subprocess.run([groff, "-man", "-Tutf8", "-ww"],
                                 input=shown_text,
                                 capture_output=True, text=True, timeout=60)
            shown = re.sub(".\x08", "", out.stdout)     # overstrikes
            assert out.returncode == 0, out.stderr
            assert f"{title}({section})" in shown and "\nNAME\n" in shown
            assert "warning" not in out.stderr, (rel, out.stderr)
    # the programs' pages are their --help: every option is in the page
    for name, page in (("maru-server", "man8/maru-server.8"),
                       ("maru-resource-manager", "man8/maru-resource-manager.8"),
                       ("pool_monitor", "man1/pool_monitor.1")):
        helptext = run([binary(*PROGRAMS[name]), "--help"]).stdout
        text = gzip.decompress((prefix / "share" / "man" / (page + ".gz"))
                               .read_bytes()).decode().replace("\\-", "-")
        for opt in set(re.findall(r"--[a-z][a-z-]+", helptext)):
            assert opt in text, (page, opt)
        for sh in ("OPTIONS", "ENVIRONMENT"):
            assert re.search(rf'^\.SH "?{sh}"?$', text, re.M), (page, sh)
