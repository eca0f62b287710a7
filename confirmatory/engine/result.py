"""What a Run hands back when it has ended: ``RunResult`` (``Run.wait``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunResult:
    status: str  # "completed", "stopped", "ceiling"
    stop_cause: str | None
    spend_total_nusd: int
    run_dir: Path
    final_push_rc: int | None
    abandoned_lanes: int = 0  # lanes still stuck in an abandoned conversation (settled by the Run)
    stop_detail: str = ""  # what stopped it, for a person (the stop line's detail)
    # Lines the end of the run could not write (a full disk, a failed log):
    # everything acknowledged before is on disk; verify says what is missing.
    write_failures: tuple[str, ...] = ()
    final_anchor_written: bool = True
    # Why the witness does not hold the final anchor, as anchor-pushes.jsonl
    # records it (Anchorer.final_push_problem); "" when its push returned 0.
    final_push_problem: str = ""
    # A run file that could not be written: the run ended as a crash does
    # (no close line, no final anchor), for `continue` once the disk is fixed.
    disk_failed: str | None = None
