"""Benchmark: verify and continue on a crashed run, beside verify on the same run complete.

    python benchmarks/bench_continue.py            # ~20,000 attempts
    python benchmarks/bench_continue.py --quick    # ~2,000 attempts

One invocation, one disk. A rule-abiding run is generated
(confirmatory.testing.rungen, 3 models x 3 arms, faults included); a copy is
then crashed as a SIGKILL leaves a run: every log cut back to what the last
anchor before the final one counted (so what came after is gone; host.jsonl,
which the sampler wrote on, kept whole), the
records of households not yet decided removed. Measured, each in this
process with one worker (the median of --repeat runs):

1. verify on the complete run;
2. verify on the crashed copy (state crashed, no violation);
3. continue's own work on another crashed copy: its verify, the torn tails
   moved aside, the position read from the records, and every line it
   writes before the lanes start (continuation lines, the crash's stop, the
   replaced attempts and cut households); not the design's checks (the
   witness's git, the keys) nor the households it then runs.

Reported: each time and its ratio to (1); the target is (2) and (3) each
within 2x of (1). Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def crash_copy(src: Path, dst: Path) -> int:
    """``src`` copied to ``dst`` and cut back to its last non-final anchor; the lines removed."""
    shutil.copytree(src, dst)
    anchors = [json.loads(x) for x in (dst / "anchors.jsonl").read_bytes().splitlines()]
    kept = [a for a in anchors if a.get("event") == "anchor" and not a.get("final")]
    last = kept[-1]
    cut = 0
    for rel, at in last["logs"].items():
        if rel == "host.jsonl":
            continue  # the sampler wrote on until the kill: the lanes' classes read its later lines
        path = dst / rel
        lines = path.read_bytes().splitlines(keepends=True)
        cut += len(lines) - at["lines"]
        path.write_bytes(b"".join(lines[: at["lines"]]))
    # the anchors after it and their pushes never happened
    a_lines = (dst / "anchors.jsonl").read_bytes().splitlines(keepends=True)
    (dst / "anchors.jsonl").write_bytes(b"".join(a_lines[: last["seq"] + 1]))
    p_lines = (dst / "anchor-pushes.jsonl").read_bytes().splitlines(keepends=True)
    (dst / "anchor-pushes.jsonl").write_bytes(
        b"".join(x for x in p_lines if json.loads(x).get("anchor_seq", -1) <= last["seq"])
    )
    for mdir in sorted((dst / "models").iterdir()):
        decided = {json.loads(x).get("household") for x in (mdir / "admission.jsonl").read_bytes().splitlines()}
        for h in sorted((mdir / "records").iterdir()):
            if h.name not in decided:
                shutil.rmtree(h)
    return cut


def design_only(path: Path):
    """The generated design's rules and tables, without the study's files it names (the generator
    writes none): all that continue's own work reads of it."""
    import tomllib
    from types import SimpleNamespace

    from confirmatory.design.model import Design

    return SimpleNamespace(
        design=Design.model_validate(tomllib.loads(path.read_text())), households=(), pins={}, base_dir=path.parent
    )


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--households", type=int, default=None, help="households per model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()

    from confirmatory.commands.continue_run import prepare
    from confirmatory.engine.continuation import begin
    from confirmatory.engine.run import Run
    from confirmatory.testing.rungen import Plan, generate_run
    from confirmatory.verify import verify_run

    households = args.households or (250 if args.quick else 2400)
    root = Path(tempfile.mkdtemp(prefix=".bench-continue-", dir=(args.dir or Path.cwd())))
    try:
        complete = root / "complete"
        t = time.perf_counter()
        # every model runs its whole draw (no harness stop, no pause), anchored often
        # enough that the last anchor before the final one falls near the end
        generate_run(
            complete,
            Plan(
                households=households, cap_usd=1e6, reserve_usd=0.001, operator=None, harness=None, anchor_every_s=600.0
            ),
        )
        gen_s = time.perf_counter() - t
        attempts = sum(
            x.count(b'"event":"attempt"') for p in (complete / "models").glob("*/run.jsonl") for x in [p.read_bytes()]
        )
        full_s, rep = timed(lambda: verify_run(complete, workers=1), args.repeat)
        assert rep.complete and rep.ok, rep.to_table()
        crashed = root / "crashed"
        cut = crash_copy(complete, crashed)
        crash_s, rep = timed(lambda: verify_run(crashed, workers=1), args.repeat)
        assert rep.state == "crashed" and rep.ok, rep.to_table()

        def continuation_work() -> None:
            target = root / "continued"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(crashed, target)
            loaded = design_only(target / "design.toml")
            t0 = time.perf_counter()
            report = verify_run(target, workers=1)
            plan = prepare(target, loaded, report, "benchmark")
            run = Run(loaded, target, install_signals=False, continuation=plan)
            run.clock.start_above(plan["position"].crash_t)
            from confirmatory.records.rundir import open_run_dir

            run.files = open_run_dir(target)
            for spec in loaded.design.models:
                from confirmatory.engine.modelstate import ModelState

                mf = run.files.models[spec.name]
                run.models[spec.name] = ModelState(
                    spec.name,
                    spec,
                    mf.run_log,
                    mf.admission_log,
                    mf.dir,
                    list(mf.manifest["draw"]),
                    dict(mf.manifest["arm_orders"]),
                    run.households,
                    mf.manifest["cap_nusd"],
                    mf.manifest["reserve_nusd"],
                )
            begin(run, plan["position"], reason="benchmark", torn=plan["torn"])
            run.files.close()
            spent.append(time.perf_counter() - t0)

        spent: list[float] = []
        for _ in range(args.repeat):
            continuation_work()
        cont_s = statistics.median(spent)
        print(
            f"bench_continue: a generated run of {attempts:,} attempts ({households} households x 3 models x "
            f"3 arms; generated in {gen_s:.1f} s); its crashed copy cut back to its last non-final anchor "
            f"({cut:,} lines after it removed)"
        )
        print(f"  verify, complete run                    {full_s:7.2f} s")
        print(
            f"  verify, crashed copy                    {crash_s:7.2f} s   {crash_s / full_s:5.2f}x   "
            f"(target <= 2x: {'met' if crash_s <= 2 * full_s else 'NOT met'})"
        )
        print(
            f"  continue's own work (verify included)   {cont_s:7.2f} s   {cont_s / full_s:5.2f}x   "
            f"(target <= 2x: {'met' if cont_s <= 2 * full_s else 'NOT met'})"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
