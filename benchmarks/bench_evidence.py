"""Benchmark: signing, stamping and witnessing each anchor stay off the lanes' path.

    python benchmarks/bench_evidence.py            # ~1.5 min: 3 rounds of 2 runs, 6,000 attempts each
    python benchmarks/bench_evidence.py --quick    # ~25 s: 3 rounds, 1,200 attempts each

The same fake run (6 models x 2 lanes, 2 arms, the zero-latency fake harness,
the no-process engine, anchors every 0.5 s with command ``["true"]``) is run
with and without evidence, alternately (the disk drifts), each in a fresh
subprocess: with evidence, every anchor's checkpoint is signed with a study
key, stamped by a local RFC 3161 TSA (``openssl ts`` behind an HTTP server)
and cosigned by a local C2SP witness (``confirmatory witness serve``), both
real processes on 127.0.0.1 (``confirmatory.testing.evidence``). The push
worker does that work (docs/EVIDENCE.md); the lanes never wait on it, so
attempts/s should not move (issue goal: within 5 %).

Reported per round: attempts/s of both variants, anchors written, and how
many anchors were signed, stamped and cosigned; then the medians and their
ratio. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = 6
ARMS = ("alone", "calculator")


def child(cfg: dict) -> dict:
    """One run in this fresh process: attempts/s and what the anchors' evidence holds."""
    from confirmatory.design.load import load_design
    from confirmatory.engine.run import Run
    from confirmatory.testing.designs import write_design

    base = Path(cfg["dir"])
    anchors = {"command": ["true"], "interval_s": 0.5, **cfg.get("evidence", {})}
    design = write_design(
        base / "design",
        households=cfg["households"],
        models=MODELS,
        arms=ARMS,
        engine_factory="confirmatory.testing.fakes:null_engine",
        host={"sample_interval_s": 0.05, "max_gap_s": 60.0, "sampler_failure_s": 60},
        anchors=anchors,
        household_defaults={"latency_s": 0, "cost_usd": 0.000001},
        overall_cap_usd=1e6,
    )
    run = Run(load_design(design), base / "run", install_signals=False)
    t0 = time.perf_counter()
    result = run.execute()
    wall = time.perf_counter() - t0
    attempts, first, last = 0, None, None
    for log in (base / "run").glob("models/*/run.jsonl"):
        for raw in log.read_bytes().splitlines():
            e = json.loads(raw)
            if e.get("event") == "attempt":
                attempts += 1
                first = e["start"] if first is None else min(first, e["start"])
            elif e.get("event") == "lane-end":
                last = e["t"] if last is None else max(last, e["t"])
    anchors_n = len((base / "run" / "anchors.jsonl").read_bytes().splitlines()) - 1
    kinds: dict[str, set[int]] = {"checkpoint": set(), "stamp": set(), "cosignature": set()}
    for raw in (base / "run" / "anchor-pushes.jsonl").read_bytes().splitlines():
        o = json.loads(raw)
        if o.get("event") in kinds and o.get("ok", True) is True:
            kinds[o["event"]].add(o["anchor_seq"])
    return {
        "status": result.status,
        "attempts": attempts,
        "wall_s": wall,
        "span_s": (last - first) if first is not None and last is not None else wall,
        "anchors": anchors_n,
        **{k: len(v) for k, v in kinds.items()},
    }


def run_child(directory: Path, households: int, evidence: dict | None) -> dict:
    cfg = {"dir": str(directory), "households": households, "evidence": evidence or {}}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"the child run failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,200 attempts per run (~25 s)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the two variants (default 3)")
    ap.add_argument("--households", type=int, default=None, help="households per model (default 500; --quick 100)")
    ap.add_argument("--dir", type=Path, default=None, help="parent directory (default: the current directory)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    from confirmatory.testing.evidence import local_evidence
    from confirmatory.testing.tsa import openssl_missing

    missing = openssl_missing()
    if missing is not None:
        raise SystemExit(f"bench_evidence needs openssl for its local TSA: {missing}")
    households = args.households or (100 if args.quick else 500)
    parent = (args.dir or Path.cwd()).resolve()
    root = Path(tempfile.mkdtemp(prefix=".bench-evidence-", dir=parent))
    try:
        rounds: list[dict[bool, dict]] = []
        for k in range(args.rounds):
            pair = {}
            # alternate which goes first: a drifting disk favours neither
            for attested in (True, False) if k % 2 == 0 else (False, True):
                if not attested:
                    pair[attested] = run_child(root / f"r{k}-plain", households, None)
                    continue
                # a TSA and a witness of its own per run: a witness refuses a
                # second run's checkpoints of an origin it has cosigned (a fork)
                with local_evidence(root / f"ev-{k}", origin=f"example.org/bench/evidence-{k}") as ev:
                    pair[attested] = run_child(root / f"r{k}-evidence", households, ev.anchors())
            rounds.append(pair)
        print(f"bench_evidence: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, disk of {root}")
        print(
            f"  {MODELS} models x 2 lanes x {len(ARMS)} arms x {households} households, latency 0, "
            "anchors every 0.5 s (command [true]); evidence: study key, 1 local TSA, 1 local witness"
        )
        print("  attempts/s over the lanes' span (first attempt to last lane-end) and over execute()'s wall")
        for k, pair in enumerate(rounds):
            w, wo = pair[True], pair[False]
            print(
                f"  round {k + 1}: with evidence {w['attempts'] / w['span_s']:6.0f} span, "
                f"{w['attempts'] / w['wall_s']:6.0f} wall ({w['anchors']} anchors: {w['checkpoint']} signed, "
                f"{w['stamp']} stamped, {w['cosignature']} cosigned; {w['status']}); without "
                f"{wo['attempts'] / wo['span_s']:6.0f} span, {wo['attempts'] / wo['wall_s']:6.0f} wall "
                f"({wo['anchors']} anchors; {wo['status']})"
            )
        print("\nsummary (medians of the rounds)")
        for key, what in (
            ("span_s", "the lanes' span"),
            ("wall_s", "execute()'s wall, the final anchor's evidence in it"),
        ):
            with_rate = statistics.median(p[True]["attempts"] / p[True][key] for p in rounds)
            without_rate = statistics.median(p[False]["attempts"] / p[False][key] for p in rounds)
            print(
                f"  {what}: with evidence {with_rate:.0f} attempts/s, without {without_rate:.0f}: "
                f"{100 * (with_rate / without_rate - 1):+.1f} % (goal: within 5 %)"
            )
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
