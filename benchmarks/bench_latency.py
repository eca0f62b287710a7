"""Benchmark: a fake harness that sleeps (simulated model latency) - wall time vs ideal, and stop latency.

    python benchmarks/bench_latency.py            # ~1.5 min
    python benchmarks/bench_latency.py --quick    # < 30 s
    python benchmarks/bench_latency.py --dir /some/disk --keep

Every run is a real ``Run`` (6 models x 2 lanes, 2 arms, the fake harness of
``confirmatory.testing.fakes`` sleeping ``latency_s`` per call, the no-process
engine, a real host sampler at ``sample_interval_s`` 0.01, fsynced records),
in a fresh directory under the current directory (or ``--dir``). All times
below are read from the run's own logs unless marked otherwise.

(a) Wall time vs the ideal. The ideal is the busiest lane's summed attempt
    time: per (model, lane), the sum of ``end - start`` over its ``attempt``
    lines in ``models/*/run.jsonl``; the ideal is the largest sum. The
    overhead is ``(wall - ideal) / ideal`` (target: within 5 %), with wall
    both ``execute()``'s whole time (set-up, final anchor and close
    included) and the lanes' span in the logs (first attempt start to the
    last ``lane-end``). It is split into the time the busiest lane spent
    waiting for host evidence (the rule: a pass's classes wait for a sample
    taken more than 0.1 s after its last attempt ended) and the rest (the
    runner's own code). Measured at several latencies, since the evidence wait
    is a fixed cost per household pass, and once with samples every 1 s, since
    that wait also grows with the sample interval.

(b) Stop latency: the time from a trigger to every affected lane stopped,
    i.e. the latest ``lane-end`` t of the affected lanes minus the trigger's t
    (target: under 0.5 s; the rules allow 5 s). Conversations are 25 turns of
    ``latency_s`` 0.02 each, so a conversation under way ends at its next turn.
    The trigger is planted in one household a few places into the draw:
      * ceiling  - one call of m0 costs 10 USD, ``overall_cap_usd`` 1, margin 0;
                   from the ``ceiling`` t to the last lane-end of every model;
      * harness  - ``"m0:alone/0": "harness"`` (the harness raises); a harness
                   trigger stops only its model: from the ``trigger`` t to the
                   last lane-end of m0's two lanes (the other models go on);
      * interrupt - the harness sends SIGINT to the process from inside a
                   provider call (``Run(..., install_signals=True)`` in the main
                   thread); from the run's ``stop`` t (cause interrupt) to the
                   last lane-end of every model, and from the signal (the end
                   of the call that sent it, in its record) to that ``stop``.

Benchmarks are scripts, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

MODELS = 6
ARMS = ("alone", "calculator")
SEED = 20261129
SAMPLE_INTERVAL = 0.01
TARGET_OVERHEAD = 0.05
TARGET_STOP_S = 0.5


def design_kw(**extra):  # type: ignore[no-untyped-def]
    kw = dict(
        models=MODELS,
        arms=ARMS,
        seed=SEED,
        engine_factory="confirmatory.testing.fakes:null_engine",
        host={"sample_interval_s": SAMPLE_INTERVAL, "max_gap_s": 60.0, "sampler_failure_s": 60},
        anchors={"command": ["true"], "interval_s": 3600.0},
        overall_cap_usd=1e6,
    )
    kw.update(extra)
    return kw


def events(path: Path) -> list[dict]:
    with open(path, "rb") as fh:
        return [json.loads(raw) for raw in fh]


def model_logs(run_dir: Path) -> dict[str, list[dict]]:
    return {p.parent.name: events(p) for p in sorted((run_dir / "models").glob("*/run.jsonl"))}


def execute(design: Path, run_dir: Path, *, install_signals: bool = False) -> tuple[object, float, float, dict]:
    """Execute a Run; return (result, execute() wall s, time.time() at return, evidence wait s per lane thread)."""
    from confirmatory.design.load import load_design
    from confirmatory.engine.run import Run
    from confirmatory.host.sampler import HostMonitor

    waited: dict[str, float] = defaultdict(float)
    lock = threading.Lock()
    real_wait = HostMonitor.wait_complete

    def timed_wait(self, t_end, stop):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return real_wait(self, t_end, stop)
        finally:
            dt = time.perf_counter() - t
            with lock:
                waited[threading.current_thread().name] += dt

    run = Run(load_design(design), run_dir, install_signals=install_signals)
    HostMonitor.wait_complete = timed_wait  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        result = run.execute()
    finally:
        wall = time.perf_counter() - t0
        returned = time.time()
        HostMonitor.wait_complete = real_wait  # type: ignore[method-assign]
    return result, wall, returned, dict(waited)


# ---------------------------------------------------------------- (a) wall vs ideal


def wall_vs_ideal(root: Path, latency: float, households: int, interval: float) -> dict:
    from confirmatory.testing.designs import write_design

    base = root / f"ideal-{latency:g}-{interval:g}"
    kw = design_kw()
    kw["host"] = dict(kw["host"], sample_interval_s=interval)
    design = write_design(
        base / "design", households=households, household_defaults={"latency_s": latency, "cost_usd": 0.000001}, **kw
    )
    result, wall, _, waited = execute(design, base / "run")
    busy: dict[tuple[str, int], float] = defaultdict(float)
    first, last, attempts = None, None, 0
    for model, evs in model_logs(base / "run").items():
        for e in evs:
            if e["event"] == "attempt":
                attempts += 1
                busy[(model, e["lane"])] += e["end"] - e["start"]
                first = e["start"] if first is None else min(first, e["start"])
            elif e["event"] == "lane-end":
                last = e["t"] if last is None else max(last, e["t"])
    (bm, bl), ideal = max(busy.items(), key=lambda kv: kv[1])
    span = last - first
    busiest_wait = waited.get(f"lane-{bm}-{bl}", 0.0)
    passes = sum(1 for k, _ in enumerate(range(households)) if k % 2 == bl)  # households of that lane
    return {
        "latency": latency,
        "interval": interval,
        "households": households,
        "attempts": attempts,
        "status": result.status,
        "ideal": ideal,
        "wall": wall,
        "span": span,
        "busiest": f"{bm}/{bl}",
        "busiest_wait": busiest_wait,
        "passes": passes,
        "max_wait": max(waited.values()) if waited else 0.0,
    }


# ---------------------------------------------------------------- (b) stop latency


TURNS = 25
TURN_S = 0.02


def trigger_run(
    root: Path, kind: str, position: int, households: int, rep: int, interval: float = SAMPLE_INTERVAL
) -> dict:
    from confirmatory.core.streams import draw_order
    from confirmatory.testing.designs import write_design

    ids = [f"hh-{i:03d}" for i in range(households)]
    target = draw_order(SEED, ids)[position]
    normal = {f"{a}/*": ["ok"] * TURNS for a in ARMS}
    rows = []
    for hid in ids:
        plan = dict(normal)
        if hid == target:
            if kind == "ceiling":
                plan["m0:alone/0"] = ["ok"] * 5 + ["expensive"] + ["ok"] * (TURNS - 6)
            elif kind == "harness":
                plan["m0:alone/0"] = ["ok"] * 5 + ["harness"]
            elif kind == "interrupt":
                plan["m0:alone/0"] = ["ok"] * 5 + ["interrupt"]
        rows.append({"id": hid, "plan": plan, "latency_s": TURN_S, "cost_usd": 0.000001, "expensive_usd": 10.0})
    extra = {"overall_cap_usd": 1.0, "margin_usd": 0.0} if kind == "ceiling" else {}
    base = root / f"stop-{kind}-{interval:g}-{rep}"
    kw = design_kw(**extra)
    kw["host"] = dict(kw["host"], sample_interval_s=interval)
    design = write_design(base / "design", households=rows, **kw)
    result, _, returned, _ = execute(design, base / "run", install_signals=(kind == "interrupt"))
    run_dir = base / "run"
    logs = model_logs(run_dir)
    top = events(run_dir / "run.jsonl")
    out: dict = {"kind": kind, "status": result.status, "cause": result.stop_cause}
    if kind == "ceiling":
        t0 = next(e["t"] for e in top if e["event"] == "ceiling")
        affected = list(logs)
    elif kind == "harness":
        t0 = next(e["t"] for e in logs["m0"] if e["event"] == "trigger" and e["cause"] == "harness")
        affected = ["m0"]
        others_done = all(
            any(e["event"] == "lane-end" and e["reason"] == "done" for e in logs[m]) for m in logs if m != "m0"
        )
        out["others_completed"] = others_done
    else:
        t0 = next(e["t"] for e in top if e["event"] == "stop" and e["cause"] == "interrupt")
        affected = list(logs)
        arm_pass = [
            e
            for e in logs["m0"]
            if e["event"] == "attempt" and e["household"] == target and e["arm"] == "alone" and e["pass"] == 0
        ]
        if arm_pass:
            rec = json.loads((run_dir / "models" / "m0" / arm_pass[0]["record"]).read_text())
            # The last call sent SIGINT after sleeping latency_s and before it ended.
            last = max(rec["calls"], key=lambda c: c["end"])
            out["signal_to_stop"] = (t0 - last["end"], t0 - (last["start"] + TURN_S))
    ends = [e["t"] for m in affected for e in logs[m] if e["event"] == "lane-end"]
    started_after = sum(1 for m in affected for e in logs[m] if e["event"] == "attempt" and e["start"] > t0)
    out.update(
        {
            "t0": t0,
            "lanes": len(ends),
            "stop_s": max(ends) - t0,
            "first_lane_s": min(ends) - t0,
            "started_after": started_after,
            "returned_s": returned - t0,
        }
    )
    return out


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 30 s)")
    ap.add_argument("--dir", type=Path, default=None, help="parent directory (default: the current directory)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--repeats", type=int, default=None, help="runs per trigger (default 3; --quick 1)")
    args = ap.parse_args()

    # (latency per call, households per model)
    # (latency per call, households per model, host sample_interval_s)
    sizes = (
        [(0.05, 12, SAMPLE_INTERVAL), (0.5, 4, SAMPLE_INTERVAL)]
        if args.quick
        else [(0.05, 40, SAMPLE_INTERVAL), (0.5, 12, SAMPLE_INTERVAL), (2.0, 6, SAMPLE_INTERVAL), (0.5, 6, 1.0)]
    )
    repeats = args.repeats or (1 if args.quick else 3)
    position, households = (2, 6) if args.quick else (6, 12)

    parent = (args.dir or Path.cwd()).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-latency-", dir=parent))
    try:
        ideal_rows = [wall_vs_ideal(root, lat, hh, iv) for lat, hh, iv in sizes]
        stop_rows = {
            k: [trigger_run(root, k, position, households, r) for r in range(repeats)]
            for k in ("ceiling", "harness", "interrupt")
        }
        slow_harness = None if args.quick else trigger_run(root, "harness", position, households, 0, interval=1.0)

        print(
            f"bench_latency: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {MODELS} models x 2 lanes, "
            f"{len(ARMS)} arms, host sample_interval_s {SAMPLE_INTERVAL:g}, runs under {root}"
        )
        print("\n(a) wall time vs the ideal (the busiest lane's summed attempt time); target: within 5 %")
        print(
            f"{'latency':>8} {'sample':>6} {'attempts':>8} {'ideal s':>8} {'wall s':>8} {'overhead':>9} {'span s':>8} "
            f"{'overhead':>9} {'evidence wait':>14} {'rest':>8}  status"
        )
        print(
            f"{'':>8} {'every':>6} {'':>8} {'':>8} {'execute':>8} {'(wall)':>9} {'(logs)':>8} {'(span)':>9} "
            f"{'busiest lane':>14} {'(span)':>8}"
        )
        for r in ideal_rows:
            ow = (r["wall"] - r["ideal"]) / r["ideal"]
            osp = (r["span"] - r["ideal"]) / r["ideal"]
            rest = (r["span"] - r["ideal"] - r["busiest_wait"]) / r["ideal"]
            print(
                f"{r['latency']:>7g}s {r['interval']:>5g}s {r['attempts']:>8} {r['ideal']:>8.2f} {r['wall']:>8.2f} {100 * ow:>8.1f}% "
                f"{r['span']:>8.2f} {100 * osp:>8.1f}% {r['busiest_wait']:>8.2f} s "
                f"({100 * r['busiest_wait'] / r['ideal']:.0f}%) {100 * rest:>7.1f}%  {r['status']}"
            )
        for r in ideal_rows:
            print(
                f"  latency {r['latency']:g} s, samples every {r['interval']:g} s: busiest lane {r['busiest']} waited "
                f"{1e3 * r['busiest_wait'] / max(1, r['passes']):.0f} ms per household pass for host evidence "
                f"({r['passes']} passes)"
            )

        print("\n(b) trigger -> every affected lane stopped (latest lane-end t - trigger t); target < 0.5 s")
        print(
            f"    conversations of {TURNS} turns x {TURN_S:g} s; trigger at draw position {position} of "
            f"{households} households; {repeats} run(s) each"
        )
        print(
            f"{'trigger':>10} {'lanes':>5} {'median s':>9} {'max s':>7} {'first lane s':>12} "
            f"{'started after':>13} {'execute() ret. s':>16}  status / cause"
        )
        verdicts = []
        for kind, rows in stop_rows.items():
            med = statistics.median(r["stop_s"] for r in rows)
            mx = max(r["stop_s"] for r in rows)
            verdicts.append(mx < TARGET_STOP_S)
            first = statistics.median(r["first_lane_s"] for r in rows)
            ret = statistics.median(r["returned_s"] for r in rows)
            after = sum(r["started_after"] for r in rows)
            print(
                f"{kind:>10} {rows[0]['lanes']:>5} {med:>9.3f} {mx:>7.3f} {first:>12.3f} {after:>13} "
                f"{ret:>16.3f}  {rows[0]['status']} / {rows[0]['cause']}"
            )
        if slow_harness is not None:
            r = slow_harness
            print(
                f"{'harness':>10} {r['lanes']:>5} {r['stop_s']:>9.3f} {r['stop_s']:>7.3f} {r['first_lane_s']:>12.3f} "
                f"{r['started_after']:>13} {r['returned_s']:>16.3f}  {r['status']} / {r['cause']}  "
                "<- samples every 1 s (diagnostic, not in the verdict)"
            )
        for r in stop_rows["harness"]:
            if not r.get("others_completed"):
                print("  note: after the harness trigger, some other model did not complete")
        sig = [r["signal_to_stop"] for r in stop_rows["interrupt"] if "signal_to_stop" in r]
        if sig:
            lo = max(s[0] for s in sig)
            hi = max(s[1] for s in sig)
            print(
                f"  interrupt: SIGINT sent -> the run's stop line: at most {1e3 * hi:.1f} ms "
                f"(the signal left inside a call; from that call's end: {1e3 * lo:+.1f} ms)"
            )
        print(
            "  harness: only m0's 2 lanes are affected; the other models completed: "
            f"{all(r.get('others_completed') for r in stop_rows['harness'])} (so execute() returns "
            "when they finish)"
        )

        print("\nsummary")
        for r in ideal_rows:
            ow = (r["wall"] - r["ideal"]) / r["ideal"]
            print(
                f"  wall vs ideal at latency {r['latency']:g} s, samples every {r['interval']:g} s: {100 * ow:+.1f} % "
                f"({'met' if ow <= TARGET_OVERHEAD else 'NOT met'}; target within 5 %)"
            )
        print(
            f"  stop latency (max over triggers and runs): "
            f"{max(r['stop_s'] for rows in stop_rows.values() for r in rows):.3f} s "
            f"({'met' if all(verdicts) else 'NOT met'}; target < 0.5 s)"
        )
    finally:
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
