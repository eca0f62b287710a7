"""Benchmark: the engine pool's two backends in one run - processes and Ray.

    python benchmarks/bench_engine.py            # ~1 min
    python benchmarks/bench_engine.py --quick    # ~25 s

6 models x 2 lanes, as the runner drives them: per model one pool of 2
workers (``workers_per_model`` 2), and per model 2 threads (its lanes)
calling its pool back to back. The engine is the fake engine's ``double``
(``confirmatory.testing.fakes:engine_op``) with ``sleep_s`` 0 (a zero-cost
engine: what is measured is the pool) and 0.05 (a 50 ms engine call).

For each backend:

* **pool start**: the 6 pools started as the runner starts them, wall time:
  one after another for processes (``ProcessEnginePool`` spawns its
  processes), all at once for Ray (``RayEnginePool`` creates its actors and
  waits for each to import the engine); for Ray, the local cluster's start
  (``ray.init(address="local", num_cpus=2)``) is reported apart, as is its
  shutdown. Ray actors ask for 0.1 CPU each so that 12 fit on 2 CPUs.
* **calls/s**: every call of the 12 lanes / the wall time from the first
  call to the last answer.
* **overhead per call**: a call's mean latency as its lane saw it, minus the
  engine's own time (0 or 50 ms). With 12 lanes on 2 cores the zero-cost
  figure includes waiting for a core; the 50 ms engine sleeps, so its
  ideal is 12 lanes / 0.05 s = 240 calls/s.

Benchmarks are scripts, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET = "confirmatory.testing.fakes:engine_op"
MODELS, LANES, WORKERS = 6, 2, 2
RAY_ACTOR_CPUS = 0.1
TOOLS = {"tools": ["double"]}


def drive(pools: list[Any], calls_per_lane: int, engine_s: float) -> dict[str, float]:
    """LANES threads per pool, each making ``calls_per_lane`` calls; calls/s and overhead."""
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[BaseException] = []
    start = threading.Barrier(len(pools) * LANES + 1)

    def lane(pool: Any, k: int) -> None:
        mine = []
        start.wait()
        try:
            for i in range(calls_per_lane):
                t0 = time.perf_counter()
                assert pool.call("double", {"x": i + k, "sleep_s": engine_s}, TOOLS) == 2 * (i + k)
                mine.append(time.perf_counter() - t0)
        except BaseException as exc:  # reported below
            failures.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=lane, args=(p, k)) for p in pools for k in range(LANES)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failures:
        raise failures[0]
    n = len(latencies)
    return {
        "calls": n,
        "wall_s": wall,
        "calls_per_s": n / wall,
        "overhead_ms": (statistics.fmean(latencies) - engine_s) * 1000,
        "p95_ms": sorted(latencies)[int(0.95 * (n - 1))] * 1000,
    }


def measure(backend: str, sizes: tuple[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": backend}
    cluster = None
    if backend == "ray":
        from confirmatory.engine.raypool import RayCluster, RayEnginePool

        t0 = time.perf_counter()
        cluster = RayCluster("local", local_cpus=2)
        out["cluster_start_s"] = time.perf_counter() - t0
        out["ray_version"] = cluster.ray_version

        def make() -> Any:
            return RayEnginePool(TARGET, WORKERS, num_cpus=RAY_ACTOR_CPUS)
    else:
        from confirmatory.engine.pool import ProcessEnginePool

        def make() -> Any:
            return ProcessEnginePool(TARGET, WORKERS)

    t0 = time.perf_counter()
    if backend == "ray":  # as the runner starts them (engine.pools): every model's at once
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=MODELS) as ex:
            pools = list(ex.map(lambda _: make(), range(MODELS)))
    else:  # one after another, as the runner does
        pools = [make() for _ in range(MODELS)]
    out["pool_start_s"] = time.perf_counter() - t0
    try:
        drive(pools, 5, 0.0)  # warm-up: imports, first frames
        out["zero"] = drive(pools, sizes[0], 0.0)
        out["fifty"] = drive(pools, sizes[1], 0.05)
    finally:
        for p in pools:
            p.close()
        if cluster is not None:
            t0 = time.perf_counter()
            cluster.close()
            out["cluster_stop_s"] = time.perf_counter() - t0
    return out


def report(results: list[dict[str, Any]]) -> None:
    by = {r["backend"]: r for r in results}
    print(f"\nengine pools: {MODELS} models x {LANES} lanes, {WORKERS} workers per model")
    if "ray" in by:
        r = by["ray"]
        print(
            f"ray {r['ray_version']}: local cluster start {r['cluster_start_s']:.2f} s, "
            f"shutdown {r['cluster_stop_s']:.2f} s (actors at {RAY_ACTOR_CPUS} CPU)"
        )
    print(f"{'':22}{'processes':>14}{'ray':>14}{'ray/processes':>16}")

    def row(label: str, get: Any, fmt: str) -> None:
        vals = [get(by[b]) if b in by else None for b in ("processes", "ray")]
        cells = [format(v, fmt) if v is not None else "-" for v in vals]
        ratio = f"{vals[1] / vals[0]:.2f}" if None not in vals and vals[0] else "-"
        print(f"{label:22}{cells[0]:>14}{cells[1]:>14}{ratio:>16}")

    row("pool start (6), s", lambda r: r["pool_start_s"], ".2f")
    row("zero-cost calls/s", lambda r: r["zero"]["calls_per_s"], ".0f")
    row("zero-cost overhead ms", lambda r: r["zero"]["overhead_ms"], ".2f")
    row("zero-cost p95 ms", lambda r: r["zero"]["p95_ms"], ".2f")
    row("50 ms calls/s", lambda r: r["fifty"]["calls_per_s"], ".0f")
    row("50 ms overhead ms", lambda r: r["fifty"]["overhead_ms"], ".2f")
    row("50 ms p95 ms", lambda r: r["fifty"]["p95_ms"] - 50.0, ".2f")
    ideal = MODELS * LANES / 0.05
    for b in ("processes", "ray"):
        if b in by:
            print(f"{b}: 50 ms engine at {by[b]['fifty']['calls_per_s'] / ideal:.0%} of the ideal {ideal:.0f} calls/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (about 25 s)")
    ap.add_argument("--backend", choices=("processes", "ray", "both"), default="both")
    args = ap.parse_args()
    sizes = (60, 10) if args.quick else (400, 40)
    backends = ["processes", "ray"] if args.backend == "both" else [args.backend]
    if "ray" in backends:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray is not installed (pip install -e '.[ray]'): measuring processes only", file=sys.stderr)
            backends.remove("ray")
    results = []
    for b in backends:
        print(f"measuring {b} ...", file=sys.stderr)
        results.append(measure(b, sizes))
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
