#!/usr/bin/env python3
"""Joins criterion's estimates with the ratios the benches log into markdown tables.

Usage: cargo bench -p kpress-benches [--bench NAME]; python3 benches/report.py [GROUP-PREFIX]
Reads target/criterion/*/**/new/{benchmark,estimates}.json and
target/criterion/kpress-ratios.tsv (last entry per case wins).
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

# group -> case -> {function: MB/s}
speeds = defaultdict(lambda: defaultdict(dict))
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

for group in sorted(speeds):
    cases = speeds[group]
    functions = sorted({f for c in cases.values() for f in c})
    print(f"\n{group}\n")
    print("| case | ratio | " + " | ".join(f"{f} MB/s" for f in functions) + " |")
    print("|---|--:|" + "--:|" * len(functions))
    for case in sorted(cases, key=lambda c: (c.split("-")[0], c)):
        r = ratios.get((group, case))
        cells = [f"{cases[case][f]:.0f}" if f in cases[case] else "" for f in functions]
        print(f"| {case} | {r:.3f} | " if r is not None else f"| {case} | | ", end="")
        print(" | ".join(cells) + " |")
