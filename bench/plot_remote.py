#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_remote.py - GB/s against value size for the remote path
(bench/run_remote_bench.sh): ucx_perftest's floor, maru through
maru-agent, and Redis, all across the same veth.

  plot_remote.py RESULTS PNG

RESULTS holds the RESULT lines of bench/remote_bench.py (the medians over
the runs in it are plotted).  Two panels: one operation at a time (ucx
put one way, maru store and retrieve, Redis SET and GET), and
streaming with BATCH in flight (ucx -O BATCH, maru batch_store and
batch_retrieve, Redis pipelined SET and MGET).
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_bench  # noqa: E402

# (sys, op, label, colour, line style)
SINGLE = [
    ("ucx", "put_lat", "ucx put (one way)", "tab:gray", "--"),
    ("maru", "store", "maru store", "tab:blue", "-"),
    ("maru", "retrieve", "maru retrieve", "tab:orange", "-"),
    ("redis", "set", "Redis SET", "tab:red", ":"),
    ("redis", "get", "Redis GET", "tab:green", ":"),
]
STREAM = [
    ("ucx", "put_bw", "ucx put_bw -O B", "tab:gray", "--"),
    ("ucx", "get_bw", "ucx get -O B", "black", "--"),
    ("maru", "batch_store", "maru batch_store", "tab:blue", "-"),
    ("maru", "batch_retrieve", "maru batch_retrieve", "tab:orange", "-"),
    ("redis", "batch_set", "Redis pipelined SET", "tab:red", ":"),
    ("redis", "batch_get", "Redis MGET", "tab:green", ":"),
]


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    m = remote_bench.medians(sys.argv[1])
    sizes = sorted({k[2] for k in m})
    batch = next((int(d["batch"]) for d in m.values() if "batch" in d), None)
    runs = max((len(v.get("rep", [])) for v in remote_bench.load(sys.argv[1]).values()),
               default=0)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
    top = 0.0
    for ax, series, title in (
            (axes[0], SINGLE, "one operation at a time"),
            (axes[1], STREAM, f"streaming: {batch or 'B'} in flight")):
        for sy, op, label, colour, ls in series:
            pts = [(s, m[(sy, op, s)]["gbps"]) for s in sizes
                   if (sy, op, s) in m and "gbps" in m[(sy, op, s)]]
            if not pts:
                continue
            xs, ys = zip(*pts)
            top = max(top, *ys)
            ax.plot(xs, ys, ls, marker="o", color=colour,
                    label=label.replace(" B", f" {batch}"),
                    linewidth=2 if sy == "maru" else 1.4)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([remote_bench.human(s) for s in sizes])
        ax.set_xlabel("value size (bytes)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=3, frameon=False)
    axes[0].set_ylabel("GB/s (1e9 bytes/s)")
    axes[0].set_ylim(0, top * 1.12)
    fig.suptitle("Maru's remote path (maru-agent, UCX over TCP) across a veth, "
                 f"against its floor and Redis (medians of {runs} runs)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
