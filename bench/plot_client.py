#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_client.py - draw the C client benchmark's figure (docs/img/perf-client.png)

    /usr/bin/python3 bench/plot_client.py PNG RESULTS...

RESULTS are files of the "RESULT key=value ..." lines that
bench/run_client_bench.sh writes to OUT/results.txt (lines starting with
'#' are ignored).  Given several files (several runs), every figure is the
median over them.  bench/results/perf-client.txt holds the medians that
docs/performance.md reports; the committed PNG is drawn from it.

Three panels:
  store / memcpy per chunk size and placement, with the floor (the same
      loop with one bare TCP round trip instead of the register) drawn as
      a black tick over each store bar; whiskers: range over runs;
  cross-process retrieve latency (one core each) next to the round trips
      and Redis, log scale;
  scaling of N reader processes: one line, because GB/s read and
      retrievals/s of 1 MiB chunks are the same figure on two scales (the
      right axis converts), with the range over runs as whiskers.
"""
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZES = [256 << 10, 1 << 20, 4 << 20]
NAME = {256 << 10: "256 KiB", 1 << 20: "1 MiB", 4 << 20: "4 MiB"}
PLACES = (("same", "one core"), ("split", "one core each"),
          ("split-bp", "one core each, busy poll"))


def load(paths):
    """{(place, what, size, procs): {field: [values over files]}}"""
    rows = {}
    for path in paths:
        for line in open(path):
            if not line.startswith("RESULT "):
                continue
            r = dict(kv.split("=", 1) for kv in line.split()[1:])
            k = (r.get("place"), r["what"], r.get("size"), r.get("procs"))
            d = rows.setdefault(k, {})
            for f, v in r.items():
                try:
                    d.setdefault(f, []).append(float(v))
                except ValueError:
                    pass
    return rows


def main(png, paths):
    rows = load(paths)
    nan = float("nan")

    def get(place, what, size, field, procs=None):
        v = rows.get((place, what, str(size), procs), {}).get(field)
        return statistics.median(v) if v else nan

    def spread(place, what, size, field):
        """(median, lower whisker, upper whisker): recorded range or the
        range over the files"""
        d = rows.get((place, what, str(size), None), {})
        v = d.get(field, [])
        if not v:
            return nan, 0, 0
        m = statistics.median(v)
        lo = min(d.get("med_min", v)) if field == "med_ratio" else min(v)
        hi = max(d.get("med_max", v)) if field == "med_ratio" else max(v)
        return m, max(0, m - lo), max(0, hi - m)

    fig, ax = plt.subplots(1, 3, figsize=(17, 5.8),
                           gridspec_kw={"width_ratios": [1.25, 1.1, 0.9]})
    x = range(len(SIZES))

    # 1: store / memcpy
    a = ax[0]
    w = 0.13
    bars = [(p, "store", f"store, {lab}") for p, lab in PLACES] + \
           [(p, "batch_store", f"batch_store 32, {lab}") for p, lab in PLACES]
    colors = ["#9ecae1", "#4292c6", "#08519c", "#fdae6b", "#f16913", "#a63603"]
    for i, (place, what, lab) in enumerate(bars):
        xs = [j + (i - 2.5) * w for j in x]
        s = [spread(place, what, sz, "med_ratio") for sz in SIZES]
        a.bar(xs, [v[0] for v in s], w, color=colors[i], label=lab,
              yerr=[[v[1] for v in s], [v[2] for v in s]], capsize=2,
              error_kw={"lw": 0.8})
        if what == "store":
            a.scatter(xs, [get(place, "store_floor", sz, "med_ratio")
                           for sz in SIZES], marker="_", s=160, lw=2.2,
                      color="k", zorder=3,
                      label="floor: one bare TCP round trip" if i == 0 else None)
    for y, ls, lab in ((0.9, ":", "0.9"), (0.8, "--", "0.8"), (0.5, ":", "0.5")):
        a.axhline(y, color="grey", ls=ls, lw=0.8, zorder=0)
        a.text(-0.48, y + 0.01, lab, fontsize=7, color="grey")
    a.set_xticks(list(x))
    a.set_xticklabels([NAME[s] for s in SIZES])
    a.set_ylim(0, 1.05)
    a.set_ylabel("store / memcpy (median over rounds)")
    a.set_title("store throughput vs memcpy")
    a.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.07),
             ncol=2)

    # 2: retrieve latency, one core each
    a = ax[1]
    series = (("raw_zmtp", "round trip, ZMTP in-thread", "#7f7f7f"),
              ("raw_dealer", "round trip, libzmq DEALER", "#c7c7c7"),
              ("retrieve", "maru retrieve", "#2ca02c"),
              ("retrieve_read", "maru retrieve + read", "#98df8a"),
              ("redis_get", "Redis GET", "#d62728"),
              ("redis_get_read", "Redis GET + read", "#ff9896"))
    w = 0.13
    for i, (what, lab, c) in enumerate(series):
        a.bar([j + (i - 2.5) * w for j in x],
              [get("split", what, s, "p50_us") for s in SIZES], w,
              label=lab, color=c, edgecolor="k", lw=0.3)
    a.set_yscale("log")
    a.set_xticks(list(x))
    a.set_xticklabels([NAME[s] for s in SIZES])
    a.set_ylabel("p50 latency (µs, log scale)")
    a.set_title("cross-process retrieve, one core each")
    a.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.07),
             ncol=2)

    # 3: scaling
    a = ax[2]
    sc = sorted((int(k[3]), d) for k, d in rows.items()
                if k[1] == "scale" and k[3] is not None)
    if sc:
        n = [p for p, _ in sc]
        ops = [statistics.median(d["ops_per_s"]) for _, d in sc]
        lo = [o - min(d.get("ops_min", d["ops_per_s"])) for o, (_, d) in zip(ops, sc)]
        hi = [max(d.get("ops_max", d["ops_per_s"])) - o for o, (_, d) in zip(ops, sc)]
        size = statistics.median(sc[0][1].get("size", [1 << 20]))
        a.errorbar(n, ops, yerr=[lo, hi], fmt="o-", color="#1f77b4", capsize=4,
                   lw=2, ms=7, label="median, whiskers: range over runs")
        for p, o, d in zip(n, ops, [d for _, d in sc]):
            gb = statistics.median(d["gbps"]) if "gbps" in d else o * size / 1e9
            a.annotate(f"{o / 1e3:.1f}k/s\n{gb:.1f} GB/s", (p, o),
                       textcoords="offset points", xytext=(8, -22),
                       fontsize=7.5)
        a.set_xscale("log", base=2)
        a.set_xticks(n)
        a.set_xticklabels([str(p) for p in n])
        a.set_xlim(0.8, max(n) * 1.6)
        a.set_ylim(0, max(o + h for o, h in zip(ops, hi)) * 1.1)
        a.set_xlabel("reader processes (2 vCPUs)")
        a.set_ylabel("retrievals/s")
        gbax = a.secondary_yaxis(
            "right", functions=(lambda r: r * size / 1e9,
                                lambda g: g * 1e9 / size))
        gbax.set_ylabel(f"GB/s read ({size / (1 << 20):.0f} MiB per retrieval)")
        a.set_title("scaling: readers of the same chunks")
        a.legend(fontsize=7.5, loc="lower right")
        a.grid(alpha=0.3)

    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2:])
