# SPDX-License-Identifier: Apache-2.0
"""pool_monitor end to end: the real resource manager, the real binary.

What is checked (docs/pool-monitor.md):
  * --csv rows equal the daemon's own STATS before and after allocations
    and a free (exact header, one row per pool, two-decimal usage_pct);
  * the one-shot table: title, header, a row per pool with human units
    and the usage bar;
  * -w/-c/--scroll: exactly -c frames appended; the Delta column equals the
    change of Used between consecutive frames;
  * an unreachable daemon: one line on stderr, exit status 1; in watch mode
    the error is shown in the frame and the monitor picks the daemon up
    when it appears;
  * Ctrl-C prints "Stopped.";
  * the ncurses screen drawn inside a detached tmux session.

The daemon's state is read, and allocations are made, with rm_wire (an
independent pure-Python client of the protocol).
"""
import csv
import io
import os
import re
import queue
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import POOL_MONITOR_BIN, binary, free_port, wait_until
from rm_wire import DEV_DAX, FS_DAX, RmConn

MiB = 1 << 20
TITLE_RE = re.compile(
    r"^  Maru Pool Monitor  \u2014  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d  \(Ctrl\+C to quit\)$")
LIVE_TITLE_RE = re.compile(
    r"^  Maru Pool Monitor  \u2014  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d  "
    r"\(q to quit, \? for help\)$")


def header(dev=16):
    """The header of a table whose Device column is @dev wide (the longest
    path, at least 16)."""
    return (f"  {'Device':<{dev}}  Type          Used      Free     Total     Delta"
            "  Usage")


def dashes(dev=16):
    return "  " + "-" * dev + "  --------  --------  --------  --------  --------  -----"


def dev_width(*paths):
    return max(16, *(len(p) for p in paths))
CSV_HEADER = "timestamp,dax_path,dax_type,total_bytes,free_bytes,used_bytes,usage_pct"
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")


# ---------------------------------------------------------------- wire client
class Wire:
    """rm_wire.RmConn with the shapes these tests want."""

    def __init__(self, address):
        self.conn = RmConn(address)

    def close(self):
        self.conn.close()

    def alloc(self, size):
        r = self.conn.alloc(size)
        assert r.status == 0, f"alloc({size}) failed: {r.status}"
        return r.handle

    def free(self, handle):
        assert self.conn.free(handle) == 0

    def stats(self):
        """{path: PoolStat} straight from the daemon."""
        return {p.path: p for p in self.conn.stats()}


@pytest.fixture
def wire(rm):
    w = Wire(rm.address)
    yield w
    w.close()


# ---------------------------------------------------------------- helpers
def pool_monitor(*args, timeout=30):
    return subprocess.run([binary(*POOL_MONITOR_BIN), *args], capture_output=True,
                          text=True, timeout=timeout)


def human(n):
    """The tools' size format (src/common/util.c format_bytes)."""
    if n < 1024:
        return f"{n}B"
    d, unit = float(n), -1
    while d >= 1024.0 and unit < 3:
        d /= 1024.0
        unit += 1
    return f"{d:.1f}{'KMGT'[unit]}"


def bar(used, total):
    if total == 0:
        return "[" + "?" * 30 + "]"
    filled = int(used / total * 30)
    return "[" + "#" * filled + "-" * (30 - filled) + f"] {used / total * 100:.1f}%"


def csv_rows(out):
    lines = out.splitlines()
    assert lines[0] == CSV_HEADER
    return list(csv.DictReader(io.StringIO(out)))


def check_csv_against(rows, stats):
    """Every pool the daemon reports is one CSV row with its exact numbers."""
    assert [r["dax_path"] for r in rows] == sorted(stats)
    for r in rows:
        st = stats[r["dax_path"]]
        total, free = st.total_size, st.free_size
        assert TS_RE.match(r["timestamp"]), r
        # (a DEV_DAX pool that is not a /dev/dax device: emulated)
        want = {DEV_DAX: "DEV_DAX", FS_DAX: "FS_DAX"}[st.dax_type]
        if want == "DEV_DAX" and not r["dax_path"].startswith("/dev/dax"):
            want = "EMULATED"
        assert r["dax_type"] == want
        assert int(r["total_bytes"]) == total
        assert int(r["free_bytes"]) == free
        assert int(r["used_bytes"]) == total - free
        assert r["usage_pct"] == f"{(total - free) / total * 100:.2f}"
        assert re.fullmatch(r"\d+\.\d\d", r["usage_pct"])


def table_row(path, dtype, total, free, delta="", dev=None):
    used = total - free
    dev = dev or dev_width(path)
    return (f"  {path:<{dev}}  {dtype:<8}  {human(used):>8}  {human(free):>8}  "
            f"{human(total):>8}  {delta:>8}  {bar(used, total)}")


# ---------------------------------------------------------------- tests
def test_csv_matches_daemon_state(rm, wire):
    rows = csv_rows(pool_monitor("--csv", "--address", rm.address).stdout)
    stats = wire.stats()
    assert list(stats) == [rm.pool_path]
    check_csv_against(rows, stats)
    st = stats[rm.pool_path]
    total = st.total_size
    # an emulated pool is a DEV_DAX device on the wire, shown as emulated:
    # the first alignment unit is the header, the rest is free
    assert st.dax_type == DEV_DAX and rows[0]["dax_type"] == "EMULATED"
    assert total == 256 * MiB - st.align_bytes and st.free_size == total

    handles = [wire.alloc(n) for n in (1, 5 * MiB, 64 * MiB)]
    held = sum(h.length for h in handles)
    assert held >= 1 + 5 * MiB + 64 * MiB
    res = pool_monitor("--csv", "--address", rm.address)
    assert res.returncode == 0 and res.stderr == ""
    rows = csv_rows(res.stdout)
    check_csv_against(rows, wire.stats())
    assert int(rows[0]["used_bytes"]) == held
    assert int(rows[0]["free_bytes"]) == total - held

    wire.free(handles[2])
    rows = csv_rows(pool_monitor("--csv", "--address", rm.address).stdout)
    check_csv_against(rows, wire.stats())
    assert int(rows[0]["used_bytes"]) == held - handles[2].length


def test_csv_several_pools_sorted(start_rm):
    # Two pools, given to the daemon in reverse order: rows come sorted.
    b = f"/dev/shm/maru-test-{uuid.uuid4().hex[:12]}-b"
    a = b[:-1] + "a"
    try:
        r = start_rm(emulate_size="64M", pool=b, extra=["--pool", a])
        w = Wire(r.address)
        try:
            stats = w.stats()
        finally:
            w.close()
        assert sorted(stats) == [a, b]
        rows = csv_rows(pool_monitor("--csv", "--address", r.address).stdout)
        check_csv_against(rows, stats)
    finally:
        if os.path.exists(a):
            os.unlink(a)


def test_table_one_shot(rm, wire):
    res = pool_monitor("--address", rm.address)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert TITLE_RE.match(lines[0]), lines[0]
    assert lines[1] == ""
    assert lines[2] == header(dev_width(rm.pool_path))
    assert lines[3] == dashes(dev_width(rm.pool_path))
    st = wire.stats()[rm.pool_path]
    assert lines[4] == table_row(rm.pool_path, "EMULATED", st.total_size, st.free_size)
    assert lines[4].endswith("[------------------------------] 0.0%")
    assert len(lines) == 5

    wire.alloc(64 * MiB)
    lines = pool_monitor("--address", rm.address).stdout.splitlines()
    st = wire.stats()[rm.pool_path]
    assert st.total_size - st.free_size == 64 * MiB
    # no Delta in a one-shot table: there is no previous frame
    assert lines[4] == table_row(rm.pool_path, "EMULATED", st.total_size, st.free_size)
    assert "   64.0M  " in lines[4]


def split_frames(out):
    """--scroll output -> list of frames, each a list of lines."""
    frames = []
    for line in out.splitlines():
        if TITLE_RE.match(line):
            frames.append([line])
        elif frames:
            frames[-1].append(line)
        else:
            pytest.fail(f"output before the first title: {line!r}")
    return frames


class Lines:
    """Lines of a running process's stdout, read by a thread (no blocking)."""

    def __init__(self, proc):
        self.proc, self.q, self.seen = proc, queue.Queue(), []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.q.put(line)
        self.q.put(None)

    def until(self, pattern, timeout=20.0):
        """Wait for a line matching @pattern; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            if re.search(pattern, line):
                return line
        pytest.fail(f"no line matching {pattern!r} in {self.seen!r}")

    def rest(self, timeout=30.0):
        """Wait for the process to end; return everything not yet taken."""
        self.proc.wait(timeout)
        out = []
        while (line := self.q.get(timeout=timeout)) is not None:
            out.append(line)
        return "".join(out)


def spawn_monitor(*args):
    return subprocess.Popen([binary(*POOL_MONITOR_BIN), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def reap(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    err = proc.stderr.read()
    proc.stderr.close()
    proc.stdout.close()
    return err


def test_watch_count_scroll(rm):
    res = pool_monitor("-w", "0.2", "-c", "3", "--scroll", "--address", rm.address)
    assert res.returncode == 0, res.stderr
    assert "\033[2J" not in res.stdout
    frames = split_frames(res.stdout)
    assert len(frames) == 3
    for f in frames:
        assert f[1:4] == ["", header(dev_width(rm.pool_path)),
                          dashes(dev_width(rm.pool_path))]
        assert f[4].startswith("  " + rm.pool_path + "  EMULATED")
        assert f[5:] == [""], "frames are separated by one blank line"


def test_watch_scroll_delta(rm, wire):
    """Allocate while watching: Delta shows the change once, then blank."""
    proc = spawn_monitor("-w", "0.2", "--scroll", "--address", rm.address)
    lines = Lines(proc)
    try:
        lines.until(re.escape(rm.pool_path))   # first frame drawn
        wire.alloc(64 * MiB)
        lines.until(r"\+64\.0M")               # the frame that saw it
        lines.until(TITLE_RE.pattern)           # and one frame more
        lines.until(re.escape(rm.pool_path))
        proc.send_signal(signal.SIGINT)
        out = "".join(lines.seen) + lines.rest()
    finally:
        err = reap(proc)
    assert proc.returncode == 0, err
    assert err == ""
    assert out.endswith("\n\nStopped.\n")
    frames = split_frames(out[:-len("\nStopped.\n")])
    assert len(frames) >= 3
    total = wire.stats()[rm.pool_path].total_size
    prev_used, deltas = None, []
    for f in frames:
        assert f[1:4] == ["", header(dev_width(rm.pool_path)),
                          dashes(dev_width(rm.pool_path))]
        assert f[5:] == [""]
        row = f[4]
        assert row.startswith("  " + rm.pool_path + "  EMULATED")
        used_text = row[2 + len(rm.pool_path):].split()[1]
        used = 0 if used_text == "0B" else 64 * MiB
        assert human(used) == used_text, row
        delta = ""
        if prev_used is not None and used != prev_used:
            delta = ("+" if used > prev_used else "-") + human(abs(used - prev_used))
        assert row == table_row(rm.pool_path, "EMULATED", total, total - used, delta)
        deltas.append(delta)
        prev_used = used
    # no Delta in the first frame; the allocation shows up exactly once
    assert deltas[0] == ""
    assert deltas.count("+64.0M") == 1, deltas
    assert deltas[-1] == ""
    assert prev_used == 64 * MiB


def test_watch_csv_header_once(rm, wire):
    res = pool_monitor("--csv", "-w", "0.1", "-c", "3", "--address", rm.address)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines.count(CSV_HEADER) == 1 and lines[0] == CSV_HEADER
    rows = csv_rows(res.stdout)
    assert len(rows) == 3
    check_csv_against(rows[-1:], wire.stats())


@pytest.mark.parametrize("mode", [[], ["--csv"]])
def test_unreachable_one_line(mode):
    port = free_port()
    res = pool_monitor(*mode, "--address", f"127.0.0.1:{port}")
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr == (f"pool_monitor: cannot reach the resource manager at "
                          f"127.0.0.1:{port}: Connection refused\n")


def test_bad_options():
    for args in (["-w", "x"], ["-c", "-1"], ["--address", "nohostport"], ["--bogus"]):
        res = pool_monitor(*args)
        assert res.returncode == 2, args
        assert res.stderr.startswith("pool_monitor: ")
    res = pool_monitor("--help")
    assert res.returncode == 0 and "--address" in res.stdout


def test_watch_waits_for_daemon(start_rm):
    """Unreachable at first: the error is in the frame; then pools appear."""
    port = free_port()
    proc = spawn_monitor("-w", "0.2", "--scroll", "--address", f"127.0.0.1:{port}")
    lines = Lines(proc)
    try:
        line = lines.until(r"\[error\]")
        assert line == (f"  [error] cannot reach the resource manager at "
                        f"127.0.0.1:{port}: Connection refused\n")
        r = start_rm(port=port)
        lines.until(re.escape(r.pool_path))
        proc.send_signal(signal.SIGINT)
        out = lines.rest(timeout=10)
    finally:
        err = reap(proc)
    assert proc.returncode == 0
    assert out.endswith("\nStopped.\n")
    assert err == ""


def test_ctrl_c_prints_stopped(rm):
    proc = spawn_monitor("-w", "5", "--scroll", "--address", rm.address)
    lines = Lines(proc)
    try:
        lines.until(re.escape(rm.pool_path))
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out = lines.rest(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        reap(proc)
    # stops in the middle of the 5 s wait, not after it, and says so
    assert elapsed < 4.0
    assert proc.returncode == 0
    assert out == "\n\nStopped.\n"


# ---------------------------------------------------------------- TUI
class Tmux:
    """A private tmux server (socket in the test's temp dir) with one
    detached session."""

    def __init__(self, tmp_path):
        self.sock = str(tmp_path / "tmux.sock")
        self.name = "pm"
        self.env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8",
                        TERM="xterm-256color")

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-u", "-S", self.sock, *args], env=self.env,
                              capture_output=True, text=True, check=check, timeout=10)

    def start(self, command, cols=160, rows=30):
        """Run a shell @command in the session's only pane."""
        self.run("-f", "/dev/null", "new-session", "-d", "-s", self.name,
                 "-x", str(cols), "-y", str(rows), command)
        self.run("set-option", "-t", self.name, "remain-on-exit", "on")

    def capture(self):
        return self.run("capture-pane", "-p", "-t", self.name).stdout

    def wait_for(self, pattern, timeout=15.0):
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"{pattern!r} never appeared on the screen:\n{screen}")

    def kill(self):
        self.run("kill-server", check=False)
        if os.path.exists(self.sock):  # tmux leaves its socket behind
            os.unlink(self.sock)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tui_under_tmux(rm, wire, tmp_path):
    wire.alloc(32 * MiB)
    tmux = Tmux(tmp_path)
    try:
        # -w 2: the Delta shows in one frame only; it must stay on the
        # screen long enough for a capture on a loaded machine
        argv = [binary(*POOL_MONITOR_BIN), "-w", "2", "--address", rm.address]
        tmux.start(shlex.join(argv) + '; echo "pool_monitor exited with $?"')
        # wait for the whole row: a capture may catch a frame half drawn
        screen = tmux.wait_for(re.escape(rm.pool_path) + r".*\] 12\.\d%")
        lines = screen.splitlines()
        # full-screen ncurses: the frame starts at the top-left corner
        # the live title names its keys
        assert LIVE_TITLE_RE.match(lines[0]), lines[0]
        assert lines[1] == ""
        assert lines[2] == header(dev_width(rm.pool_path))
        assert lines[3] == dashes(dev_width(rm.pool_path))
        st = wire.stats()[rm.pool_path]
        assert lines[4].rstrip() == table_row(rm.pool_path, "EMULATED", st.total_size,
                                              st.free_size)
        assert "   32.0M  " in lines[4]

        # the next frame shows a new allocation and its Delta
        wire.alloc(64 * MiB)
        screen = tmux.wait_for(r"\+64\.0M .*\] 37\.\d%")
        assert "96.0M" in screen

        tmux.run("send-keys", "-t", tmux.name, "C-c")
        screen = tmux.wait_for(r"Stopped\.")
        # the shell around it reports pool_monitor's exit status
        tmux.wait_for(r"pool_monitor exited with 0")
    finally:
        tmux.kill()


# ---------------------------------------------------------------- fitting the window
# A pool path longer than any window's share for it: at 60 columns it must be
# elided in the middle, at 160 shown whole.
LONG_POOL = f"/dev/shm/maru-test-{uuid.uuid4()}"


@pytest.fixture
def long_rm(start_rm):
    """conftest's rm, with two pools, one of them with a long path."""
    short = f"/dev/shm/maru-t-{uuid.uuid4().hex[:8]}"
    try:
        yield start_rm(pool=LONG_POOL, extra=["--pool", short])
    finally:
        if os.path.exists(short):
            os.unlink(short)


@pytest.fixture
def long_mds(long_rm, start_mds):
    """conftest's mds, on long_rm."""
    return start_mds(long_rm.address)


@pytest.fixture
def long_wire(long_rm):
    w = Wire(long_rm.address)
    yield w
    w.close()


def parse_screen(screen):
    """A captured live frame -> (title, header words, {device: {col: text}}).

    Cells are found where the header says they are: Device, Type and the
    bar start under their heading, numbers end under theirs.  A cell that
    is not where it should be is None; text outside every cell is listed
    in row["_extra"].  So a misaligned or cut row does not parse."""
    lines = screen.splitlines()
    head = next((ln for ln in lines if ln.startswith("  Device")), None)
    if head is None:
        return lines[0] if lines else "", [], {}
    hcols = [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", head)]
    rows = {}
    for ln in lines:
        if not ln.startswith("  /"):
            continue
        toks = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", ln)]
        row, taken = {}, set()
        for name, hs, he in hcols:
            if name == "Usage" and ln[hs:hs + 1] == "[":
                row[name] = ln[hs:].strip()       # the bar and the percentage
                taken |= {t for t in toks if t[0] >= hs}
                continue
            left = name in ("Device", "Type")
            hit = [t for t in toks if (t[0] == hs if left else t[1] == he)]
            row[name] = hit[0][2] if hit else ("" if name == "Delta" else None)
            taken |= set(hit)
        row["_extra"] = [t[2] for t in toks if t not in taken]
        rows[row["Device"] or ln] = row
    return lines[0], [c[0] for c in hcols], rows


def expected_cells(st, path):
    used, total = st.total_size - st.free_size, st.total_size
    typ = {DEV_DAX: "DEV_DAX", FS_DAX: "FS_DAX"}[st.dax_type]
    if typ == "DEV_DAX" and not path.startswith("/dev/dax"):
        typ = "EMULATED"   # a file the resource manager treats as a device
    return {"Type": typ,
            "Used": human(used), "Free": human(st.free_size), "Total": human(total),
            "Delta": "", "pct": f"{used / total * 100:.1f}%", "bar": bar(used, total)}


def shown_path(shown, path):
    """@shown is @path, or its head and tail around one '…'."""
    if shown == path:
        return True
    if shown.count("\u2026") != 1:
        return False
    head, tail = shown.split("\u2026")
    return (path.startswith(head) and path.endswith(tail) and len(head) >= 4
            and len(tail) >= 4 and len(shown) < len(path))


def frame_problems(screen, stats, width, live=True):
    """What is wrong with @screen for a @width-column window, [] if nothing.
    Every value shown must be the one STATS gives, whole."""
    title, cols, rows = parse_screen(screen)
    probs = []
    if live and not re.search(r"\(q (to )?quit, \? (for )?help\)$", title):
        probs.append(f"title does not name q and ?: {title!r}")
    if not live and not title.startswith("  Maru Pool Monitor  \u2014  "):
        probs.append(f"not the plain title: {title!r}")
    for ln in screen.splitlines():
        if len(ln) > width:
            probs.append(f"line wider than {width}: {ln!r}")
    wanted = (["Device", "Type", "Used", "Free", "Total", "Delta", "Usage"]
              if width >= 160 else ["Device", "Used", "Free", "Total", "Usage"])
    if cols != wanted:
        probs.append(f"columns {cols} != {wanted}")
        return probs
    by_path = {}
    for shown, row in rows.items():
        match = [p for p in stats if shown_path(shown, p)]
        if len(match) != 1:
            probs.append(f"row {shown!r} is none of {sorted(stats)}")
            continue
        by_path[match[0]] = row
    if sorted(by_path) != sorted(stats):
        probs.append(f"pools shown {sorted(by_path)} != {sorted(stats)}")
    for path, row in by_path.items():
        exp = expected_cells(stats[path], path)
        for c in cols[1:]:
            want = (exp["bar"] if width >= 160 else exp["pct"]) if c == "Usage" else exp[c]
            if row[c] != want:
                probs.append(f"{path}: {c} shows {row[c]!r}, STATS says {want!r}")
        if row["_extra"]:
            probs.append(f"{path}: unexpected {row['_extra']}")
    long_row = next((r for p, r in by_path.items() if p == LONG_POOL), None)
    if long_row is not None:
        if width >= 160 and long_row["Device"] != LONG_POOL:
            probs.append(f"long path not whole at {width}: {long_row['Device']!r}")
        if width < 160 and "\u2026" not in long_row["Device"]:
            probs.append(f"long path not elided at {width}: {long_row['Device']!r}")
    return probs


def wait_frame(tmux, wire, width, timeout=20.0):
    """Poll the pane until it shows a correct @width frame; return it."""
    deadline = time.monotonic() + timeout
    probs, screen = ["never captured"], ""
    while time.monotonic() < deadline:
        screen = tmux.capture()
        probs = frame_problems(screen, wire.stats(), width)
        if not probs:
            return screen
        time.sleep(0.1)
    pytest.fail("\n".join(probs) + "\nscreen:\n" + screen)


HELP_LINE = "?         show or hide this help"


def use_the_pool(mds):
    """A real client through the metadata server: it takes a region from
    the resource manager and stores a key in it."""
    from maru import MaruConfig, MaruHandler
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=24 * MiB,
                               chunk_size_bytes=MiB, timeout_ms=10000,
                               auto_connect=False))
    assert h.connect(), "connect failed"
    data = bytes(range(256)) * 16
    ah = h.alloc(size=len(data))
    ah.buf[:] = data
    assert h.store(key="pool-monitor", handle=ah)
    assert bytes(h.retrieve("pool-monitor").view) == data
    return h


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("first,then", [((160, 40), (60, 20)), ((60, 20), (160, 40))])
def test_tui_fits_window(long_rm, long_mds, long_wire, tmp_path, first, then):
    rm, wire = long_rm, long_wire
    handler = use_the_pool(long_mds)
    held = wire.alloc(40 * MiB)
    stats = wire.stats()
    assert sorted(stats) == sorted([LONG_POOL, *(p for p in stats if p != LONG_POOL)])
    assert any(st.free_size < st.total_size for st in stats.values())
    tmux = Tmux(tmp_path)
    try:
        argv = [binary(*POOL_MONITOR_BIN), "-w", "0.5", "--address", rm.address]
        tmux.start(shlex.join(argv) + '; echo "pool_monitor exited with $?"',
                   cols=first[0], rows=first[1])
        screen = wait_frame(tmux, wire, first[0])
        assert HELP_LINE not in screen

        # ? shows the keys over the table, ? again hides them
        tmux.run("send-keys", "-t", tmux.name, "?")
        screen = tmux.wait_for(re.escape(HELP_LINE))
        assert "q, Q      quit" in screen and "Keys" in screen
        tmux.run("send-keys", "-t", tmux.name, "?")
        assert wait_until(lambda: HELP_LINE not in tmux.capture(), timeout=15), \
            "the help box stayed:\n" + tmux.capture()
        wait_frame(tmux, wire, first[0])

        # the window changes size: the next layout comes without a key
        tmux.run("resize-window", "-t", tmux.name, "-x", str(then[0]),
                 "-y", str(then[1]))
        wait_frame(tmux, wire, then[0])

        # a new allocation is seen, and still every number is STATS's
        wire.alloc(16 * MiB)
        wait_frame(tmux, wire, then[0])

        tmux.run("send-keys", "-t", tmux.name, "?")
        tmux.wait_for(re.escape(HELP_LINE))
        tmux.run("send-keys", "-t", tmux.name, "q")
        tmux.wait_for(r"pool_monitor exited with 0")
    finally:
        tmux.kill()
        handler.close()
    assert held.length >= 40 * MiB


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_one_shot_fits_terminal(long_rm, long_wire, tmp_path):
    """A one-shot table printed on a 60-column terminal is narrowed like the
    live view (a pipe gets the full table: test_table_one_shot)."""
    rm, wire = long_rm, long_wire
    wire.alloc(40 * MiB)
    tmux = Tmux(tmp_path)
    try:
        argv = [binary(*POOL_MONITOR_BIN), "--address", rm.address]
        # the shell waits for a line that never comes: the pane stays
        tmux.start(shlex.join(argv) + '; echo "pool_monitor exited with $?"; read -r _',
                   cols=60, rows=20)
        screen = tmux.wait_for(r"pool_monitor exited with 0")
    finally:
        tmux.kill()
    table = screen[:screen.index("pool_monitor exited")]
    assert frame_problems(table, wire.stats(), 60, live=False) == [], table


def test_agents_shown(rm, start_mds, start_agent):
    """--agent: each maru-agent's sessions, the regions it lends and the
    bytes stored and read through it (docs/remote.md), with rates in watch
    mode; an agent that cannot be asked is shown down, with why."""
    from maru_common.config import MaruConfig
    from maru_handler import MaruHandler

    mds = start_mds(rm.address)
    agent = start_agent(rm.address)
    h = MaruHandler(MaruConfig(server_url=mds.url, rm_address=rm.address,
                               agent_url=f"tcp://127.0.0.1:{agent.port}",
                               remote="on", pool_size=4 << 20,
                               chunk_size_bytes=1 << 20))
    assert h.connect()
    try:
        a = h.alloc(1 << 20)
        a.buf[:] = b"x" * (1 << 20)
        assert h.store("k", a)
        assert bytes(h.retrieve("k").view[:1]) == b"x"
        down = f"tcp://127.0.0.1:{free_port()}"
        p = pool_monitor("--address", rm.address, "--agent",
                         f"tcp://127.0.0.1:{agent.port}", "--agent", down)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        i = lines.index("maru-agent (hosts without a CXL link):")
        ours, other = lines[i + 1], lines[i + 2]
        assert ours.startswith(f"  tcp://127.0.0.1:{agent.port}: ")
        assert "1 region(s) lent (4.0M)" in ours, ours
        assert "stored 1.0M" in ours and "read 1.0M" in ours, ours
        assert "0 refused" in ours, ours
        assert other.startswith(f"  {down}: down: ") and \
            "connection refused" in other, other
        # watch mode: rates against the frame before
        p = pool_monitor("--address", rm.address, "--agent",
                         f"tcp://127.0.0.1:{agent.port}", "-w", "0.2", "-c",
                         "2", "--scroll")
        assert p.returncode == 0, p.stderr
        assert re.search(r"stored 1\.0M \([\d.]+[KMG]?B?/s\)", p.stdout), \
            p.stdout
    finally:
        h.close()
