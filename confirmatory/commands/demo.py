"""``confirmatory demo``: run a bundled design, verify the run, say where everything is.

Owns only the wiring of the first-minute experience: choosing the design
(the reference study unless told otherwise) and a fresh run directory, then
handing over to the runner (``confirmatory.commands.run.run_command``) and the
verifier (``confirmatory.verify.verify_command``). It decides nothing about
the run itself.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confirmatory.commands.run import DisplayFactory, SummaryShower

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


def demo_command(
    run_dir: Path | None = None,
    design: Path | None = None,
    *,
    exiting: bool = False,
    display: DisplayFactory | None = None,
    show_summary: SummaryShower | None = None,
) -> int:
    """Run ``design`` into ``run_dir``, verify it, print a guide; the exit status.
    ``display``, ``show_summary``: how the run and its end are shown (as ``run_command``'s).

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
    from confirmatory.commands.run import (  # noqa: PLC0415 - keeps `demo --help` light
        EarlyInterrupt,
        early_interrupt_status,
        restore_handlers,
        run_command,
        run_dir_problems,
        take_early_interrupts,
    )
    from confirmatory.core.exits import EXIT_REFUSED  # noqa: PLC0415
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
        # ... and the demo signs their checkpoints with a key of its own, outside its run directories
        design = signed_demo_design(design, run_dir.parent)
        run_rc = run_command(
            design,
            run_dir,
            workers=None,
            quiet=False,
            restore_to=handlers,
            display=display,
            show_summary=show_summary,
            sim_invoice=invoice_path(run_dir),
        )
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
    print(guide(run_dir, run_rc=run_rc, verify_rc=verify_rc, witness=witness, households=households, report=report))
    print("\n".join(invoice_lines(run_dir, design)))
    if run_rc != 0:
        return run_rc
    return verify_rc


def invoice_path(run_dir: Path) -> Path:
    """``<RUN_DIR>.sim-invoice.json``: where the demo writes the simulator's invoice."""
    return run_dir.with_name(run_dir.name + ".sim-invoice.json")


def _served(design: Path) -> dict[str, str]:
    """Each simulated model of ``design`` -> the model name the simulator serves it as."""
    try:
        models = tomllib.loads(design.read_text(encoding="utf-8")).get("models") or []
    except (OSError, ValueError):
        return {}
    return {
        str(m["name"]): str(m["litellm_model"]).rsplit("/", 1)[-1]
        for m in models
        if isinstance(m, dict) and m.get("api_base") == "simulator" and "name" in m and "litellm_model" in m
    }


def _close_spend(run_dir: Path, model: str) -> int | None:
    import json  # noqa: PLC0415

    spend = None
    for raw in _read(run_dir / "models" / model / "run.jsonl").splitlines():
        if b'"event":"close"' in raw:
            try:
                spend = json.loads(raw).get("spend_nusd")
            except ValueError:
                continue
    return spend if type(spend) is int else None


def invoice_lines(run_dir: Path, design: Path) -> list[str]:
    """The demo's closing lines: per simulated model, its spend (its close
    line's ``spend_nusd``) beside what the simulator's invoice bills for the
    name it serves, and whether they are equal, to the nano-dollar."""
    import json  # noqa: PLC0415

    from confirmatory.core.money import format_usd  # noqa: PLC0415

    served = _served(design)
    path = invoice_path(run_dir)
    if not served:
        return []
    try:
        invoice = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ["", f"Invoice: the simulator's invoice was not written ({_shown(path)})"]
    lines = ["", f"Invoice: {_shown(path)} (the simulator's bill, by each vendor's rule)"]
    off = 0
    by_name: dict[str, list[str]] = {}
    for model, name in served.items():
        by_name.setdefault(name, []).append(model)
    for name, models in by_name.items():
        spends = [_close_spend(run_dir, m) for m in models]
        billed = (invoice.get(name) or {}).get("nusd", 0)
        who = ", ".join(models)
        if any(x is None for x in spends):
            lines.append(f"  {who} ({name}): no close line; invoiced {format_usd(billed)}")
            off += 1
            continue
        spent = sum(x for x in spends if x is not None)
        tokens = (invoice.get(name) or {}).get("tokens") or {}
        kinds = ", ".join(f"{k} {v:,}" for k, v in tokens.items() if v)
        said = "equal" if spent == billed else f"DIFFERS by {spent - billed:+,} nano-dollars"
        lines.append(
            f"  {who} ({name}): spent {format_usd(spent)}, invoiced {format_usd(billed)}: {said} ({kinds} tokens)"
        )
        off += spent != billed
    lines.append(
        "  every model's spend equals the simulator's invoice, to the nano-dollar"
        if not off
        else f"  {off} model(s) whose spend is not the simulator's invoice"
    )
    return lines


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


DEMO_KEY_NAME = "demo.confirmatory.invalid"


def demo_key(runs: Path) -> tuple[Path, str]:
    """The demo's study key, ``runs/.keys/demo.key`` (mode 0600), made once and
    reused; its file and verifier key."""
    from confirmatory.records.keyfile import make_key_file, read_note_signer  # noqa: PLC0415

    path = Path(runs) / ".keys" / "demo.key"
    if path.exists():
        return path, str(read_note_signer(path).verifier)
    return path, make_key_file(path, DEMO_KEY_NAME)


def signed_demo_design(design: Path, runs: Path) -> Path:
    """The design the demo runs: a bundled design (``confirmatory/demo/*.toml``)
    that names no signer is written to ``runs/.designs/<name>.toml`` with its
    relative paths (the households file, the pinned harness files) made
    absolute and an ``[anchors.signer]`` table appended that names the demo's
    key (``demo_key``) and pins its verifier key. Any other design is run as
    it is.

    Why a copy and not a bundled design that names the key: a fresh machine
    makes a fresh key, so no verifier key can be pinned in the package; and
    editing the bundled file would change the design the docs and tests pin
    by sha256. The copy keeps every pin of the bundled design (the same
    files, the same sha256), and the run records the copy byte for byte
    (design.toml, design_sha256), so what was run, and with which key, is
    exactly what the run directory says."""
    import json  # noqa: PLC0415

    design = Path(design)
    if design.resolve().parent != DEMO_DIR.resolve():
        return design
    text = design.read_text(encoding="utf-8")
    table = tomllib.loads(text)
    if (table.get("anchors") or {}).get("signer") is not None:
        return design
    rels = [str(table.get("households", {}).get("path", ""))] + list((table.get("harness") or {}).get("pins") or {})
    for rel in dict.fromkeys(r for r in rels if r and not Path(r).is_absolute()):
        text = text.replace(json.dumps(rel), json.dumps(str(DEMO_DIR / rel)))
    key, vkey = demo_key(runs)
    text += (
        "\n# Added by `confirmatory demo`: the demo's study key signs every checkpoint (docs/EVIDENCE.md).\n"
        f"[anchors.signer]\nkey_file = {json.dumps(str(key.resolve()))}\nverifier_key = {json.dumps(vkey)}\n"
    )
    out = Path(runs) / ".designs" / design.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
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


def guide(
    run_dir: Path,
    *,
    run_rc: int,
    verify_rc: int,
    witness: Path | None = None,
    households: Path | None = None,
    report: Path | None = None,
) -> str:
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
        lines += [
            f"See a pause:   confirmatory demo --design {pause_design}",
            f"               (while it runs: confirmatory resume RUN_DIR --model {example})",
        ]
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
