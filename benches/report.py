#!/usr/bin/env python3
"""Joins criterion's estimates with the ratios the benches log into markdown tables.

Usage: cargo bench -p kpress-benches [--bench NAME]; python3 benches/report.py [GROUP-PREFIX]
Reads target/criterion/*/**/new/{benchmark,estimates}.json,
target/criterion/kpress-ratios.tsv and kpress-requests.tsv (last entry per case wins).
A group with a bare-codecs function also gets each other function's time as a
multiple of it; a case with a request count gets its time per request.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

root = Path(__file__).resolve().parent.parent / "target" / "criterion"
prefix = sys.argv[1] if len(sys.argv) > 1 else ""

ratios = {}
tsv = root / "kpress-ratios.tsv"
if tsv.exists():
    for line in tsv.read_text().splitlines():
        group, case, raw, comp = line.split("\t")
        ratios[(group, case)] = int(comp) / int(raw)

requests = {}
tsv = root / "kpress-requests.tsv"
if tsv.exists():
    for line in tsv.read_text().splitlines():
        group, case, count = line.split("\t")
        requests[(group, case)] = int(count)

# group -> case -> {function: MB/s}
speeds = defaultdict(lambda: defaultdict(dict))
# group -> case -> {function: ns per iteration}
times = defaultdict(lambda: defaultdict(dict))
for bench in root.glob("**/new/benchmark.json"):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    group = meta["group_id"]
    if not group.startswith(prefix):
        continue
    nbytes = (meta.get("throughput") or {}).get("Bytes")
    if not nbytes:
        continue
    ns = est["median"]["point_estimate"]
    speeds[group][meta["value_str"]][meta["function_id"]] = nbytes / ns * 1e3  # MB/s (10^6)
    times[group][meta["value_str"]][meta["function_id"]] = ns

BARE = "bare-codecs"

for group in sorted(speeds):
    cases = speeds[group]
    functions = sorted({f for c in cases.values() for f in c})
    others = [f for f in functions if f != BARE] if BARE in functions else []
    counted = [f for f in functions if f != BARE and any((group, c) in requests for c in cases)]
    print(f"\n{group}\n")
    print(
        "| case | ratio | "
        + " | ".join(f"{f} MB/s" for f in functions)
        + "".join(f" | {f} µs/request" for f in counted)
        + "".join(f" | {f} ÷ {BARE}" for f in others)
        + " |"
    )
    print("|---|--:|" + "--:|" * (len(functions) + len(counted) + len(others)))
    for case in sorted(cases, key=lambda c: (c.split("-")[0], c)):
        r = ratios.get((group, case))
        cells = [f"{cases[case][f]:.0f}" if f in cases[case] else "" for f in functions]
        n = requests.get((group, case))
        for f in counted:
            ns = times[group][case].get(f)
            cells.append(f"{ns / n / 1e3:.1f}" if n and ns else "")
        for f in others:
            t, bare = times[group][case].get(f), times[group][case].get(BARE)
            cells.append(f"{t / bare:.3f}" if t and bare else "")
        print(f"| {case} | {r:.3f} | " if r is not None else f"| {case} | | ", end="")
        print(" | ".join(cells) + " |")
