#!/usr/bin/env python3
"""Plots benchmark 1 of memlayer-bench-alloc (allocation latency against
size: native, heap, cache) from Google Benchmark's JSON output as an SVG,
log-log, without third-party packages.

usage: plot_latency.py BENCH.json OUT.svg
"""
import json
import math
import sys

SERIES = [("native", "#d62728", "native (sim cost model: 100 us + size / 15 GiB/s)"),
          ("heap", "#1f77b4", "memlayer DeviceHeap"),
          ("cache", "#2ca02c", "memlayer BlockCache")]
W, H = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 80, 20, 40, 110


def load(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    points = {name: [] for name, _, _ in SERIES}
    for r in runs:
        parts = r["name"].split("/")
        if len(parts) < 3 or parts[0] != "latency" or r.get("run_type", "iteration") != "iteration":
            continue
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[r["time_unit"]]
        points[parts[1]].append((int(parts[2]), r["real_time"] * scale))
    for v in points.values():
        v.sort()
    return points


def human(size):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div:
            return f"{size // div} {unit}"
    return f"{size} B"


def main(src, dst):
    points = load(src)
    xs = [x for v in points.values() for x, _ in v]
    ys = [y for v in points.values() for _, y in v]
    if not xs:
        sys.exit(f"{src}: no latency/ benchmarks in it")
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (math.log10(x) - x0) / (x1 - x0) * pw

    def py(y):
        return TOP + (y1 - math.log10(y)) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">'
           'Allocate + free latency against size (steady state)</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{10 ** (e - 3):g} ms" if e >= 3 else f"{10 ** e:g} us" if e >= 0 else f"{10 ** e * 1000:g} ns"
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for x in sorted(set(xs)):
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + ph}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{human(x)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{TOP + ph + 36}" text-anchor="middle">allocation size</text>')
    for i, (name, colour, label) in enumerate(SERIES):
        pts = points[name]
        if not pts:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = TOP + ph + 58 + i * 16
        out.append(f'<line x1="{LEFT}" y1="{ly - 4}" x2="{LEFT + 24}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + 30}" y="{ly}">{label}</text>')
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
