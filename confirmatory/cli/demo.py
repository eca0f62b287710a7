"""``confirmatory demo``: run a bundled design, verify the run, say where everything is.

Owns only the wiring of the first-minute experience: choosing the design
(the reference study unless told otherwise) and a fresh run directory, then
handing over to the runner (``confirmatory.cli.run.run_command``) and the
verifier (``confirmatory.verify.verify_command``). It decides nothing about
the run itself.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
import tomllib
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"
REFERENCE_DESIGN = DEMO_DIR / "reference.toml"


def default_run_dir(design: Path, now: _dt.datetime | None = None, base: Path | None = None) -> Path:
    """``runs/<study id>-<UTC timestamp>`` under ``base`` (the current directory)."""
    try:
        study_id = str(tomllib.loads(design.read_text(encoding="utf-8"))["study"]["id"])
    except (OSError, ValueError, KeyError, TypeError):
        study_id = "study"  # the runner reports the design's problems properly
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in study_id) or "study"
    stamp = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return (base or Path.cwd()) / "runs" / f"{safe}-{stamp}"


def demo_command(run_dir: Path | None = None, design: Path | None = None, *, exiting: bool = False) -> int:
    """Run ``design`` into ``run_dir``, verify it, print a guide; the exit status.

    Non-zero when the run did not complete cleanly (the runner's status) or
    when verification failed (the verifier's status). A run refused before
    it started (exit status 3: a bad design, an existing run directory) is
    said so and nothing is verified: the directory is not this demo's.

    A signal before the run takes the signals over (the witness made, the
    design checked, litellm imported) ends the demo as it ends ``run``: one
    line, exit status 128 + its number. The run then puts back the handlers
    the demo found, so a signal after it (while the demo verifies) is not
    named one before the run. ``exiting``: the caller ends the process next
    (the CLI); the interrupt signals are then ignored after an early one,
    as ``run`` does, so that a second one changes nothing.
    """
    from confirmatory.cli.exits import EXIT_REFUSED  # noqa: PLC0415
    from confirmatory.cli.run import (  # noqa: PLC0415 - keeps `demo --help` light
        EarlyInterrupt,
        early_interrupt_status,
        restore_handlers,
        run_command,
        run_dir_problems,
        take_early_interrupts,
    )
    from confirmatory.engine.signals import ignore_interrupts  # noqa: PLC0415
    from confirmatory.verify import verify_command  # noqa: PLC0415

    design = Path(design) if design is not None else REFERENCE_DESIGN
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(design)
    print(f"confirmatory demo: design {design}", file=sys.stderr)
    print(f"confirmatory demo: run directory {run_dir}", file=sys.stderr)

    handlers = take_early_interrupts()
    early = False
    try:
        # A run directory the run would refuse (one that exists: an earlier
        # run, perhaps of another design) is refused here, before the witness
        # is made beside it: the witness must exist before the run (its
        # preflight checks the clone), and a demo that makes nothing must
        # leave nothing behind.
        problems = run_dir_problems(run_dir)
        if problems:
            # ... with the design's own problems, as `run` lists them (the
            # file read and checked; nothing imported, probed or made)
            problems = _design_problems(design) + problems
            print("refused to start:", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return _not_started(EXIT_REFUSED)

        from confirmatory.anchors.witness import init_local_witness  # noqa: PLC0415

        # The bundled designs push their anchors to {run_dir}/../.witness/clone.
        witness = init_local_witness(run_dir.parent / ".witness")
        run_rc = run_command(design, run_dir, workers=None, quiet=False, restore_to=handlers)
    except EarlyInterrupt as exc:
        early = True
        return _not_started(early_interrupt_status(exc, run_dir))
    finally:
        if early and exiting:
            ignore_interrupts()  # the process ends now: a second signal changes nothing
        else:
            restore_handlers(handlers)
    if run_rc == EXIT_REFUSED or not (run_dir / "manifest.json").is_file():
        # Refused before starting (by the status, not by what the directory
        # holds: one that appeared meanwhile is some other run's): nothing of
        # this demo's to verify or show.
        return _not_started(run_rc)

    # Against the witness too, as a reviewer would: it fetches the protected
    # remote the run pushed every anchor to, and compares.
    print("\nconfirmatory demo: verifying the run records and the witness", file=sys.stderr)
    # ... and against the design's households file: every model's draw is its households
    households = households_file(design)
    verify_rc = verify_command(run_dir, witness=witness, households=households)
    report = write_demo_report(run_dir, witness, households)
    print(guide(run_dir, run_rc=run_rc, verify_rc=verify_rc, witness=witness, households=households,
                report=report))
    if run_rc != 0:
        return run_rc
    return verify_rc


def write_demo_report(run_dir: Path, witness: Path | None, households: Path | None) -> Path | None:
    """The reviewer's page of the run (``confirmatory report``), beside it; None
    (and why, on stderr) when it could not be written: the demo's status is the run's and verify's."""
    from confirmatory.report import write_report  # noqa: PLC0415

    print("\nconfirmatory demo: writing the report page", file=sys.stderr)
    try:
        out, _ = write_report(run_dir, witness=witness, households=households)
    except Exception as exc:  # noqa: BLE001 - the page is an extra: the demo's status stays the run's and verify's
        print(f"confirmatory demo: the report could not be written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return out


def _design_problems(design: Path) -> list[str]:
    """What ``run``'s preflight says of the design file itself, one line each."""
    from confirmatory.design.load import load_design
    from confirmatory.design.model import DesignError  # noqa: PLC0415

    try:
        load_design(design)
    except DesignError as exc:
        return [f"{design}: {p}" for p in exc.problems]
    return []


def _not_started(run_rc: int) -> int:
    print(f"confirmatory demo: the run did not start (exit status {run_rc})", file=sys.stderr)
    return run_rc or 1


def households_file(design: Path) -> Path | None:
    """The design's households file, where its ``households.path`` names one (relative to the design)."""
    import tomllib  # noqa: PLC0415

    try:
        table = tomllib.loads(design.read_text(encoding="utf-8")).get("households")
    except (OSError, ValueError):
        return None
    rel = table.get("path") if isinstance(table, dict) else None
    if not isinstance(rel, str) or not rel:
        return None
    path = design.parent / rel
    return path if path.is_file() else None


def guide(run_dir: Path, *, run_rc: int, verify_rc: int, witness: Path | None = None,
          households: Path | None = None, report: Path | None = None) -> str:
    """Where everything is, and the commands to go on with."""
    models_dir = run_dir / "models"
    models = sorted(p.name for p in models_dir.iterdir() if p.is_dir()) if models_dir.is_dir() else []
    records = sum(1 for _ in models_dir.glob("*/records/*/*/*.json")) if models_dir.is_dir() else 0
    example = models[0] if models else "MODEL"
    lines = [
        "",
        f"Run:     {'completed' if run_rc == 0 else f'ended with exit status {run_rc}'}; "
        f"verify {'passed' if verify_rc == 0 else f'FAILED (exit status {verify_rc})'}",
        f"Run dir: {run_dir}",
        "  manifest.json, design.toml     what was run (the design byte for byte)",
        "  config.json                    what was and was not pinned down",
        "  run.jsonl, host.jsonl          run events, host evidence",
        "  anchors.jsonl                  line counts and heads of every log",
        f"  models/<model>/run.jsonl       attempts, households, stops ({', '.join(models) or 'none'})",
        "  models/<model>/admission.jsonl admission decisions",
        f"  models/<model>/records/<household>/<arm>/<pass>.json   {records} attempt records",
        "",
        f"Verify again:  confirmatory verify {shlex.quote(str(run_dir))}"
        + (f" --witness {shlex.quote(str(witness))}" if witness is not None else "")
        + (f" --households {shlex.quote(str(households))}" if households is not None else ""),
    ]
    if report is not None:
        lines.append(f"Report:        {_shown(report)}   (open it in a browser; it fetches nothing)")
    paused = [m for m in models if b'"event":"pause"' in _read(models_dir / m / "run.jsonl")]
    if paused:
        lines.append(f"The pause:     its pause and resume lines are in models/{paused[0]}/run.jsonl")
    else:
        pause_design = shlex.quote(_shown(DEMO_DIR / "operator-pause.toml"))
        lines += [f"See a pause:   confirmatory demo --design {pause_design}",
                  f"               (while it runs: confirmatory resume RUN_DIR --model {example})"]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    """``path`` as a command typed here takes it: relative to the working
    directory when it lies under it (the repository's root), else absolute
    (the package installed elsewhere, the demo run from another directory)."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
