"""Resume requests: appended by an operator's `resume` command, read by the runner.

``resume.jsonl`` is the one log written by another process than the runner,
so every append happens under a file lock, through a ChainWriter that
re-checks the chain on open. The runner accepts a request only if it was
written after the pause began (docs/RUN.md "Readings of the rules", 8).

The `resume` command writes a request only while it can still be acted on
and anchored (``request_resume(..., checked=True)``): a runner holds the
run's lock (``runlock``), the final anchor is not written yet (checked under
the same file lock the Anchorer takes for the final anchor, so no request can
follow it), and the model is paused (its run.jsonl has a pause after its
last accepted resume, and no stop) and this machine's wall clock is past the
pause's time (after a step back it may not be yet). Otherwise ``NotResumable`` says why and
nothing is written. (Without ``checked``, as in-process tests call it, a
request is appended as asked.)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from confirmatory.records.chain import (
    ChainBroken,
    ChainWriteFailed,
    TornTail,
    log_seed,
    sha256_hex,
)
from confirmatory.records.reader import iter_lines
from confirmatory.records.writer import ChainWriter

RESUME_LOG = "resume.jsonl"


class NotResumable(Exception):
    """The request would be useless or harmful; the message says why (one line)."""


def _seed(run_dir: Path) -> str:
    return log_seed(sha256_hex((run_dir / "manifest.json").read_bytes()), RESUME_LOG)


def _objects(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a log another process is writing (a torn tail or
    a damaged line ends it: verify judges the chain, this only reads state)."""
    out = []
    try:
        for line in iter_lines(path):
            out.append(line.obj)
    except Exception:  # noqa: BLE001 - a torn tail: what is complete so far counts
        pass
    return out


def model_state(run_dir: Path, model: str) -> tuple[str, float | None]:
    """What ``models/<model>/run.jsonl`` says: ("stopped", t of the stop),
    ("paused", t of the latest pause since its last accepted resume: several
    lanes may pause it, and the runner, like verify, compares a request with
    the latest) or ("running", None)."""
    paused, paused_t = False, None
    for obj in _objects(Path(run_dir) / "models" / model / "run.jsonl"):
        event = obj.get("event")
        if event == "stop" and obj.get("cause") != "crash":  # a crash's stop ends at its continuation
            return "stopped", obj.get("t")
        if event == "pause":
            paused, paused_t = True, obj.get("t")
        elif event == "resume" and obj.get("accepted") is True:
            paused, paused_t = False, None
    return ("paused", paused_t) if paused else ("running", None)


def _final_anchor_written(run_dir: Path) -> bool:
    return any(o.get("event") == "anchor" and o.get("final") is True for o in _objects(Path(run_dir) / "anchors.jsonl"))


def _check_resumable(run_dir: Path, model: str, now: float) -> None:
    """Under resume.jsonl's lock, which the final anchor is also taken under."""
    if _final_anchor_written(run_dir):
        raise NotResumable(
            "the run is ending: its final anchor is written, so a request now would "
            "stay unanchored and never be read. Nothing written"
        )
    state, since = model_state(run_dir, model)
    if state == "stopped":
        raise NotResumable(
            f"model {model!r} was stopped (at t={since}); a stopped model never "
            f"resumes (see models/{model}/run.jsonl). Nothing written"
        )
    if state != "paused":
        raise NotResumable(
            f"model {model!r} is not paused (no pause since its last accepted resume, "
            f"in models/{model}/run.jsonl): there is nothing to resume, and a request "
            "written now would be rejected at its next pause (a request must follow "
            "the pause). Nothing written"
        )
    if isinstance(since, (int, float)) and not now > since:
        # The request's t is raw wall time; the pause's is the run's clock,
        # which never goes back. After the wall clock stepped back, a request
        # written now would look older than the pause and be rejected.
        raise NotResumable(
            f"this machine's clock ({now:.3f}) is {since - now:.3f} s behind the pause of model {model!r} "
            f"(t={since:.3f} in models/{model}/run.jsonl; the clock was stepped back): a request written "
            "now would predate the pause and be rejected. Retry once the clock has passed it. Nothing written"
        )


def request_resume(run_dir: Path, model: str, *, wall: float | None = None, checked: bool = False) -> dict[str, Any]:
    """Append a resume request for ``model``; returns the line written.

    Raises ``ValueError`` for a model the run does not have and, when
    ``checked``, ``NotResumable`` when the request cannot be acted on
    (module docstring)."""
    from filelock import FileLock

    from confirmatory.records import lock as runlock

    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if model not in manifest.get("models", []):
        raise ValueError(f"no model {model!r} in this run (models: {', '.join(manifest.get('models', []))})")
    if checked and not runlock.held(run_dir):
        raise NotResumable(
            f"no runner holds the run's lock ({runlock.lock_path(run_dir)}): the run has ended (or its "
            "runner died), so nothing would read the request, and a line written now would follow "
            "the final anchor and stay unanchored. Nothing written"
        )
    with FileLock(str(run_dir / (RESUME_LOG + ".lock"))):
        now = time.time() if wall is None else wall
        if checked:
            _check_resumable(run_dir, model, now)
        writer = ChainWriter(run_dir / RESUME_LOG, _seed(run_dir))
        try:
            line = {"event": "resume-request", "model": model, "t": now}
            writer.append(line)
        finally:
            writer.close()
    return line


def read_requests(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete resume-request line, in order (a torn tail is not a request yet)."""
    return [o for o in _objects(Path(run_dir) / RESUME_LOG) if o.get("event") == "resume-request"]


def resume_command(run_dir: Path, model: str) -> int:
    """``confirmatory resume RUN_DIR --model M``: 0 when the request was written,
    3 when it was refused (nothing written)."""
    try:
        line = request_resume(run_dir, model, checked=True)
    except (ValueError, OSError, NotResumable) as exc:
        print(f"resume refused: {exc}", file=sys.stderr)
        return 3
    except (TornTail, ChainBroken) as exc:
        # A request whose write was cut off (a full disk, a kill mid-write)
        # leaves a torn line; nothing can be chained after it.
        print(
            f"resume refused: {RESUME_LOG} is damaged, so no request can be chained after it. "
            f"Nothing written. {exc}. The runner reads only its complete lines and verify reports "
            "the damage. The model stays paused: if the run cannot go on, end it with SIGINT or "
            "SIGTERM to the runner (docs/RUN.md, Signals).",
            file=sys.stderr,
        )
        return 3
    except ChainWriteFailed as exc:
        print(
            f"resume failed: {exc}. If the line reached the disk the runner takes it (a resume line "
            f"in models/{model}/run.jsonl says so); otherwise {RESUME_LOG} may now end in a torn line, "
            "which refuses later requests.",
            file=sys.stderr,
        )
        return 3
    print(
        f"resume requested for {model} (paused) at {line['t']:.3f}; the runner takes it within moments "
        f"and logs its decision as a resume line in models/{model}/run.jsonl."
    )
    return 0
