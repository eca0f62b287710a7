"""`confirmatory continue RUN_DIR --reason TEXT`: carry a crashed run on.

Refused, writing nothing, unless: verify finds the run crashed (no close
line, no runner holding its lock) with no violation; a file in the design's
directory (or ``--design``) hashes as the run's design and every pin and the
households still hash as it says; the witness clone holds every anchor the
directory holds; and the keys, the harness, the engine and the evidence
sources pass `run`'s own checks. Then the run goes on in the same directory,
appending only (docs/RUN.md "Continuing a crashed run").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confirmatory.core.exits import EXIT_REFUSED

if TYPE_CHECKING:
    from confirmatory.commands.run import DisplayFactory, SummaryShower


def find_design(run_dir: Path, given: Path | None) -> tuple[Path | None, str]:
    """The design file the run was made from: ``given``, else a ``*.toml`` in
    the design's directory (the manifest's ``anchors.cwd``) that hashes as
    the run's design; (None, why) when there is none."""
    from confirmatory.records.chain import sha256_hex

    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    want = manifest.get("design_sha256")
    if given is not None:
        try:
            got = sha256_hex(Path(given).read_bytes())
        except OSError as exc:
            return None, f"{given}: cannot be read: {exc}"
        if got != want:
            return None, f"{given}: its sha256 {got} is not the run's design ({want}): the design changed"
        return Path(given), ""
    where = Path((manifest.get("anchors") or {}).get("cwd") or ".")
    for path in sorted(where.glob("*.toml")) if where.is_dir() else []:
        try:
            if sha256_hex(path.read_bytes()) == want:
                return path, ""
        except OSError:
            continue
    return None, (
        f"no design file in {where} hashes as the run's design ({want}): it changed or moved; "
        "give it with --design PATH"
    )


def refusals(run_dir: Path, report: Any) -> list[str]:
    """Why verify's view of the run forbids a continuation, if it does."""
    from confirmatory.verify.report import COMPLETE, RUNNING

    if report.state == COMPLETE:
        return [
            f"{run_dir}: the run is complete (a close line and a pushed final anchor): there is nothing to carry on"
        ]
    if report.state == RUNNING:
        return [f"{run_dir}: a runner holds the run's lock: it is running, not crashed"]
    if not report.ok:
        found = [v for r in report.results for v in r.first]
        shown = [f"invariant {v.invariant}: {v.where()}: {v.message}" for v in (*report.start_here, *found)][:3]
        count = sum(r.violations for r in report.results)
        return [
            f"{run_dir}: verify finds {count} violation(s); a continuation would build on records that "
            "break the procedure (confirmatory verify lists them all):",
            *shown,
        ]
    crash = report.crash or {}
    if not crash.get("manifest", True):
        return [
            f"{run_dir}: the run crashed before its run manifest was written: nothing was started and "
            "nothing was spent; start the run anew in another directory"
        ]
    return []


def continue_command(
    run_dir: Path,
    *,
    reason: str,
    design: Path | None = None,
    workers: int | None = None,
    quiet: bool = False,
    display: DisplayFactory | None = None,
    show_summary: SummaryShower | None = None,
) -> int:
    """``confirmatory continue RUN_DIR --reason TEXT``: the refusals (nothing
    written) or the run carried on in its directory; the exit status as
    ``run``'s. ``display``, ``show_summary``: as ``run_command``'s."""
    from confirmatory.commands.run import (
        EarlyInterrupt,
        early_interrupt_status,
        take_early_interrupts,
    )
    from confirmatory.engine.signals import ignore_interrupts

    take_early_interrupts()
    try:
        return _continue(
            Path(run_dir),
            reason=reason,
            design=design,
            workers=workers,
            quiet=quiet,
            display=display,
            show_summary=show_summary,
        )
    except EarlyInterrupt as exc:
        return early_interrupt_status(exc, Path(run_dir))
    finally:
        ignore_interrupts()


def _refuse(problems: list[str]) -> int:
    print("refused to continue (nothing written):", file=sys.stderr)
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return EXIT_REFUSED


def _continue(
    run_dir: Path,
    *,
    reason: str,
    design: Path | None,
    workers: int | None,
    quiet: bool,
    display: DisplayFactory | None,
    show_summary: SummaryShower | None = None,
) -> int:
    from filelock import FileLock, Timeout

    from confirmatory.commands.run import _execute
    from confirmatory.design.load import load_design
    from confirmatory.design.model import DesignError
    from confirmatory.engine.preflight import (
        entry_problems,
        evidence_problems,
        model_problems,
        registry_problems,
        signer_problems,
    )
    from confirmatory.records import lock as runlock
    from confirmatory.verify import verify_run

    if not reason.strip():
        return _refuse(["--reason: say why the run is carried on (it is written into every log)"])
    if not (run_dir / "manifest.json").is_file() and not (run_dir / "run.jsonl").exists():
        return _refuse([f"{run_dir}: no run manifest: not a run directory, or one whose run never started"])
    # verify first (it reads the lock as a reviewer would), then the lock: a
    # runner that took it meanwhile makes the run running, not crashed.
    report = verify_run(run_dir, workers=1)
    problems = refusals(run_dir, report)
    if problems:
        return _refuse(problems)
    lock = FileLock(str(runlock.lock_path(run_dir)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return _refuse([f"{run_dir}: a runner holds the run's lock: it is running, not crashed"])
    try:
        path, why = find_design(run_dir, design)
        if path is None:
            return _refuse([why])
        try:
            loaded = load_design(path, workers=workers)
        except DesignError as exc:
            return _refuse([f"{path}: {p}" for p in exc.problems])
        manifest = json.loads((run_dir / "manifest.json").read_bytes())
        problems = pin_problems(loaded, manifest)
        problems.extend(entry_problems(loaded))
        problems.extend(registry_problems(path))
        problems.extend(model_problems(loaded, keys=True))
        problems.extend(evidence_problems(loaded))
        problems.extend(signer_problems(loaded))
        problems.extend(witness_problems(run_dir, manifest, loaded.base_dir))
        if problems:
            return _refuse(problems)
        if (report.crash or {}).get("stage") == "closed":
            if (report.crash or {}).get("final_anchor"):
                return push_final(run_dir, manifest)
            return finish_close(run_dir, manifest, loaded, report, quiet=quiet)
        continuation = prepare(run_dir, loaded, report, reason)
        return _execute(
            loaded,
            path,
            run_dir,
            quiet=quiet,
            exiting=True,
            continuation=continuation,
            display=display,
            show_summary=show_summary,
        )
    finally:
        lock.release()


def pin_problems(loaded: Any, manifest: dict[str, Any]) -> list[str]:
    """The design's pins as verified now against those the run started with."""
    was = (manifest.get("harness") or {}).get("pins") or {}
    now = dict(loaded.pins)
    return [
        f"harness.pins: {p}: was {was.get(p)} at the run's start, is {now.get(p)} now"
        for p in sorted(set(was) | set(now))
        if was.get(p) != now.get(p)
    ]


def witness_problems(run_dir: Path, manifest: dict[str, Any], base_dir: Path, *, catch_up: bool = True) -> list[str]:
    """The witness clone the anchor command pushes to must hold every anchor
    the directory holds (checked read-only, as verify --witness does)."""
    from confirmatory.anchors.check import check_witness
    from confirmatory.anchors.witness import witness_args

    command = (manifest.get("anchors") or {}).get("command")
    if not command:
        return []
    args = witness_args(command)
    if args is None or "--clone" not in args:
        return [
            f"anchors.command: {command!r} is not the bundled witness script, so whether its witness "
            "holds every anchor cannot be checked here; a continuation needs that"
        ]
    anchors = run_dir / "anchors.jsonl"
    if not anchors.exists() or b'"event":"anchor"' not in anchors.read_bytes():
        return []  # the directory holds no anchor yet: nothing the witness must hold
    clone = Path(args[args.index("--clone") + 1])
    clone = clone if clone.is_absolute() else Path((manifest.get("anchors") or {}).get("cwd") or base_dir) / clone
    try:
        found = check_witness(clone, run_dir)
        if found and catch_up:
            # The runner died before the witness took its last anchors (a
            # push under way, or none yet): file the directory's anchors
            # with the witness as push-anchor would, then look again. Only
            # the witness is written; the continuation line names the anchor.
            from confirmatory.anchors.check import run_id_from_pushes
            from confirmatory.anchors.git import WitnessError
            from confirmatory.anchors.witness import publish

            try:
                publish(clone, run_dir / "anchors.jsonl", run_id_from_pushes(run_dir) or _manifest_run_id(manifest))
            except WitnessError as exc:
                return [f"witness: {clone}: it lacks anchors the directory holds, and filing them failed: {exc}"]
            found = check_witness(clone, run_dir)
    except OSError as exc:
        return [f"witness: {clone}: cannot be checked: {exc}"]
    return [f"witness: {p}" for p in found]


def _manifest_run_id(manifest: dict[str, Any]) -> str | None:
    command = list((manifest.get("anchors") or {}).get("command") or [])
    return str(command[command.index("--run-id") + 1]) if "--run-id" in command[:-1] else None


def prepare(run_dir: Path, loaded: Any, report: Any, reason: str) -> dict[str, Any]:
    """Move each torn tail aside, then read where the records stand."""
    from confirmatory.core import rules
    from confirmatory.engine.continuation import kept_before, move_torn_tail, read_position
    from confirmatory.records.hostindex import HostSummary
    from confirmatory.records.reader import iter_lines, iter_objects

    crash = report.crash or {}
    # (read before run.jsonl's own torn tail is moved aside: complete lines only)
    k = 1 + sum(
        1
        for obj in (iter_objects(run_dir / "run.jsonl") if (run_dir / "run.jsonl").exists() else ())
        if obj.get("event") == "continuation"
    )
    tails = list(crash.get("torn_tails", ()))
    from confirmatory.records.layout import load_layout

    rels = [spec.relpath for spec in load_layout(run_dir).logs()]
    torn = kept_before(run_dir, rels, k, {t["log"] for t in tails})
    torn += [move_torn_tail(run_dir, t["log"], int(t["offset"]), k) for t in tails]
    # a runner that died while it made the directory: its making finished first
    import time

    from confirmatory.records.rundir import complete_run_dir

    made = complete_run_dir(loaded, run_dir, time.time())
    r = loaded.design.rules
    host = HostSummary(
        max_gap_s=float(loaded.design.host.max_gap_s), pressure_threshold=float(loaded.design.host.pressure_threshold)
    )
    for line in iter_lines(run_dir / "host.jsonl"):
        host.add(dict(line.obj))
    position = read_position(
        run_dir,
        precedence=r.precedence,
        class_lists=rules.CLASS_LISTS,
        max_reruns=r.max_reruns_per_arm,
        inconclusive_limit=r.inconclusive_household_limit,
        host_summary=host,
    )
    return {"position": position, "reason": reason, "torn": torn, "made": made}


def push_final(run_dir: Path, manifest: dict[str, Any]) -> int:
    """A run killed after its final anchor, before the witness took it:
    push it, as `push-anchor` does (the run's lock is held)."""
    from confirmatory.anchors.push import _push_anchor_locked

    def fail(message: str) -> int:
        print(f"confirmatory continue: {message}", file=sys.stderr)
        return 1

    anchors = manifest.get("anchors") or {}
    raw = (run_dir / "manifest.json").read_bytes()
    return _push_anchor_locked(
        run_dir, raw, list(anchors.get("command") or []), run_dir / anchors.get("cwd", "."), None, fail
    )


def finish_close(run_dir: Path, manifest: dict[str, Any], loaded: Any, report: Any, *, quiet: bool) -> int:
    """A run killed after its close line, before its final anchor: nothing is
    left to run, so write what its runner would have written next, the final
    anchor (every log as it stands, dated above every time recorded), and
    push it. Exit 0 when the witness took it, 6 when not."""
    from confirmatory.anchors.anchorer import FINAL_PUSH_TIMEOUT_S, Anchorer
    from confirmatory.core.exits import EXIT_WITNESS
    from confirmatory.engine.continuation import move_torn_tail
    from confirmatory.engine.evidence import study_attester
    from confirmatory.records.chain import log_seed, sha256_hex
    from confirmatory.records.layout import load_layout
    from confirmatory.records.reader import iter_objects
    from confirmatory.records.writer import ChainWriter
    from confirmatory.runtime.clock import Clock

    # a final anchor the kill cut short: its bytes kept beside the log (as a
    # continuation keeps a torn tail), named in the final anchor written now
    k = 1 + sum(1 for o in iter_objects(run_dir / "run.jsonl") if o.get("event") == "continuation")
    torn = [move_torn_tail(run_dir, t["log"], int(t["offset"]), k) for t in (report.crash or {}).get("torn_tails", ())]
    layout = load_layout(run_dir)
    msha = sha256_hex((run_dir / "manifest.json").read_bytes())
    external = {
        spec.relpath: spec.seed
        for spec in layout.logs()
        if spec.relpath not in ("anchors.jsonl", "anchor-pushes.jsonl")
    }
    clock = Clock()
    clock.start_above(float((report.crash or {}).get("last_durable_t") or 0.0))
    cmd = (manifest.get("anchors") or {}).get("command")
    anchors = ChainWriter(run_dir / "anchors.jsonl", log_seed(msha, "anchors.jsonl"))
    pushes = ChainWriter(run_dir / "anchor-pushes.jsonl", log_seed(msha, "anchor-pushes.jsonl"))
    try:
        anchorer = Anchorer(
            run_dir,
            clock,
            logs={},
            external_logs=external,
            manifests=["manifest.json", *(f"models/{m}/manifest.json" for m in layout.models)],
            anchors=anchors,
            pushes=pushes,
            interval_s=float(loaded.design.anchors.interval_s),
            command=list(cmd) if cmd else None,
            cwd=loaded.base_dir,
            evidence=study_attester(run_dir, clock, manifest, loaded, pushes, anchors.path),
        )
        rc = anchorer.finish(push_timeout=FINAL_PUSH_TIMEOUT_S, extra={"torn_tails": torn} if torn else None)
    finally:
        anchors.close()
        pushes.close()
    if rc not in (None, 0):
        print(
            f"confirmatory continue: the run's final anchor is written, but the witness did not take it "
            f"(rc {rc}); retry with: confirmatory push-anchor {run_dir}",
            file=sys.stderr,
        )
        return EXIT_WITNESS
    if not quiet:
        print(f"the run had closed when its runner died: its final anchor is written and pushed: {run_dir}")
    return 0
