"""What one model's lanes share, and what they know of an attempt.

``ModelState`` is the state of one model during a run (admission, stop and
pause state, attempts under way, progress counters), guarded by its
``cond``; ``Attempt`` is one ended attempt as the lane knows it, and
``Running`` one under way, watched by the main thread for its deadline.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confirmatory.engine.spend import AttemptSpend


@dataclass
class Attempt:
    """One attempt as the lane knows it once it has ended."""

    household: str
    arm: str
    pass_index: int
    lane: int
    start: float
    end: float
    record: dict[str, Any]
    record_rel: str
    record_sha256: str
    reruns_used: int
    cls: str | None = None
    action: str | None = None
    signature: str | None = None
    acted: bool = False  # its stop or pause has been carried out
    host_lines: int | None = None  # how many host.jsonl lines its class was decided on
    round_index: int = 0  # the household's run it belongs to: 1 and up after a continuation re-ran it
    replaced: bool = False  # cut short by the runner's crash; its household runs again whole

    @property
    def cost_nusd(self) -> int:
        return int(self.record["cost_nusd"])

    def failure(self, model: str, limit: int = 300) -> str:
        """Where a person finds this attempt's failure and what it was, one
        line: ``models/<model>/records/...json: Type: message`` (the message
        is the record's, already redacted)."""
        where = f"models/{model}/{self.record_rel}"
        error = self.record.get("error")
        if not isinstance(error, dict):
            return where
        kind = str(error.get("type") or "error")
        message = " ".join(str(error.get("message") or "").split())
        text = f"{kind}: {message}" if message else kind
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return f"{where}: {text}"

    def line(self) -> dict[str, Any]:
        return {
            "event": "attempt",
            "lane": self.lane,
            "household": self.household,
            "arm": self.arm,
            "pass": self.pass_index,
            "start": self.start,
            "end": self.end,
            "cost_nusd": self.cost_nusd,
            "record": self.record_rel,
            "record_sha256": self.record_sha256,
            "class": self.cls,
            "action": self.action,
            "signature": self.signature,
            "reruns_used": self.reruns_used,
            "host_lines": self.host_lines,
            **({"round": self.round_index} if self.round_index else {}),
            **({"replaced": True} if self.replaced else {}),
        }


@dataclass
class Running:
    """An attempt under way, watched for its deadline by the main thread."""

    spend: AttemptSpend
    household: str
    arm: str
    pass_index: int
    lane: int
    start: float
    deadline_record: tuple[dict[str, Any], str, str, float] | None = None
    # Set once the watcher has written the deadline record: between its
    # abandon() and this, the lane must wait, not read a half-made outcome.
    deadline_written: threading.Event = field(default_factory=threading.Event)
    abandoned_mono: float | None = None  # time.monotonic() when the deadline took it
    # Why its deadline record could not be written (a full disk), if it could
    # not: its spend is then in late costs that say so (verify requires it).
    record_lost: str | None = None
    # The deadline is measured on the monotonic clock: a wall clock stepped
    # forward must not abandon an attempt early, nor one stepped back (which
    # holds the run's clock still) keep one running past its deadline.
    start_mono: float = field(default_factory=time.monotonic)
    last_in_pass: bool = False
    round_index: int = 0
    pending_counted: bool = False  # its pass's classes counted as pending (under m.cond)


@dataclass
class ModelState:
    """Everything the lanes of one model share. Guarded by ``cond`` unless noted."""

    name: str
    spec: Any
    run_log: Any
    admission_log: Any
    model_dir: Any
    draw: list[str]
    arm_orders: dict[str, list[str]]
    households: dict[str, Any]
    cap_nusd: int
    reserve_nusd: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    pool: Any = None
    # Admission state (changed under cond *and* the ceiling's lock).
    refused: bool = False
    finished_nusd: int = 0
    under_way: int = 0
    pending: int = 0  # households whose pass has ended but whose classes are undecided
    # Stop / pause state (changed under the ceiling's lock; waiters use cond).
    stopped: bool = False
    stop_cause: str | None = None
    stop_detail: str = ""  # what stopped it, for a person (the record and its error)
    paused: bool = False
    pause_t: float | None = None
    pause_detail: str = ""  # the failure that paused it: its record and error
    waiting_resume: int = 0  # lanes blocked by the pause (progress display, operators)
    running: dict[str, Running] = field(default_factory=dict)
    # Set when this model can start nothing more (its stop, the run's stop,
    # the ceiling): a lane then stops waiting for host evidence.
    halt: threading.Event = field(default_factory=threading.Event)
    inconclusive: dict[str, set[str]] = field(default_factory=dict)
    # Progress counters (changed under cond, read without it for display
    # only). ``decided`` and ``households_done`` count lines on disk: a
    # decision or household is counted once its line was appended (fsynced),
    # so that after a failed write the table says what the records hold.
    decided: int = 0
    households_done: int = 0
    attempts: int = 0  # attempts started (each writes its record when it ends)
    reruns: int = 0  # attempts started in a pass after the first
    # ... by the class of the arm's attempt before (what made it a rerun: provider, operator, ...)
    reruns_by_class: dict[str, int] = field(default_factory=dict)
    lane_ends: list[str] = field(default_factory=list)  # each ended lane's reason (written or not)
    lane_end_lines: int = 0  # how many of those lanes' lane-end lines were written
    # A continued run (docs/RUN.md "Continuing a crashed run"): the round each
    # household runs at (a household the crash cut short runs again whole at
    # its next round), each lane's first draw index, and the lanes that end
    # at once (their last decision refused: reason "refused").
    rounds: dict[str, int] = field(default_factory=dict)
    closed: bool = False  # its close line was written before a crash (a continuation writes none again)
    lane_start: dict[int, int] = field(default_factory=dict)
    lane_done: dict[int, str] = field(default_factory=dict)
