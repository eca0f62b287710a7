"""Benchmark: how fast `confirmatory verify` checks a large run, beside the hashing floor.

    python benchmarks/bench_verify.py                 # two sizes (about 250k and 1M log lines)
    python benchmarks/bench_verify.py --households 2000 8000 --keep /tmp/bench

For each size: generate a rule-abiding run (confirmatory.testing.rungen, fast
unsynced writer), then in a fresh process time `verify_run` and read its peak
RSS (resource.getrusage), then time `sha256sum` over the very same files (the
floor: every byte hashed once, in C). Reports log lines/s, files/s and MB of
peak memory per size, so that a growth of memory with lines would show.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from confirmatory.verify import verify_run
t = time.perf_counter()
report = verify_run(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"ok": report.ok, "seconds": dt,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

BASELINE = "import resource, confirmatory.verify; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"


def count(root: Path) -> tuple[int, int, int]:
    lines = files = size = 0
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            files += 1
            size += os.path.getsize(p)
            if n.endswith(".jsonl"):
                with open(p, "rb") as fh:
                    lines += sum(1 for _ in fh)
    return lines, files, size


def sha256sum_seconds(root: Path) -> float:
    t = time.perf_counter()
    find = subprocess.Popen(["find", str(root), "-type", "f", "-print0"], stdout=subprocess.PIPE)
    subprocess.run(["xargs", "-0", "sha256sum"], stdin=find.stdout, stdout=subprocess.DEVNULL, check=True)
    find.wait()
    return time.perf_counter() - t


def one(root: Path, households: int) -> dict:
    from confirmatory.testing.rungen import Plan, generate_run

    t = time.perf_counter()
    generate_run(root, Plan(households=households, cap_usd=1e6, reserve_usd=0.001, anchor_every_s=900,
                            p_provider=0.1))
    gen = time.perf_counter() - t
    lines, files, size = count(root)
    sha256sum_seconds(root)  # warm the page cache for both measurements alike
    out = json.loads(subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True,
                                    text=True, check=True).stdout)
    floor = sha256sum_seconds(root)
    return {"households": households * 3, "lines": lines, "files": files, "mb": size / 1e6, "gen_s": gen,
            "ok": out["ok"], "verify_s": out["seconds"], "lines_per_s": lines / out["seconds"],
            "files_per_s": files / out["seconds"], "sha256sum_s": floor,
            "peak_mb": out["maxrss_kb"] / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--households", type=int, nargs="+", default=[21000, 84000],
                    help="households per model (3 models); default ~250k and ~1M log lines")
    ap.add_argument("--keep", type=Path, default=None, help="generate under this directory and keep it")
    args = ap.parse_args()
    base_rss = int(subprocess.run([sys.executable, "-c", BASELINE], capture_output=True, text=True,
                                  check=True).stdout) / 1024
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parent = args.keep or Path(tmp)
        for n in args.households:
            rows.append(one(parent / f"run-{n}", n))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; interpreter + imports: {base_rss:.0f} MB RSS")
    print(f"{'households':>10} {'log lines':>10} {'files':>8} {'MB':>7} {'verify s':>9} {'lines/s':>9} "
          f"{'files/s':>8} {'sha256sum s':>11} {'x floor':>7} {'peak MB':>8} ok")
    for r in rows:
        print(f"{r['households']:>10} {r['lines']:>10} {r['files']:>8} {r['mb']:>7.1f} {r['verify_s']:>9.2f} "
              f"{r['lines_per_s']:>9.0f} {r['files_per_s']:>8.0f} {r['sha256sum_s']:>11.2f} "
              f"{r['verify_s'] / r['sha256sum_s']:>7.1f} {r['peak_mb']:>8.1f} {r['ok']}")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        grow = (b["peak_mb"] - a["peak_mb"]) / max(1, b["households"] - a["households"]) * 1e6
        print(f"peak memory grows {grow / 1e3:.2f} kB per household "
              f"({(b['peak_mb'] - a['peak_mb']) / max(1, b['lines'] - a['lines']) * 1e6:.0f} B per log line)")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
