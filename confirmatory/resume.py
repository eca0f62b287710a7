"""Resume requests: appended by an operator's `resume` command, read by the runner.

``resume.jsonl`` is the one log written by another process than the runner,
so every append happens under a file lock, through a ChainWriter that
re-checks the chain on open. The runner accepts a request only if it was
written after the pause began (DESIGN.md "Pause and resume").
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from confirmatory.chain import ChainWriter, iter_lines, log_seed, sha256_hex

RESUME_LOG = "resume.jsonl"


def _seed(run_dir: Path) -> str:
    return log_seed(sha256_hex((run_dir / "manifest.json").read_bytes()), RESUME_LOG)


def request_resume(run_dir: Path, model: str, *, wall: float | None = None) -> dict[str, Any]:
    """Append a resume request for ``model``; returns the line written."""
    from filelock import FileLock

    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if model not in manifest.get("models", []):
        raise ValueError(f"no model {model!r} in this run (models: {', '.join(manifest.get('models', []))})")
    with FileLock(str(run_dir / (RESUME_LOG + ".lock"))):
        writer = ChainWriter(run_dir / RESUME_LOG, _seed(run_dir))
        try:
            line = {"event": "resume-request", "model": model, "t": time.time() if wall is None else wall}
            writer.append(line)
        finally:
            writer.close()
    return line


def read_requests(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete resume-request line, in order (a torn tail is not a request yet)."""
    path = Path(run_dir) / RESUME_LOG
    out = []
    try:
        for line in iter_lines(path):
            if line.obj.get("event") == "resume-request":
                out.append(line.obj)
    except Exception:  # noqa: BLE001 - a torn tail: what is complete so far counts
        pass
    return out


def resume_command(run_dir: Path, model: str) -> int:
    try:
        line = request_resume(run_dir, model)
    except (ValueError, OSError) as exc:
        print(f"resume: {exc}", file=sys.stderr)
        return 3
    print(f"resume requested for {model} at {line['t']:.3f}; the runner accepts it if the pause began before.")
    return 0
