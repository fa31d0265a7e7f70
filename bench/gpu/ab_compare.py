#!/usr/bin/env python3
"""Compares run.py tables of several builds (ab_cases.sh): every case's
correctness and relative error, and the time ratio between the builds.

Usage: ab_compare.py TABLE [TABLE ...]   (the first table is the baseline)
"""

import math
import sys
from pathlib import Path


def read(path: Path) -> dict:
    rows = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 7 or parts[0] not in ("cuda", "gxu"):
            continue
        try:
            rows[(parts[0], parts[1])] = (parts[4], float(parts[3]), float(parts[5]))
        except ValueError:
            continue
    return rows


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:] if not p.endswith((".prepare.txt", ".stderr.txt"))]
    if len(paths) < 2:
        print("usage: ab_compare.py BASELINE_TABLE OTHER_TABLE ...", file=sys.stderr)
        return 2
    base = read(paths[0])
    for other_path in paths[1:]:
        other = read(other_path)
        print(f"== {other_path.name} against {paths[0].name}")
        missing = sorted(set(base) - set(other))
        extra = sorted(set(other) - set(base))
        differ, ratios = [], []
        for case in sorted(set(base) & set(other)):
            (ok0, err0, ms0), (ok1, err1, ms1) = base[case], other[case]
            if ok0 != ok1 or err0 != err1:
                differ.append((case, ok0, err0, ok1, err1))
            if ms0 > 0 and ms1 > 0:
                ratios.append(ms1 / ms0)
        for case in missing:
            print(f"missing in {other_path.name}: {case[0]} {case[1]}")
        for case in extra:
            print(f"only in {other_path.name}: {case[0]} {case[1]}")
        for (dev, graph), ok0, err0, ok1, err1 in differ:
            print(f"differs: {dev} {graph}: ok {ok0} -> {ok1}, rel err {err0:.2e} -> {err1:.2e}")
        same = len(set(base) & set(other)) - len(differ)
        gmean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
        print(f"{same} cases identical in correctness and error, {len(differ)} differ, "
              f"{len(missing)} missing, {len(extra)} new; kiln time ratio gmean {gmean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
