"""Progress a person can follow on a long run.

Two kinds of output, both on stderr (stdout stays clean):

* **events**, printed once each as they happen, even with ``--quiet``: a model
  paused for an operator (with the command that resumes it), a model stopped,
  the ceiling crossed, the run stopping and what it still waits for, a signal
  received while stopping, a witness push that failed or was not run, and,
  once every lane has ended, the witness push the run's end waits for (and
  for how long at most). An unattended run's log says what needs a person,
  and that a run waiting at its end has not hung.
* **the table**, one line per model (households decided and ended, each
  counted once its line is on disk; attempts started, reruns, spend against
  its cap, and its state: done, paused with the command that resumes it,
  stopped, or the time its remaining households take at the pace so far;
  and any of its logs that could no longer be written), every
  ``interval_s``: every 2 s on a terminal, every 60 s into a file (an
  hour-long run then writes a few hundred lines, not thousands). Not with
  ``--quiet``.

Reads the Run's counters without taking its locks (a display may be a moment
stale; it never slows a lane).
"""

from __future__ import annotations

import math
import shlex
import sys
import threading
import time
from typing import Any, TextIO

from confirmatory.anchors import anchorer as anchors
from confirmatory.core.money import format_usd

EVENT_POLL_S = 0.5  # how often events are looked for


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def time_left(ended: int, total: int, elapsed_s: float) -> str | None:
    """``"~H:MM:SS left"`` for the households not yet ended, at the pace of
    those that have (None before the first ends, or when all have). A pace,
    not a promise: reruns, pauses and a cap that stops admission change it."""
    if ended <= 0 or ended >= total or elapsed_s <= 0:
        return None
    return f"~{_hms((total - ended) * elapsed_s / ended)} left at this pace"


def _failed_logs(m: Any) -> list[str]:
    """The model's logs whose writer failed (nothing more is acknowledged on them)."""
    return [f"models/{m.name}/{name}" for name, log in (("run.jsonl", m.run_log), ("admission.jsonl", m.admission_log))
            if getattr(log, "failed", False)]


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    def __init__(self, run: Any, *, interval_s: float | None = None, stream: TextIO | None = None,
                 table: bool = True) -> None:
        self.run = run
        self.stream = stream or sys.stderr
        self.interval_s = interval_s if interval_s is not None else (2.0 if _is_tty(self.stream) else 60.0)
        self.table = table
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._seen: set[tuple] = set()
        self._signals_told = 0
        self._pushes_told = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Safe whether or not ``start`` ran (a run that failed to start)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self.run.models:
            self._write(self.events())
            if self.table:
                self._write(self.lines())

    def _loop(self) -> None:
        next_table = time.monotonic() + self.interval_s
        while not self._stop.wait(EVENT_POLL_S):
            self._write(self.events())
            if self.table and time.monotonic() >= next_table:
                self._write(self.lines())
                next_table += self.interval_s

    # -- events ------------------------------------------------------------------
    def _once(self, key: tuple, text: str, out: list[str]) -> None:
        if key not in self._seen:
            self._seen.add(key)
            out.append(f"[{_hms(time.monotonic() - self._t0)}] {text}")

    def events(self) -> list[str]:
        """What happened since the last call that a person must hear of, once each."""
        run, out = self.run, []
        where = shlex.quote(str(run.run_dir))
        for m in run.models.values():
            if m.paused and m.pause_t is not None and not (m.stopped or run.stopped):
                failure = m.pause_detail or f"its record is under models/{m.name}/records/"
                self._once(("paused", m.name, m.pause_t),
                           f"{m.name}: PAUSED for an operator: {failure}; "
                           f"when fixed: confirmatory resume {where} --model {m.name}", out)
            if m.stopped:
                detail = f": {m.stop_detail}" if m.stop_detail else ""
                self._once(("stopped", m.name), f"{m.name}: stopped ({m.stop_cause}){detail}", out)
        if run.spend.crossed.is_set():
            self._once(("ceiling",), "the spend ceiling was crossed: every lane stops", out)
        if run.stopped:
            longest = max((float(m.spec.timeout_s) for m in run.models.values()), default=0.0)
            detail = run.stop_detail
            self._once(("stopping",),
                       f"run stopping ({run.stop_cause}{': ' + detail if detail else ''}): "
                       "calls in flight end within their timeout "
                       f"(at most {longest:g} s), then the final anchor is written and pushed "
                       f"(at most {anchors.FINAL_PUSH_TIMEOUT_S:g} s)", out)
        signals = run.signals_received
        if signals > self._signals_told:
            if signals > 1:  # the first one is the stop itself
                out.append(f"[{_hms(time.monotonic() - self._t0)}] signal received again: already stopping "
                           "(kill -9 would leave the run unclosed and unanchored)")
            self._signals_told = signals
        anchorer = getattr(run, "anchorer", None)
        failures = list(getattr(anchorer, "push_failures", ()) or ())
        for seq, rc, tail in failures[self._pushes_told:]:
            # no anchor follows the final one: what fails from then on waits for push-anchor
            ending = (run.stopped or getattr(run, "_finished", False)
                      or getattr(anchorer, "final_seq", None) is not None)
            then = ("retry after the run: confirmatory push-anchor " + shlex.quote(str(run.run_dir))
                    if ending else "it is retried at the next anchor")
            what = (f"was {tail}" if rc is None and tail.startswith("not run") else f"failed (rc {rc}): {tail}")
            out.append(f"[{_hms(time.monotonic() - self._t0)}] witness push of anchor {seq} {what}; {then}")
        self._pushes_told = len(failures)
        wait = getattr(anchorer, "end_wait", None)
        if wait is not None:
            # The end's only other output is a table of models all done: say the run has not hung.
            left = f"at most {math.ceil(wait.left_s)} s more"
            if wait.anchor_seq == wait.final_seq:
                text = f"waiting for the witness push of the final anchor {wait.final_seq} ({left})"
            else:
                text = (f"waiting for the witness push of anchor {wait.anchor_seq}, still under way ({left}; "
                        f"the final anchor {wait.final_seq}'s push comes after it, in the same time)")
            self._once(("end push", wait.anchor_seq), text, out)
        return out

    # -- the table -----------------------------------------------------------------
    def lines(self) -> list[str]:
        run = self.run
        out = []
        for m in run.models.values():
            n = len(m.draw)
            # lanes that all ended on their own (the draw run through, or
            # the cap) before any stop, their lane-end lines written: done,
            # whatever stopped the run later
            ended_alone = (len(m.lane_ends) >= m.spec.lanes and m.lane_end_lines >= m.spec.lanes
                           and all(r in ("done", "refused") for r in m.lane_ends))
            if ended_alone:
                state = "done" if "refused" not in m.lane_ends else "done: its cap admits no more households"
            elif m.stopped:
                state = f"stopped ({m.stop_cause})"
            elif run.stopped:
                state = f"stopped ({run.stop_cause})"
            elif run.spend.crossed.is_set():
                state = "stopped (ceiling)"
            elif m.paused:
                state = (f"PAUSED, {m.waiting_resume} lane(s) waiting: "
                         f"confirmatory resume {shlex.quote(str(run.run_dir))} --model {m.name}")
            elif len(m.lane_ends) >= m.spec.lanes:
                state = "ended"
            else:
                state = time_left(m.households_done, n, time.monotonic() - self._t0) or ""
            failed = _failed_logs(m)
            if failed:
                # decided and ended count lines on disk (modelstate); the
                # attempts are those started, some of whose lines are not
                state = (f"{state} | LOG WRITE FAILED: {', '.join(failed)} (decided and ended count "
                         "the lines on disk; attempts, those started)")
            out.append(
                f"  {m.name:<16} households {m.decided:>3}/{n} decided, {m.households_done:>3} ended | "
                f"attempts {m.attempts:>4}, reruns {m.reruns:>3} | "
                f"{format_usd(run.spend.model_total(m.name))} of cap {format_usd(m.cap_nusd)} {state}".rstrip()
            )
        waiting = " | waiting for host evidence" if getattr(run.host, "waiting", False) else ""
        head = (f"[{_hms(time.monotonic() - self._t0)}] run spend {format_usd(run.spend.total_nusd)} of ceiling "
                f"{format_usd(run.spend.ceiling_nusd)}{waiting}")
        if run.spend.crossed.is_set():
            head += " | CEILING CROSSED"
        if run.stopped:
            head += f" | STOPPED ({run.stop_cause})"
        return [head] + out

    def render(self) -> None:
        self._write(self.lines())

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 - a broken terminal must not stop a run
            pass
