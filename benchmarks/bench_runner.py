"""Benchmark: the runner's own overhead, beside the fsync'd-append rate of the same disk.

    python benchmarks/bench_runner.py            # ~2 min: 1,008 and 20,004 attempts
    python benchmarks/bench_runner.py --quick    # < 30 s: 240 and 1,200 attempts
    python benchmarks/bench_runner.py --dir /some/disk --keep --verify

Everything is measured in one invocation, on one disk (a fresh directory
under the current directory, or under ``--dir``):

1. The disk: a loop of ``os.write`` + ``os.fsync`` appending ~300-byte lines
   to one file (the raw fsync'd-append rate); the same from 12 threads (one
   file each, as the 12 lanes write); and ``ChainWriter.append`` of ~300-byte
   lines (encoding + hashing + the same write and fsync).
2. Real Runs (``Run(load_design(path), run_dir).execute()``) of a fake design:
   6 models x 2 lanes, 2 arms, the fake harness with latency 0 and no faults,
   the no-process engine (``confirmatory.testing.fakes:null_engine``), a real
   host sampler (``sample_interval_s`` 0.02 by default), the anchorer with a
   large interval (``anchors.command = ["true"]`` unless ``--verify``, which
   uses a local git witness so that the run can be verified). Each size runs
   in a fresh subprocess, which wraps ``os.fsync`` with a counter (per thread
   kind) and times the lanes' waits for host evidence, and reports its peak
   RSS (``resource.getrusage``) before and after the run.

Reported: attempts/s (over ``execute()``'s whole wall time and over the
lanes' span from the logs), process CPU per attempt, fsyncs per attempt, the
ratio ``attempts/s / (fsync'd appends/s / fsyncs per attempt)`` (1.0 would
mean the runner goes exactly as fast as the disk's serial fsync rate allows),
the share of lane time spent waiting for host evidence, and peak-RSS growth per
attempt between the two sizes.

``--what-if`` adds a diagnostic run: the same 1,000-attempt run with
``hostrules.BASE_SLACK_S`` patched to ``--what-if-slack`` (0) in the child
process. It is *not* the rule; it was how the cost of waiting for a sample
0.1 s after a pass was found (completion is now the first sample after the
pass's end, taken on demand, so the two runs now measure the same).

Benchmarks are scripts, not tests: nothing here asserts a time.
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
import threading
import time
from pathlib import Path

MODELS = 6
ARMS = ("alone", "calculator")
TARGET_ATTEMPTS_PER_S = 1000.0
LINE_BYTES = 300


# ---------------------------------------------------------------- the disk


def raw_append_rate(directory: Path, n: int) -> float:
    """os.write + os.fsync of ~300-byte lines to one file: appends per second."""
    path = directory / "raw-append.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    line = b"x" * (LINE_BYTES - 1) + b"\n"
    try:
        for _ in range(min(50, n)):  # warm up: allocate, settle the journal
            os.write(fd, line)
            os.fsync(fd)
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            os.fsync(fd)
        dt = time.perf_counter() - t
    finally:
        os.close(fd)
    path.unlink()
    return n / dt


def parallel_append_rate(directory: Path, n_total: int, threads: int = 12) -> float:
    """The same loop from `threads` threads, one file each: total appends per second."""
    per = max(1, n_total // threads)
    line = b"x" * (LINE_BYTES - 1) + b"\n"
    fds = [
        os.open(directory / f"par-{i}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        for i in range(threads)
    ]
    go = threading.Barrier(threads + 1)

    def work(fd: int) -> None:
        go.wait()
        for _ in range(per):
            os.write(fd, line)
            os.fsync(fd)

    ts = [threading.Thread(target=work, args=(fd,)) for fd in fds]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    for i, fd in enumerate(fds):
        os.close(fd)
        (directory / f"par-{i}.log").unlink()
    return per * threads / dt


def chain_append_rate(directory: Path, n: int) -> tuple[float, int]:
    """ChainWriter.append of ~300-byte lines: (appends per second, line length)."""
    from confirmatory.records.chain import dumps, log_seed
    from confirmatory.records.writer import ChainWriter

    path = directory / "chain-append.jsonl"
    seed = log_seed("0" * 64, path.name)
    probe = {"event": "bench", "t": time.time(), "pad": "", "seq": 0, "prev": seed}
    pad = "x" * max(0, LINE_BYTES - 1 - len(dumps(probe)) - 3)  # seq grows to a few digits
    writer = ChainWriter(path, seed)
    try:
        t = time.perf_counter()
        for _ in range(n):
            writer.append({"event": "bench", "t": time.time(), "pad": pad})
        dt = time.perf_counter() - t
    finally:
        writer.close()
    length = len(path.read_bytes().splitlines()[-1]) + 1
    path.unlink()
    return n / dt, length


# ---------------------------------------------------------------- one run (child process)


def child(cfg: dict) -> dict:
    """Run one fake design in this (fresh) process and measure it."""
    import resource

    base = Path(cfg["dir"])
    anchors = {"interval_s": 3600.0} if cfg["witness"] else {"command": ["true"], "interval_s": 3600.0}

    import confirmatory.core.hostrules as hostrules
    from confirmatory.design.load import load_design
    from confirmatory.engine.run import Run
    from confirmatory.host.sampler import HostMonitor
    from confirmatory.testing.designs import write_design

    if cfg.get("slack") is not None:  # diagnostic only: not the rule
        hostrules.BASE_SLACK_S = float(cfg["slack"])
    if cfg.get("no_trees"):  # the comparison only: writers that keep no Merkle frontier (anchors' roots wrong)
        import confirmatory.records.writer as writer_module

        class _NoTree:
            def append(self, leaf: bytes) -> None:
                pass

            def root(self) -> bytes:
                return bytes(32)

        writer_module.Range = _NoTree  # type: ignore[assignment,misc]
        writer_module.leaf_hash = lambda line: b""  # type: ignore[assignment]

    design = write_design(
        base / "design",
        households=cfg["households"],
        models=MODELS,
        arms=ARMS,
        engine_factory="confirmatory.testing.fakes:null_engine",
        host={"sample_interval_s": cfg["sample_interval"], "max_gap_s": 60.0, "sampler_failure_s": 60},
        anchors=anchors,
        household_defaults={"latency_s": 0, "cost_usd": 0.000001},
        overall_cap_usd=1e6,
    )
    loaded = load_design(design)

    # fsyncs, counted per kind of thread (lane-*, host-sampler, anchorer, main...).
    counts: dict[str, int] = {}
    real_fsync = os.fsync
    lock = threading.Lock()

    def counting_fsync(fd: int) -> None:
        name = threading.current_thread().name
        kind = "lanes" if name.startswith("lane-") else ("host sampler" if name == "host-sampler" else "other")
        with lock:
            counts[kind] = counts.get(kind, 0) + 1
        real_fsync(fd)

    # Lane time spent waiting for host evidence.
    waited = [0.0]
    real_wait = HostMonitor.wait_complete

    def timed_wait(self, t_end, stop):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return real_wait(self, t_end, stop)
        finally:
            dt = time.perf_counter() - t
            with lock:
                waited[0] += dt

    HostMonitor.wait_complete = timed_wait  # type: ignore[method-assign]
    rss_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = Run(loaded, base / "run", install_signals=False)
    if cfg.get("journal") is False:  # the comparison run: no spend journal (not a way to run a study)
        run.journal_calls = False
    os.fsync = counting_fsync  # type: ignore[assignment]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    try:
        result = run.execute()
    finally:
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        os.fsync = real_fsync  # type: ignore[assignment]
        HostMonitor.wait_complete = real_wait  # type: ignore[method-assign]
    rss_after_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    # The monitor keeps host.jsonl reduced to a records.hostindex.HostSummary: of the
    # samples' two numbers it holds only the columns' tails and a few blocks.
    summary = run.host._summary
    samples = len(summary.sample_t)
    host_held = 8 * (summary.sample_t.in_memory() + summary.sample_c.in_memory())
    del run, summary

    attempts = 0
    first = last = None
    lane_busy = 0.0
    for log in sorted((base / "run" / "models").glob("*/run.jsonl")):
        with open(log, "rb") as fh:
            for raw in fh:
                e = json.loads(raw)
                ev = e.get("event")
                if ev == "attempt":
                    attempts += 1
                    lane_busy += e["end"] - e["start"]
                    first = e["start"] if first is None else min(first, e["start"])
                elif ev == "lane-end":
                    last = e["t"] if last is None else max(last, e["t"])
    lanes = MODELS * 2
    return {
        "households": cfg["households"],
        "attempts": attempts,
        "status": result.status,
        "wall_s": wall,
        "span_s": (last - first) if first is not None and last is not None else wall,
        "cpu_s": cpu,
        "fsyncs": counts,
        "evidence_wait_s": waited[0],
        "lane_busy_s": lane_busy,
        "lanes": lanes,
        "rss_before_kb": rss_before_kb,
        "rss_after_kb": rss_after_kb,
        "host_samples": samples,
        "host_held_bytes": host_held,
        "slack": cfg.get("slack"),
    }


def run_child(
    directory: Path,
    households: int,
    sample_interval: float,
    *,
    witness: bool,
    slack: float | None = None,
    journal: bool = True,
    no_trees: bool = False,
) -> dict:
    cfg = {
        "dir": str(directory),
        "households": households,
        "sample_interval": sample_interval,
        "witness": witness,
        "slack": slack,
        "journal": journal,
        "no_trees": no_trees,
    }
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"the child run of {households} households failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the report


def per_attempt(r: dict, key: str) -> float:
    return r["fsyncs"].get(key, 0) / max(1, r["attempts"])


def report_run(label: str, r: dict, raw_rate: float) -> dict:
    fsyncs_total = sum(r["fsyncs"].values())
    fpa = fsyncs_total / max(1, r["attempts"])
    rate = r["attempts"] / r["wall_s"]
    span_rate = r["attempts"] / r["span_s"]
    budget = raw_rate / fpa  # attempts/s the disk allows, fsyncs done one after another
    lane_time = r["lanes"] * r["span_s"]
    print(
        f"\n{label}: {r['attempts']} attempts ({r['households']} households x {len(ARMS)} arms x {MODELS} models), "
        f"status {r['status']}"
        + (f", BASE_SLACK_S patched to {r['slack']:g} (diagnostic)" if r["slack"] is not None else "")
    )
    print(
        f"  execute() wall                 {r['wall_s']:8.2f} s   -> {rate:8.0f} attempts/s "
        f"(target >= {TARGET_ATTEMPTS_PER_S:.0f})"
    )
    print(f"  lanes' span (logs)             {r['span_s']:8.2f} s   -> {span_rate:8.0f} attempts/s")
    print(
        f"  process CPU                    {r['cpu_s']:8.2f} s   -> {1e3 * r['cpu_s'] / r['attempts']:8.3f} ms "
        f"per attempt (all threads, incl. sampler)"
    )
    print(
        f"  fsyncs per attempt             {fpa:8.2f}       (lanes {per_attempt(r, 'lanes'):.2f}, host sampler "
        f"{per_attempt(r, 'host sampler'):.2f}, other {per_attempt(r, 'other'):.2f})"
    )
    print(
        f"  disk budget                    {budget:8.0f} attempts/s = {raw_rate:.0f} fsync'd appends/s "
        f"/ {fpa:.2f} fsyncs per attempt"
    )
    print(f"  ratio attempts/s / budget      {rate / budget:8.2f}")
    passes = max(1, r["households"] * MODELS)  # one pass per household in a run without faults
    print(
        f"  lane time waiting for host evidence {100 * r['evidence_wait_s'] / lane_time:5.1f} % "
        f"({1e3 * r['evidence_wait_s'] / passes:.0f} ms per household pass)"
    )
    print(f"  lane time inside attempts      {100 * r['lane_busy_s'] / lane_time:8.1f} %")
    print(
        f"  peak RSS                       {r['rss_before_kb'] / 1024:8.1f} MB before the run, "
        f"{r['rss_after_kb'] / 1024:.1f} MB after; host samples {r['host_samples']}, of which the "
        f"monitor holds {r['host_held_bytes'] / 1024:.0f} kB in memory"
    )
    return {"rate": rate, "fpa": fpa, "budget": budget}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 30 s)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="parent directory on the disk to measure (default: the current directory)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument(
        "--households",
        type=int,
        nargs=2,
        default=None,
        metavar=("SMALL", "LARGE"),
        help="households per model for the two sizes (default 84 1667; --quick 20 100)",
    )
    ap.add_argument("--sample-interval", type=float, default=0.02, help="host sample_interval_s (default 0.02)")
    ap.add_argument("--appends", type=int, default=None, help="appends per disk loop (default 3000; --quick 1000)")
    ap.add_argument(
        "--verify",
        action="store_true",
        help="anchor to a local git witness and run `verify` on the small run at the end",
    )
    ap.add_argument("--what-if", action="store_true", help="add the diagnostic run with the slack patched")
    ap.add_argument("--what-if-slack", type=float, default=0.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    small, large = args.households or ((20, 100) if args.quick else (84, 1667))
    appends = args.appends or (1000 if args.quick else 3000)
    parent = (args.dir or Path.cwd()).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-runner-", dir=parent))
    try:
        # The disk's rate drifts (a shared virtual disk): it is measured in
        # rounds before, between and after the runs, and the median is used.
        rounds: list[tuple[float, float, float, int]] = []

        def disk_round() -> None:
            n = max(100, appends // 3)
            chain_rate, chain_len = chain_append_rate(root, n)
            rounds.append((raw_append_rate(root, n), parallel_append_rate(root, n), chain_rate, chain_len))

        disk_round()
        runs = []
        for n in (small, large):
            runs.append(run_child(root / f"run-{n}", n, args.sample_interval, witness=args.verify))
            disk_round()
        # The spend journal's cost (a fsynced call-cost line per provider
        # call, docs/RUN.md): the small run again without it, in this run.
        unjournaled = run_child(root / f"no-journal-{small}", small, args.sample_interval, witness=False, journal=False)
        disk_round()
        # The Merkle frontier each writer keeps (a leaf hash and on average one
        # node hash per line): the large run again with it and without it,
        # alternately (the disk drifts), twice each.
        trees: dict[bool, list[dict]] = {True: [], False: []}
        for k in range(2):
            for kept in (True, False):
                trees[kept].append(
                    run_child(root / f"trees-{kept}-{k}", large, args.sample_interval, witness=False, no_trees=not kept)
                )
        what_if = None
        if args.what_if:
            what_if = run_child(
                root / f"what-if-{small}", small, args.sample_interval, witness=False, slack=args.what_if_slack
            )
        raws = sorted(r[0] for r in rounds)
        raw = statistics.median(raws)
        par = statistics.median(r[1] for r in rounds)
        chain_rate = statistics.median(r[2] for r in rounds)
        chain_len = rounds[0][3]

        print(f"bench_runner: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, disk of {root}")
        print(
            f"  host sample_interval_s {args.sample_interval:g}, max_gap_s 60, anchors interval 3600 s "
            f"({'local git witness' if args.verify else 'command [true]'}), engine null_engine, latency 0"
        )
        print("\nthe disk (same directory as the runs)")
        print(f"  (median of {len(rounds)} rounds taken before, between and after the runs)")
        print(
            f"  raw os.write + os.fsync, {LINE_BYTES}-byte lines, 1 thread    {raw:8.0f} appends/s "
            f"({1e3 / raw:.3f} ms each; rounds {', '.join(f'{x:.0f}' for x in raws)})"
        )
        print(f"  raw os.write + os.fsync, 12 threads (one file each)       {par:8.0f} appends/s in total")
        print(
            f"  ChainWriter.append, {chain_len}-byte lines                     {chain_rate:8.0f} appends/s "
            f"({1e3 / chain_rate:.3f} ms each)"
        )

        summaries = [report_run(f"run {i + 1}", r, raw) for i, r in enumerate(runs)]
        if what_if is not None:
            summaries.append(report_run("diagnostic", what_if, raw))
        bare = report_run("run 1 again without the spend journal (comparison only)", unjournaled, raw)

        a, b = runs
        grow_kb = b["rss_after_kb"] - a["rss_after_kb"]
        d_att = max(1, b["attempts"] - a["attempts"])
        host_grow = b["host_held_bytes"] - a["host_held_bytes"]
        print("\nmemory")
        print(
            f"  peak RSS {a['rss_after_kb'] / 1024:.1f} MB at {a['attempts']} attempts, "
            f"{b['rss_after_kb'] / 1024:.1f} MB at {b['attempts']} attempts"
        )
        print(f"  growth {grow_kb * 1024 / d_att:8.0f} B per attempt (target: a few hundred at most)")
        print(
            f"  of which host samples kept in memory (the monitor's HostSummary columns: their "
            f"tails and a few blocks): ~{host_grow / d_att:.0f} B per attempt"
        )
        print(f"  the rest                       {(grow_kb * 1024 - host_grow) / d_att:8.0f} B per attempt")

        print("\nsummary")
        best = max(s["rate"] for s in summaries[:2])
        print(
            f"  durable attempts/s             {best:8.0f}   target >= {TARGET_ATTEMPTS_PER_S:.0f}: "
            f"{'met' if best >= TARGET_ATTEMPTS_PER_S else 'NOT met'}"
        )
        if what_if is not None:
            print(f"  same run without the 0.1 s evidence slack (diagnostic): {summaries[2]['rate']:.0f} attempts/s")
        print(f"  memory growth                  {grow_kb * 1024 / d_att:8.0f} B per attempt")
        print(
            f"  spend journal                  {summaries[0]['rate']:8.0f} attempts/s with it, {bare['rate']:.0f} "
            f"without ({summaries[0]['rate'] / bare['rate']:.2f}x; fsyncs per attempt {summaries[0]['fpa']:.2f} "
            f"and {bare['fpa']:.2f})"
        )
        rates = {kept: [r["attempts"] / r["wall_s"] for r in trees[kept]] for kept in trees}
        cpu = {kept: [r["cpu_s"] / r["attempts"] * 1e3 for r in trees[kept]] for kept in trees}
        with_best, without_best = max(rates[True]), max(rates[False])
        print(
            f"  Merkle frontier ({large} households/model, alternately): with {with_best:.0f} attempts/s "
            f"({', '.join(f'{x:.0f}' for x in rates[True])}; {min(cpu[True]):.2f} ms CPU each), without "
            f"{without_best:.0f} ({', '.join(f'{x:.0f}' for x in rates[False])}; {min(cpu[False]):.2f} ms CPU "
            f"each): {100 * (with_best / without_best - 1):+.1f} % (target: at most 5 % slower)"
        )

        if args.verify:
            from confirmatory.verify import verify_run

            rep = verify_run(root / f"run-{small}" / "run")
            print("\nverify of the small run:")
            print(rep.to_table(shown=5))
    finally:
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
