#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""pool-monitor-shots.py - the terminal captures of docs/pool-monitor.md

Starts a resource manager from the build tree on two emulated 512 MiB pools
(/dev/shm/maru-pool and one with a long name), allocates from both, runs
`pool_monitor -w 2` in a detached tmux session at 160x20, allocates once
more (a Delta), resizes the window to 60 columns and presses `?`.  Each
screen is read with `tmux capture-pane -p` once it shows what it should
(polled with a deadline).  Writes:

    OUT/pool-monitor-160.txt    the 160-column screen
    OUT/pool-monitor-60.txt     the same pools at 60 columns
    OUT/pool-monitor-help.txt   60 columns with the help box
    PNG                         the 160 and the 60+help screens rendered in
                                DejaVu Sans Mono (matplotlib), with --png

Usage (from the repository, after ./dev.sh setup):
    .venv/bin/python scripts/pool-monitor-shots.py --out /tmp/shots \
        --png docs/img/pool-monitor.png

Needs tmux; --png needs python3-matplotlib.  Uses port 19851 and removes
the pool files it made.  /dev/shm/maru-pool must not be in use.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import rm_wire  # noqa: E402  (the tests' independent protocol client)

MiB = 1 << 20
POOLS = ["/dev/shm/maru-pool",
         "/dev/shm/maru-node1-7c9e6679-7425-40de-944b-e07fc1f90ae7"]


def until(pred, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    sys.exit(f"pool-monitor-shots: timed out waiting for {what}")


def trimmed(screen):
    lines = [ln.rstrip() for ln in screen.rstrip("\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def capture(build, port):
    tmp = tempfile.mkdtemp(prefix="pm-shots-")
    state, sock = os.path.join(tmp, "state"), os.path.join(tmp, "tmux.sock")
    addr = f"127.0.0.1:{port}"
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", TERM="xterm-256color",
               MARU_RM_KEY_FILE=os.path.join(state, "client.key"))
    for p in POOLS:
        if os.path.exists(p):
            sys.exit(f"pool-monitor-shots: {p} exists (in use?)")
    rm = subprocess.Popen(
        [os.path.join(build, "src", "resource_manager", "maru-resource-manager"),
         "--port", str(port), "--state-dir", state, "--pool", POOLS[0],
         "--pool", POOLS[1], "--emulate-size", "512M"],
        stderr=open(os.path.join(tmp, "rm.log"), "w"))

    def tmux(*a, check=True):
        return subprocess.run(["tmux", "-u", "-S", sock, *a], env=env, text=True,
                              capture_output=True, check=check).stdout

    def screen_with(pred):
        return lambda: (lambda s: s if pred(s) else None)(
            tmux("capture-pane", "-p", "-t", "pm"))

    try:
        key = os.path.join(state, "client.key")
        until(lambda: os.path.exists(key) and os.path.getsize(key) > 0, "the key")
        rm_wire.KEYS[addr] = rm_wire.load_key(key)

        def connect():
            try:
                return rm_wire.RmConn(addr)
            except OSError:
                return None
        a, b = until(connect, "the resource manager"), rm_wire.RmConn(addr)
        for size, path in ((32 * MiB, POOLS[0]),) * 3 + ((64 * MiB, POOLS[0]),) + \
                ((96 * MiB, POOLS[1]),) * 2:
            r = (a if path == POOLS[0] else b).alloc(size, path)
            assert r.status == 0, r
        argv = [os.path.join(build, "tools", "pool_monitor", "pool_monitor"),
                "-w", "2", "--address", addr]
        tmux("-f", "/dev/null", "new-session", "-d", "-s", "pm", "-x", "160",
             "-y", "20", shlex.join(argv))
        until(screen_with(lambda s: re.search(r"maru-pool .*\] \d", s)), "a frame")
        assert a.alloc(64 * MiB, POOLS[0]).status == 0
        wide = until(screen_with(lambda s: "+64.0M" in s), "the Delta")
        tmux("resize-window", "-t", "pm", "-x", "60", "-y", "20")
        narrow = until(screen_with(lambda s: "\u2026" in s and "+64.0M" not in s),
                       "the 60-column layout")
        tmux("send-keys", "-t", "pm", "?")
        helpv = until(screen_with(lambda s: "show or hide" in s), "the help")
        return trimmed(wide), trimmed(narrow), trimmed(helpv)
    finally:
        tmux("kill-server", check=False)
        rm.terminate()
        rm.wait()
        for p in POOLS:
            try:
                os.unlink(p)
            except OSError:
                pass


def render_png(path, panels):
    """@panels: [(caption, text, columns)], drawn one under the other as
    terminals of that many columns: light text on dark, one cell per
    character."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    pt = 9.0                      # font size, points
    cw, lh = 0.602 * pt, 1.3 * pt  # DejaVu Sans Mono cell width, line height
    margin, pad, cap_h, gap = 12.0, 8.0, 18.0, 14.0
    cols = max(c for _, _, c in panels)
    height = sum(cap_h + len(t.split("\n")) * lh + 2 * pad + gap
                 for _, t, _ in panels) - gap
    wpt, hpt = cols * cw + 2 * pad + 2 * margin, height + margin
    fig = plt.figure(figsize=(wpt / 72, hpt / 72), dpi=150)
    fig.patch.set_facecolor("white")

    def at(x, y):                 # points from the top left -> figure fraction
        return x / wpt, 1 - y / hpt

    y = margin
    for caption, text, width in panels:
        lines = text.rstrip("\n").split("\n")
        fig.text(*at(margin, y), caption, fontsize=pt + 1, va="top",
                 family="DejaVu Sans", color="#333333")
        y += cap_h
        box_w = width * cw + 2 * pad
        box_h = len(lines) * lh + 2 * pad
        x0, y0 = at(margin, y + box_h)
        fig.patches.append(Rectangle((x0, y0), box_w / wpt, box_h / hpt,
                                     transform=fig.transFigure,
                                     facecolor="#1e1e1e", edgecolor="#555555"))
        for i, ln in enumerate(lines):
            fig.text(*at(margin + pad, y + pad + i * lh), ln, fontsize=pt,
                     va="top", family="DejaVu Sans Mono",
                     color="#ffffff" if i == 0 else "#d4d4d4",
                     weight="bold" if i == 0 else "normal")
        y += box_h + gap
    fig.savefig(path, facecolor=fig.get_facecolor())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".", help="directory for the .txt captures")
    ap.add_argument("--build", default=os.environ.get("MARU_BUILD_DIR",
                                                      os.path.join(REPO, "build")))
    ap.add_argument("--port", type=int, default=19851)
    ap.add_argument("--png", metavar="FILE", help="also render the screens here")
    args = ap.parse_args()
    wide, narrow, helpv = capture(args.build, args.port)
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("160", wide), ("60", narrow), ("help", helpv)):
        with open(os.path.join(args.out, f"pool-monitor-{name}.txt"), "w") as f:
            f.write(text)
        print(text)
    if args.png:
        render_png(args.png,
                   [("pool_monitor -w 2 in a window of 160 columns", wide, 160),
                    ("the same window at 60 columns, after pressing ?", helpv, 60)])


if __name__ == "__main__":
    main()
