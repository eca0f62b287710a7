"""Benchmark: `confirmatory prove` on a million-line log (the tree built once from the file).

    python benchmarks/bench_prove.py              # 1,000,000 lines of ~250 bytes
    python benchmarks/bench_prove.py --quick      # 100,000 lines
    python benchmarks/bench_prove.py --lines N

Writes a hash-chained log of N lines shaped like host.jsonl's samples
(canonical JSON, seq and prev) and an anchors.jsonl whose one anchor fixes
all of it with its RFC 9162 root, in a temporary directory under the
current one; then times, each in a fresh process (interpreter start-up
included, as a reviewer runs it), the inclusion proof of the middle line,
the consistency proof from half the log to all of it, and `check-proof` of
the first. Each is the faster of two; the target is under 5 s for prove.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confirmatory.core import merkle  # noqa: E402
from confirmatory.records.chain import dumps  # noqa: E402


def write_run(run: Path, n: int) -> float:
    t = time.perf_counter()
    run.mkdir()
    leaves = merkle.Range()
    head = "0" * 64
    half = None
    with open(run / "big.jsonl", "wb") as fh:
        batch = []
        for i in range(n):
            line = dumps(
                {
                    "event": "sample",
                    "t": 1.8e9 + i * 0.15,
                    "wall": 1.8e9 + i * 0.15,
                    "mono": 1000.0 + i,
                    "mem_pressure": 0.5,
                    "mem_available": 8 << 30,
                    "swap_used": 0,
                    "load1": 0.7,
                    "clock_back_max_s": 0.0,
                    "seq": i,
                    "prev": head,
                }
            )
            head = hashlib.sha256(line).hexdigest()
            batch.append(line)
            if len(batch) == 4096 or i == n - 1:
                fh.write(b"".join(x + b"\n" for x in batch))
                leaves.extend(merkle.leaf_hashes(batch))
                batch = []
            if i + 1 == n // 2:
                half = (head, None)
        root = leaves.root().hex()
    half_root = merkle.root(merkle.leaf_hashes((run / "big.jsonl").read_bytes().split(b"\n")[: n // 2])).hex()
    anchors = [{"event": "open", "t": 0.0, "seq": 0, "prev": "0" * 64}]
    for k, (lines, h, r) in enumerate(((n // 2, half[0], half_root), (n, head, root)), 1):
        anchors.append(
            {
                "event": "anchor",
                "t": float(k),
                "final": k == 2,
                "manifests": {},
                "logs": {"big.jsonl": {"lines": lines, "head": h, "root": r}},
                "seq": k,
                "prev": "0" * 64,
            }
        )
    (run / "anchors.jsonl").write_bytes(b"".join(dumps(a) + b"\n" for a in anchors))
    return time.perf_counter() - t


def timed(*args: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "confirmatory", *args], capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr}")
    return dt, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 lines")
    ap.add_argument("--lines", type=int, default=None)
    args = ap.parse_args()
    n = args.lines or (100_000 if args.quick else 1_000_000)
    base = Path(tempfile.mkdtemp(prefix=".bench-prove-", dir=Path.cwd()))
    try:
        run = base / "run"
        made = write_run(run, n)
        size = (run / "big.jsonl").stat().st_size
        (run / "big.jsonl").read_bytes()  # into the page cache
        start, _ = timed("--help")
        inclusion = min(timed("prove", str(run), "big.jsonl", str(n // 2), "--json") for _ in range(2))
        consistency = min(timed("prove", str(run), "big.jsonl", "--consistency", "1", "2", "--json") for _ in range(2))
        (base / "proof.json").write_text(inclusion[1])
        checked = min(
            timed("check-proof", str(base / "proof.json"), "--anchors", str(run / "anchors.jsonl")) for _ in range(2)
        )
        proof = json.loads(inclusion[1])
        print(
            f"bench_prove: python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        print(f"  log: {n:,} lines, {size / 1e6:.0f} MB ({size / n:.0f} bytes a line), written in {made:.1f} s")
        print(f"  `confirmatory --help` (interpreter start-up)        {start:6.2f} s")
        print(
            f"  prove, inclusion of line {n // 2:,} ({len(proof['path'])} hashes)     {inclusion[0]:6.2f} s "
            f"({n / inclusion[0]:,.0f} lines/s)  target < 5 s: {'met' if inclusion[0] < 5 else 'NOT met'}"
        )
        print(
            f"  prove, consistency {n // 2:,} -> {n:,}                  {consistency[0]:6.2f} s  "
            f"target < 5 s: {'met' if consistency[0] < 5 else 'NOT met'}"
        )
        print(f"  check-proof --anchors                              {checked[0]:6.2f} s")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
