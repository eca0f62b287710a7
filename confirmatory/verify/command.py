"""`confirmatory verify`: the report printed, and the exit code.

Owns what the command adds to `verify_run`: a directory that is not a run
(one line on stderr, exit 1); a run whose runner still holds its lock is
still being written, and its report provisional; the table, or JSON with
``--json``; the exit status (docs/VERIFY.md "States"): 0 complete and every
invariant holds, 1 a violation, 3 no violation but not complete (crashed or
running).
"""

from __future__ import annotations

import sys
from pathlib import Path

from confirmatory.verify.verification import verify_run


def verify_command(
    run_dir: Path, as_json: bool = False, witness: Path | None = None, households: Path | None = None
) -> int:
    """``confirmatory verify``: the report on stdout; 0 only when every invariant holds.

    A directory with none of a run's files (manifest.json, run.jsonl,
    anchors.jsonl) is not a run: one line on stderr, exit 1. A run whose
    runner still holds its lock (``runlock.held``) is still being written:
    the report is printed between two notices saying it is provisional (with
    --json, on stderr and as ``"provisional": true``); its exit is 3 when it
    found no violation (what a run under way lacks is not one), else 1."""
    import json

    from confirmatory.records import (
        lock as runlock,  # filelock only: nothing of the runner
    )

    root = Path(run_dir)
    # A run cut short before its manifest is a run directory all the same:
    # the runner takes the lock beside it before it makes the directory.
    if not any((root / rel).exists() for rel in ("manifest.json", "run.jsonl", "anchors.jsonl")) and not (
        runlock.lock_path(root).exists()
    ):
        print(
            f"verify: {root} is not a run directory (it has no manifest.json, run.jsonl or anchors.jsonl)",
            file=sys.stderr,
        )
        return 1
    # Asked before reading: a runner that ends while we read was still writing what we read.
    live = runlock.held(root)
    notice = (
        f"*** THE RUN IS STILL RUNNING (a runner holds {runlock.lock_path(root)}): this report is "
        "provisional; its logs are still being written. Verify again after the run has ended. ***"
    )
    if live:
        print(notice, file=sys.stderr if as_json else sys.stdout)
    report = verify_run(run_dir, witness=witness, households=households)
    if as_json:
        text = report.to_json()
        if live:
            text = json.dumps({**json.loads(text), "provisional": True}, indent=2, sort_keys=True)
        sys.stdout.write(text + "\n")
    else:
        sys.stdout.write(report.to_table() + "\n")
    if live:
        print(notice, file=sys.stderr if as_json else sys.stdout)
    return report.exit_status()
