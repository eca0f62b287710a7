"""Progress a person can follow on a long run (docs/RUN.md "Progress").

All of it on stderr (stdout stays clean), in one of three forms:

* **on a terminal**, one region redrawn in place (cursor up, erase line):
  the time left, households ended with a bar of work done and spend as a
  figure, one row per model, the end's wait for a push while it lasts, and
  the last events that need a person. Every line fits the terminal's width
  (broken between phrases, then words); docs/RUN.md "Progress" says what
  each line holds.
* **not a terminal** (a pipe, a file, ``nohup``, CI): one plain line per
  change of state (the run started, a model paused, resumed, stopped or
  done, an event), and a one-line summary every ``interval_s`` (60 s); never
  a control code.
* **with --quiet** (``table=False``): the events alone, one plain line each.

The events (a pause, a stop, the ceiling, a failed push, the end's wait),
printed once each, even with --quiet.

Reads the Run's counters without its locks (a moment stale; never slows a lane).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
import threading
import time
from collections import deque
from typing import Any, TextIO

from confirmatory import FINAL_PUSH_TIMEOUT_S, format_usd
from confirmatory import fit_lines as fit
from confirmatory.cli.households import Households

EVENT_POLL_S = 0.5  # how often events are looked for, and the terminal's region redrawn
KEPT_EVENTS = 4  # events that need a person kept in view on a terminal
BAR_WIDTH = 16
ETA_AFTER_S = 60.0  # the time left is shown from the first minute on, in every frame, or in none before


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 rerun``, ``2 reruns``."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def time_left(ended: int, total: int, elapsed_s: float) -> str | None:
    """``"~H:MM:SS left"`` for the households not yet ended, at the pace of
    those that have (None before the first ends, or when all have). A pace,
    not a promise: reruns, pauses and a cap that stops admission change it."""
    if ended <= 0 or ended >= total or elapsed_s <= 0:
        return None
    # rounded up: while a household remains, never "~0:00:00 left"
    return f"~{_hms(max(1, math.ceil((total - ended) * elapsed_s / ended)))} left at this pace"


def bar(part: int, whole: int, width: int = BAR_WIDTH) -> str:
    """``[#####...........] 31%``: ``part`` of ``whole`` (a full bar past it)."""
    frac = 0.0 if whole <= 0 else max(0.0, part / whole)
    filled = min(width, int(frac * width + 1e-9))
    return f"[{'#' * filled}{'.' * (width - filled)}] {frac * 100:.0f}%"


def _failed_logs(m: Any) -> list[str]:
    """The model's logs whose writer failed (nothing more is acknowledged on them)."""
    return [
        f"models/{m.name}/{name}"
        for name, log in (("run.jsonl", m.run_log), ("admission.jsonl", m.admission_log))
        if getattr(log, "failed", False)
    ]


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _models(run: Any) -> list[Any]:
    """The run's models (none until ``Run.start`` made them; read while it may be adding them)."""
    for _ in range(3):
        try:
            return list(run.models.values())
        except RuntimeError:  # changed size while read
            continue
    return []


def started(run: Any) -> bool:
    """Whether the run's lanes are under way (its pools up and its first anchor written)."""
    return bool(getattr(run, "_lanes", None))


def starting_text(run: Any) -> str:
    """What a run not yet under way is doing (``Run.start``: directory, pools, first anchor)."""
    if getattr(run, "anchorer", None) is not None:
        step = "first anchor (written, and pushed to the witness)"
    elif _models(run):
        step = "pools (each model's engine workers)"
    else:
        step = "the run directory"
    return f"starting: pools, first anchor: now {step}; nothing is admitted before the first anchor"


def _clock_time(t: float | None) -> str:
    """A run-clock time (seconds since the epoch) as ``HH:MM:SS UTC``."""
    if not isinstance(t, (int, float)) or t < 1e9:
        return "?"
    return time.strftime("%H:%M:%S UTC", time.gmtime(t))


def model_state(run: Any, m: Any) -> str:
    """One model's state in words (no time left, no counts): what a change of state is."""
    # lanes that all ended on their own (the draw run through, or the cap)
    # before any stop, their lane-end lines written: done, whatever stopped
    # the run later
    ended_alone = (
        len(m.lane_ends) >= m.spec.lanes
        and m.lane_end_lines >= m.spec.lanes
        and all(r in ("done", "refused") for r in m.lane_ends)
    )
    if ended_alone:
        return "done" if "refused" not in m.lane_ends else "done: its cap admits no more households"
    if m.stopped:
        return f"stopped ({m.stop_cause})"
    if run.stopped:
        return f"stopped ({run.stop_cause})"
    if run.spend.crossed.is_set():
        return "stopped (ceiling)"
    if m.paused:
        return f"PAUSED since {_clock_time(m.pause_t)}"
    if len(m.lane_ends) >= m.spec.lanes:
        return "ended"
    return "running"


def reruns_text(m: Any) -> str:
    """``reruns 2 (provider 2)``: one phrase (a line breaks before or after it, never inside)."""
    by = dict(getattr(m, "reruns_by_class", {}) or {})
    if not m.reruns:
        return "reruns 0"
    return f"reruns {m.reruns} ({', '.join(f'{c} {n}' for c, n in sorted(by.items()))})" if by else f"reruns {m.reruns}"


class Progress:
    def __init__(
        self,
        run: Any,
        *,
        interval_s: float | None = None,
        stream: TextIO | None = None,
        table: bool = True,
        live: bool | None = None,
    ) -> None:
        self.run = run
        self.stream = stream or sys.stderr
        tty = _is_tty(self.stream)
        # live: the region redrawn in place (a terminal, and not --quiet)
        self.live = (tty if live is None else live) and table
        self.interval_s = interval_s if interval_s is not None else 60.0
        self.table = table
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._seen: set[tuple[Any, ...]] = set()
        self._signals_told = 0
        self._pushes_told = 0
        self._kept: deque[str] = deque(maxlen=KEPT_EVENTS)
        self._states: dict[str, str] = {}
        self._started_told = False
        self._drawn = 0  # lines of the region now on the screen
        self._size: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._kept_keys: deque[tuple[Any, ...]] = deque(maxlen=KEPT_EVENTS)
        self._not_kept: set[str] = set()  # said once (a pipe's log), but not a person's to do: not kept in view
        self._key_of: dict[str, tuple[Any, ...]] = {}
        self._counted: dict[str, Households] = {}  # a continued run's, per model
        self._base: dict[str, int] | None = None  # households ended when the lanes started (the pace's zero)
        self._t_started: float | None = None

    def start(self) -> None:
        """Before ``Run.start``: the display says the run is starting from its first moment."""
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Safe whether or not ``start`` ran (a run that failed to start)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if not _models(self.run):
            if self.live:
                self._erase()
            return
        self.tick(final=True)

    def _loop(self) -> None:
        next_summary = time.monotonic() + self.interval_s
        self.tick()
        while not self._stop.wait(EVENT_POLL_S):
            summary = self.table and not self.live and time.monotonic() >= next_summary
            if summary:
                next_summary += self.interval_s
            self.tick(summary=summary)

    def tick(self, *, summary: bool = False, final: bool = False) -> None:
        """One look: new events, changes of state; the region redrawn (a
        terminal) or the summary line written (else, when due, and at the end)."""
        with self._lock:
            events = self.events()
            self._keep(events)
            if self.live:
                self._draw(self.region())
                return
            out = list(events)
            if self.table:
                out = self.state_changes() + out
                if summary or final:
                    out.append(self.summary())
                if final:
                    out.extend(self.lines())
            self._write(out)

    def _stamp(self) -> str:
        return f"[{_hms(time.monotonic() - self._t0)}]"

    def _keep(self, events: list[str]) -> None:
        """The events kept in view ("needs a person"); a pause whose resume
        was accepted leaves it, and a line says the model resumed."""
        by_name = {m.name: m for m in _models(self.run)}
        for key in list(self._kept_keys):
            if key[0] != "paused":
                continue
            m = by_name.get(key[1])
            over = m is not None and (not m.paused or m.pause_t != key[2])
            if over and m is not None and not (m.stopped or self.run.stopped):
                pairs = [(k, t) for k, t in zip(self._kept_keys, self._kept) if k != key]
                pairs.append((("resumed", key[1], key[2]), f"{self._stamp()} {key[1]}: resumed"))
                self._kept_keys.clear()
                self._kept.clear()
                for k, t in pairs[-KEPT_EVENTS:]:
                    self._kept_keys.append(k)
                    self._kept.append(t)
        for e in events:
            if e not in self._not_kept:
                self._kept_keys.append(self._key_of.get(e, ("event",)))
                self._kept.append(e)

    # -- events ------------------------------------------------------------------
    def _once(self, key: tuple[Any, ...], text: str, out: list[str]) -> bool:
        if key in self._seen:
            return False
        self._seen.add(key)
        out.append(f"{self._stamp()} {text}")
        self._key_of[out[-1]] = key
        return True

    def events(self) -> list[str]:
        """What happened since the last call that a person must hear of, once each."""
        out: list[str]
        run, out = self.run, []
        where = shlex.quote(str(run.run_dir))
        for m in _models(run):
            if m.paused and m.pause_t is not None and not (m.stopped or run.stopped):
                failure = m.pause_detail or f"its record is under models/{m.name}/records/"
                self._once(
                    ("paused", m.name, m.pause_t),
                    f"{m.name}: PAUSED for an operator: {failure}; "
                    f"when fixed: confirmatory resume {where} --model {m.name}",
                    out,
                )
            if m.stopped:
                detail = f": {m.stop_detail}" if m.stop_detail else ""
                self._once(("stopped", m.name), f"{m.name}: stopped ({m.stop_cause}){detail}", out)
        if run.spend.crossed.is_set():
            self._once(("ceiling",), "the spend ceiling was crossed: every lane stops", out)
        if run.stopped:
            longest = max((float(m.spec.timeout_s) for m in _models(run)), default=0.0)
            detail = run.stop_detail
            self._once(
                ("stopping",),
                f"run stopping ({run.stop_cause}{': ' + detail if detail else ''}): "
                "calls in flight end within their timeout "
                f"(at most {longest:g} s), then the final anchor is written and pushed "
                f"(at most {FINAL_PUSH_TIMEOUT_S:g} s)",
                out,
            )
        signals = run.signals_received
        if signals > self._signals_told:
            if signals > 1:  # the first one is the stop itself
                out.append(
                    f"{self._stamp()} signal received again: already stopping "
                    "(kill -9 would leave the run unclosed and unanchored)"
                )
            self._signals_told = signals
        anchorer = getattr(run, "anchorer", None)
        failures = list(getattr(anchorer, "push_failures", ()) or ())
        for seq, rc, tail in failures[self._pushes_told :]:
            # no anchor follows the final one: what fails from then on waits for push-anchor
            ending = run.stopped or getattr(run, "_finished", False) or getattr(anchorer, "final_seq", None) is not None
            then = (
                "retry after the run: confirmatory push-anchor " + shlex.quote(str(run.run_dir))
                if ending
                else "it is retried at the next anchor"
            )
            what = f"was {tail}" if rc is None and tail.startswith("not run") else f"failed (rc {rc}): {tail}"
            out.append(f"{self._stamp()} witness push of anchor {seq} {what}; {then}")
        self._pushes_told = len(failures)
        wait = getattr(anchorer, "end_wait", None)
        if wait is not None:
            # The end's only other output is a table of models all done: say the run has not hung.
            left = f"at most {math.ceil(wait.left_s)} s more"
            if wait.anchor_seq == wait.final_seq:
                text = f"waiting for the witness push of the final anchor {wait.final_seq} ({left})"
            else:
                text = (
                    f"waiting for the witness push of anchor {wait.anchor_seq}, still under way ({left}; "
                    f"the final anchor {wait.final_seq}'s push comes after it, in the same time)"
                )
            if self._once(("end push", wait.anchor_seq), text, out):
                self._not_kept.add(out[-1])  # a state, shown while it lasts (region), not kept
        return out

    def end_wait_text(self) -> str | None:
        """While the run's end waits for a witness push: what it waits for, and for how long at most."""
        wait = getattr(getattr(self.run, "anchorer", None), "end_wait", None)
        if wait is None:
            return None
        left = f"at most {math.ceil(wait.left_s)} s more"
        if wait.anchor_seq == wait.final_seq:
            return f"waiting for the witness push of the final anchor {wait.final_seq} ({left})"
        return f"waiting for the witness push of anchor {wait.anchor_seq}, then the final anchor's ({left})"

    # -- counts ---------------------------------------------------------------------
    def counts(self, m: Any) -> tuple[int, int]:
        """The model's households decided and ended, each once: never above its draw
        (a continued run's are read from its logs; else the Run's counters)."""
        if getattr(self.run, "continuation", None) is None:
            return m.decided, m.households_done
        if m.name not in self._counted:
            self._counted[m.name] = Households(self.run.run_dir / "models" / m.name)
        return self._counted[m.name].read()

    def eta(self, models: list[Any]) -> str | None:
        """The run's time left, in every frame once the lanes are under way
        (the head's one slot): at the pace of the households ended since then."""
        run = self.run
        if not started(run) or not models:
            return None
        ended = {m.name: self.counts(m)[1] for m in models}
        if self._base is None:
            self._base, self._t_started = dict(ended), time.monotonic()
        if run.stopped or run.spend.crossed.is_set():
            return "time left: none (the run is stopping)"
        # the households still to run: of the models whose lanes run on (or wait for an operator)
        going = [m for m in models if model_state(run, m).startswith(("running", "PAUSED"))]
        remaining = sum(max(0, len(m.draw) - ended[m.name]) for m in going)
        done = sum(ended.values())
        if not remaining:
            return "time left: none (every lane has ended)"
        paused = [m.name for m in models if m.paused]
        if paused:
            return f"time left: not known while {', '.join(paused)} waits for an operator"
        since = done - sum(self._base.values())
        elapsed = time.monotonic() - (self._t_started or self._t0)
        left = time_left(since, since + remaining, elapsed) if since > 0 else None
        return left or "time left: not known yet (no household has ended since the start)"

    # -- changes of state (not a terminal) ---------------------------------------------
    def state_changes(self) -> list[str]:
        """A plain line for the run's start and each model's change of state
        that no event line already says (a pause, a stop: said with more)."""
        out: list[str] = []
        models = _models(self.run)
        if not started(self.run):
            if "starting" not in self._states:
                self._states["starting"] = "starting"
                out.append(f"{self._stamp()} starting: pools, first anchor")
            return out
        if not self._started_told:
            self._started_told = True
            out.append(
                f"{self._stamp()} run started: {len(models)} model(s), {sum(m.spec.lanes for m in models)} lane(s)"
            )
        for m in models:
            state = model_state(self.run, m)
            before = self._states.get(m.name)
            if state == before:
                continue
            self._states[m.name] = state
            if state.startswith(("PAUSED", "stopped")):
                continue  # the event line says it, with what to do
            if before is not None and before.startswith("PAUSED"):
                out.append(f"{self._stamp()} {m.name}: resumed, {state}")
            elif before is not None or state != "running":
                out.append(f"{self._stamp()} {m.name}: {state}")
        return out

    def summary(self) -> str:
        """The one line written every minute when not on a terminal."""
        run = self.run
        models = _models(run)
        parts = [
            f"{self._stamp()} spend {format_usd(run.spend.total_nusd)} of ceiling {format_usd(run.spend.ceiling_nusd)}"
        ]
        for m in models:
            parts.append(
                f"{m.name} {self.counts(m)[1]}/{len(m.draw)} ended, {plural(m.attempts, 'attempt')}, "
                f"{plural(m.reruns, 'rerun')}, {format_usd(run.spend.model_total(m.name))} of cap "
                f"{format_usd(m.cap_nusd)}, {model_state(run, m)}"
            )
        left = self.eta(models)
        if left:
            parts.append(left)
        return "; ".join(parts)

    # -- the table (the end of a run not on a terminal; tests) ---------------------------
    def lines(self) -> list[str]:
        run = self.run
        out = []
        for m in _models(run):
            n = len(m.draw)
            state = model_state(run, m)
            if state.startswith("PAUSED"):
                state = (
                    f"PAUSED, {m.waiting_resume} lane(s) waiting: "
                    f"confirmatory resume {shlex.quote(str(run.run_dir))} --model {m.name}"
                )
            elif state == "running":
                state = time_left(self.counts(m)[1], n, time.monotonic() - self._t0) or ""
            failed = _failed_logs(m)
            if failed:
                # decided and ended count lines on disk (modelstate); the
                # attempts are those started, some of whose lines are not
                state = (
                    f"{state} | LOG WRITE FAILED: {', '.join(failed)} (decided and ended count "
                    "the lines on disk; attempts, those started)"
                )
            decided, ended = self.counts(m)
            out.append(
                f"  {m.name:<16} households {decided:>3}/{n} decided, {ended:>3} ended | "
                f"attempts {m.attempts:>4}, reruns {m.reruns:>3} | "
                f"{format_usd(run.spend.model_total(m.name))} of cap {format_usd(m.cap_nusd)} {state}".rstrip()
            )
        waiting = " | waiting for host evidence" if getattr(run.host, "waiting", False) else ""
        head = (
            f"{self._stamp()} run spend {format_usd(run.spend.total_nusd)} of ceiling "
            f"{format_usd(run.spend.ceiling_nusd)}{waiting}"
        )
        if run.spend.crossed.is_set():
            head += " | CEILING CROSSED"
        if run.stopped:
            head += f" | STOPPED ({run.stop_cause})"
        return [head] + out

    def render(self) -> None:
        self._write(self.lines())

    # -- the region (a terminal) ---------------------------------------------------------
    def region(self) -> list[str]:
        """The lines of the live region, before they are fitted to the terminal."""
        run = self.run
        models = _models(run)
        elapsed = _hms(time.monotonic() - self._t0)
        if not started(run):
            return [f"confirmatory run  {elapsed}  {run.run_dir}", starting_text(run)]
        spend = run.spend
        # the run's directory last: a long path wraps on its own, after the time and the time left
        left = self.eta(models)
        head = f"confirmatory run  {elapsed}" + (f"  {left}" if left else "") + f"  {run.run_dir}"
        status = ""
        if spend.crossed.is_set():
            status = "  CEILING CROSSED"
        if run.stopped:
            status += f"  STOPPED ({run.stop_cause})"
        if getattr(run.host, "waiting", False):
            status += "  waiting for host evidence"
        counted = {m.name: self.counts(m) for m in models}
        draws = sum(len(m.draw) for m in models)
        ended = sum(c[1] for c in counted.values())
        # the bars are work done (households ended of the draw); money is a figure beside them
        lines = [
            head,
            f"households {ended}/{draws} ended {bar(ended, draws)}  spend {format_usd(spend.total_nusd)} "
            f"of ceiling {format_usd(spend.ceiling_nusd)}{status}",
        ]
        for m in models:
            n = len(m.draw)
            state = model_state(run, m)
            if state.startswith("PAUSED"):
                state += f", {plural(m.waiting_resume, 'lane')} waiting"
            failed = _failed_logs(m)
            if failed:
                state += f"; LOG WRITE FAILED: {', '.join(failed)}"
            used = run.spend.model_total(m.name)
            decided, done = counted[m.name]
            lines.append(
                f"  {m.name}  households {decided}/{n} decided, {done} ended {bar(done, n, 10)}  "
                f"attempts {m.attempts}  {reruns_text(m)}  {format_usd(used)} of cap "
                f"{format_usd(m.cap_nusd)}  {state}"
            )
        wait = self.end_wait_text()
        if wait:
            lines.append(wait)
        if self._kept:
            lines.append("needs a person (latest last):")
            lines.extend(f"  {e}" for e in self._kept)
        return lines

    def _terminal_size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, ValueError, OSError):
            size = shutil.get_terminal_size()
        return max(20, size.columns), max(4, size.lines)

    def _draw(self, lines: list[str]) -> None:
        cols, rows = self._terminal_size()
        # one column spare: a line that fills the last column makes some terminals wrap
        lines = fit(lines, cols - 1)[: rows - 1]
        parts = []
        if self._size is not None and self._size != (cols, rows):
            # resized: what was drawn may have been reflowed; start again at the top
            parts.append("\x1b[H\x1b[2J")
        elif self._drawn:
            parts.append(f"\r\x1b[{self._drawn}A")
        parts.extend(f"\x1b[2K{line}\n" for line in lines)
        parts.append("\x1b[J")  # a shorter region than the last: erase what is left below
        self._size = (cols, rows)
        if self._raw("".join(parts)):
            self._drawn = len(lines)

    def _erase(self) -> None:
        if self._drawn:
            self._raw(f"\r\x1b[{self._drawn}A\x1b[J")
            self._drawn = 0

    def _raw(self, text: str) -> bool:
        try:
            self.stream.write(text)
            self.stream.flush()
            return True
        except Exception:  # noqa: BLE001 - a broken terminal must not stop a run
            return False

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._raw("\n".join(lines) + "\n")
