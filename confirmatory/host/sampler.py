"""The host sampler: what the machine was doing while attempts ran.

Owns the one thread that writes host.jsonl after its `open` line, the real
readers behind it (memory pressure, memory, swap, load) and the outside
evidence sources (a file to follow, a command to re-run).  It is the only
module that imports psutil.  What a line means for an attempt is decided in
`confirmatory.core.hostrules`; this module only writes the lines and keeps a copy
in memory so that the lanes can ask without re-reading the file.

Failure vocabulary: a reader signals a failed reading by raising `ReadFailed`
(or `OSError`); that becomes a `sample-failed` line or a retried evidence
read.  Anything else raised inside the sampler is a bug: it ends the thread,
which is captured as `outcome` and reported as cause `sampler`.
See docs/HOST.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from confirmatory.core.hostrules import HostVerdict
from confirmatory.host.sources import (  # noqa: F401 - re-exported: the sources' types and factory
    READ_ERRORS,
    CommandSource,
    EvidenceSource,
    FileSource,
    ReadFailed,
    SourceRead,
    command_timeout_s,
    sources_from_spec,
)
from confirmatory.host.sources import retry_pause_s as default_retry_pause_s  # the parameter is named so
from confirmatory.records.chain import ChainWriteFailed
from confirmatory.records.hostindex import HostSummary
from confirmatory.records.reader import iter_lines, iter_objects

PSI_MEMORY = "/proc/pressure/memory"
WAIT_POLL_S = 0.05  # how often wait_complete looks at the caller's stop event
HALT_WAIT_S = 0.25  # once the caller is stopping, how long it still waits for its sample


@dataclass(frozen=True, slots=True)
class MemoryReading:
    pressure: float  # 0-100
    available: int  # bytes
    swap_used: int  # bytes


class HostReaders(Protocol):
    @property
    def sources(self) -> Sequence[EvidenceSource]: ...  # read only: RealReaders's is a list

    def memory(self) -> MemoryReading: ...

    def load(self) -> float: ...


# ---------------------------------------------------------------- real readers


def parse_psi_some_avg10(text: str) -> float:
    """`avg10` of the `some` line of a PSI file (percent of time stalled)."""
    for row in text.splitlines():
        kind, _, rest = row.partition(" ")
        if kind == "some":
            fields = dict(item.split("=", 1) for item in rest.split() if "=" in item)
            return float(fields["avg10"])
    raise ValueError(f"no 'some' line in PSI text {text[:80]!r}")


RESERVE_FRACTION = 0.10  # below this share of RAM available, the fallback figure rises
SWAP_FULL_FRACTION = 0.01  # swap traffic of 1% of RAM per second reads as 100


def psutil_pressure(available: int, total: int, swap_bytes_per_s: float) -> float:
    """The fallback memory-pressure figure, 0-100, where PSI is not available.

    ``100 * max(scarcity, traffic)``, each clamped to [0, 1]: scarcity rises
    from 0 at 10% of RAM available to 1 at none; traffic is swap-in plus
    swap-out bytes per second over 1% of RAM per second.  Either alone means
    tasks are waiting on memory; docs/HOST.md says why these two.
    """
    if total <= 0:
        return 0.0
    scarcity = (RESERVE_FRACTION - available / total) / RESERVE_FRACTION
    traffic = swap_bytes_per_s / (SWAP_FULL_FRACTION * total)
    return 100.0 * min(1.0, max(0.0, scarcity, traffic))


class RealReaders:
    """This machine's readings: PSI where readable, a psutil figure otherwise.

    The choice is made once, at construction, so that one run's pressure
    figures all mean the same thing; a PSI file that later fails to read is
    a failed reading, not a silent switch to the other figure.
    """

    def __init__(self, psi_path: str | os.PathLike[str] = PSI_MEMORY, sources: Sequence[EvidenceSource] = ()):
        self.psi_path = Path(psi_path)
        self.sources = list(sources)
        try:
            parse_psi_some_avg10(self.psi_path.read_text())
            self.pressure_source = "psi"
        except (OSError, ValueError, KeyError):
            self.pressure_source = "psutil"
        self._last_swap: tuple[float, int] | None = None  # (monotonic, sin + sout)

    def memory(self) -> MemoryReading:
        try:
            vm = psutil.virtual_memory()
            sw = psutil.swap_memory()
            if self.pressure_source == "psi":
                pressure = parse_psi_some_avg10(self.psi_path.read_text())
            else:
                pressure = self._fallback_pressure(vm.available, vm.total, sw.sin + sw.sout)
        except (psutil.Error, OSError, ValueError, KeyError) as exc:
            raise ReadFailed(f"memory reading: {type(exc).__name__}: {exc}") from exc
        return MemoryReading(pressure=pressure, available=int(vm.available), swap_used=int(sw.used))

    def _fallback_pressure(self, available: int, total: int, swapped: int) -> float:
        now = time.monotonic()
        rate = 0.0  # the first reading has no earlier swap count to compare with
        if self._last_swap is not None and now > self._last_swap[0]:
            rate = max(0, swapped - self._last_swap[1]) / (now - self._last_swap[0])
        self._last_swap = (now, swapped)
        return psutil_pressure(available, total, rate)

    def load(self) -> float:
        try:
            if hasattr(os, "getloadavg"):
                return float(os.getloadavg()[0])
            return float(psutil.getloadavg()[0])
        except (psutil.Error, OSError) as exc:
            raise ReadFailed(f"load reading: {exc}") from exc


# ---------------------------------------------------------------- the monitor


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class HostMonitor:
    """The sampler thread and the in-memory copy of what it wrote.

    The caller has written host.jsonl's `open` line through `writer`; `start`
    reads the log back so that the copy the lanes ask holds the same lines
    `verify` will read.  Only the sampler thread appends to `writer`.
    """

    def __init__(
        self,
        writer: Any,
        clock: Any,
        spec: Any,
        *,
        on_fatal: Callable[[str, str], None],
        readers: HostReaders | None = None,
        window: tuple[float, float | None] | None = None,
        retry_pause_s: float | None = None,
    ) -> None:
        self._writer, self._clock, self._spec = writer, clock, spec
        self._on_fatal = on_fatal
        if readers is None:
            timeout = command_timeout_s(spec.sample_interval_s)
            readers = RealReaders(sources=sources_from_spec(spec.evidence, command_timeout_s=timeout))
        self.readers = readers
        # The booking window: the design's, else the run's own span from start().
        self._window = window if window is not None else getattr(spec, "window", None)
        self._retry_pause_s = (
            retry_pause_s if retry_pause_s is not None else default_retry_pause_s(spec.sample_interval_s)
        )
        self._cond = threading.Condition()
        # What the sampler wrote, reduced to what the lanes' verdicts need
        # (records.HostSummary, the summary verify takes its verdicts from:
        # its memory does not grow with the samples, only with the log's
        # exceptions; the lines themselves are on disk).
        self._summary = self._new_summary()
        # Set by a lane waiting for evidence: the sampler takes a step at once
        # instead of at its next interval, so a pass waits about one step.
        self._demand = threading.Event()
        self._stop_event = threading.Event()
        self._stopping = False
        self._ended = False
        self._thread: threading.Thread | None = None
        self._waiters = 0
        self._read_began: dict[str, float] = {}  # source -> clock time its last good read began
        self._fatal_sent: set[str] = set()
        self._last_good_mono = 0.0
        self._last_error: str | None = None
        self.outcome: BaseException | None = None  # what ended the thread, if not stop()
        self.sampler_cpu_s = 0.0  # CPU time the sampler thread has used (benchmark)

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None or self._stopping:
                raise RuntimeError("a HostMonitor starts once, and not after stop()")
            self._summary = self._new_summary()
            for line in iter_lines(Path(self._writer.path)):
                self._summary.add(dict(line.obj))
            if self._window is None:
                self._window = (self._clock.now(), None)
            self._last_good_mono = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="host-sampler", daemon=False)
        self._thread.start()

    def stop(self) -> None:
        """Flag, wake, and let the thread finish its current step; idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._stop_event.set()
        self._demand.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def waiting(self) -> bool:
        """Whether some lane is waiting for host evidence (for the progress display)."""
        return self._waiters > 0

    def _new_summary(self) -> HostSummary:
        return HostSummary(
            max_gap_s=float(self._spec.max_gap_s), pressure_threshold=float(self._spec.pressure_threshold)
        )

    @property
    def lines(self) -> tuple[dict[str, Any], ...]:
        """The lines written so far, as written (read back from host.jsonl
        without their chain fields ``seq`` and ``prev``; for tests and tools)."""
        # Complete lines only: a line being appended by another thread (an
        # evidence source's) is not yet written, and no reader's business.
        with self._cond:
            return tuple(
                {k: v for k, v in obj.items() if k not in ("seq", "prev")}
                for obj in iter_objects(Path(self._writer.path))
            )

    # -- questions the lanes ask ------------------------------------------------

    def line_count(self) -> int:
        """How many host.jsonl lines are written so far (a prefix to decide on)."""
        with self._cond:
            return self._summary.lines

    def verdict(self, start: float, end: float, limit: int | None = None) -> HostVerdict:
        """The verdict on the first ``limit`` lines written (all so far when None).

        Lines are only ever appended, so a verdict on a prefix needs no copy:
        the summary looks the attempt's window up in what it kept.
        """
        with self._cond:
            return self._summary.verdict(start, end, limit=limit)

    def wait_complete(self, t_end: float, stop: threading.Event) -> bool:
        """Wait until a sample lies after `t_end` (+ slack); at most ~3 intervals.

        Once `stop` is set it waits at most `HALT_WAIT_S` more (the step it
        asks for normally lands within milliseconds); it returns False at once
        when the monitor stops or its thread has ended. `stop` is polled
        because an outside Event cannot notify this Condition.
        """
        interval = float(self._spec.sample_interval_s)
        limit = max(3 * interval, float(self._spec.max_gap_s) + interval)
        deadline = time.monotonic() + limit
        halted = False
        with self._cond:
            self._waiters += 1
            try:
                while True:
                    if self._summary.completion(t_end) is not None:
                        return True
                    if stop.is_set() and not halted:
                        # Stopping: the step asked for below takes milliseconds,
                        # and without its sample a clean attempt would be judged
                        # `host`; wait for it briefly, never long.
                        halted = True
                        deadline = min(deadline, time.monotonic() + HALT_WAIT_S)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._stopping or self._ended:
                        return False
                    # Ask for a step now: its sample is taken after t_end.
                    self._demand.set()
                    self._cond.wait(min(remaining, WAIT_POLL_S))
            finally:
                self._waiters -= 1

    def check_health(self) -> str | None:
        """Report cause `sampler` if no good sample came for `sampler_failure_s`.

        The sampler checks itself after every step, but a reading that never
        returns stops it from checking: the run's main thread calls this too.
        """
        with self._cond:
            if self._thread is None or self._stopping:
                return None
            since = time.monotonic() - self._last_good_mono
            last_error = self._last_error
        if since > self._spec.sampler_failure_s:
            detail = (
                f"no good host sample for {since:.1f} s (last error: {last_error or 'none; a reading did not return'})"
            )
            self._fatal("sampler", detail)
            return detail
        return None

    # -- the thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # captured: the run must learn why its sampler ended
            self.outcome = exc
            if isinstance(exc, ChainWriteFailed):
                # host.jsonl could not be written (a full disk, an I/O
                # error): the disk's failure, a runner error like any log's,
                # not a host evidence problem.
                self._fatal("runner-error", f"sampler: {_describe(exc)}")
            else:
                self._fatal("sampler", f"sampler thread died: {_describe(exc)}")
        else:
            if not self._stop_event.is_set():
                self._fatal("sampler", "sampler thread ended without stop()")
        finally:
            self.sampler_cpu_s = time.thread_time()
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def _loop(self) -> None:
        interval = float(self._spec.sample_interval_s)
        next_due = time.monotonic()
        while not self._stop_event.is_set():
            self._step()
            next_due += interval
            now = time.monotonic()
            if next_due < now:  # a step overran (a stalled read): sample again at once
                next_due = now
            # Between scheduled steps, a lane waiting for evidence may ask for
            # one at once; requests that arrive during a step are served by
            # one further step (they coalesce).
            while not self._stop_event.is_set():
                remaining = next_due - time.monotonic()
                if remaining <= 0:
                    break
                if not self._demand.wait(remaining):
                    break
                self._demand.clear()
                if not self._stop_event.is_set():
                    self._step()

    def _step(self) -> None:
        # Outside sources first, then the sample, which says when this step
        # began reading (`reads_began`): it completes an attempt only if that
        # was after the attempt ended (hostrules.completion_key), so a guard
        # line written during the attempt was read by then and is in the
        # verdict's prefix.
        reads_began = self._clock.now()
        self._read_sources()
        self._sample(reads_began)
        self.sampler_cpu_s = time.thread_time()
        self.check_health()

    def _sample(self, reads_began: float) -> None:
        try:
            reading = self.readers.memory()
            load1 = self.readers.load()
        except READ_ERRORS as exc:
            self._last_error = _describe(exc)
            self._write({"event": "sample-failed", "t": self._clock.now(), "error": _describe(exc)})
            return
        t = self._clock.now()
        # Taken after now(), so a backward step that now() itself corrected is
        # reported by this sample; a failed reading leaves it for the next one.
        back = self._clock.take_back_max()
        mono = time.monotonic()
        self._write(
            {
                "event": "sample",
                "t": t,
                "wall": time.time(),
                "mono": mono,
                "mem_pressure": float(reading.pressure),
                "mem_available": int(reading.available),
                "swap_used": int(reading.swap_used),
                "load1": float(load1),
                "clock_back_max_s": float(back),
                "reads_began": reads_began,
            }
        )
        with self._cond:
            self._last_good_mono = mono

    def _read_sources(self) -> None:
        lo, hi = self._window  # type: ignore[misc]
        for source in self.readers.sources:
            # A line this read returns appeared after the previous read began
            # (a line written during that read may have been missed by it):
            # its `since` is that time, its `t` the time it was read. The rule
            # counts it for every attempt whose window that span touches.
            began = self._clock.now()
            since = self._read_began.get(source.name, lo)
            result = self._read_with_tries(source)
            if result is None:
                continue
            self._read_began[source.name] = began
            for note in result.notes:
                self._write({"event": "evidence-note", "t": self._clock.now(), "source": source.name, "note": note})
            for text in result.lines:
                t = self._clock.now()
                if lo <= t and (hi is None or t <= hi):
                    self._write({"event": "evidence", "t": t, "since": since, "source": source.name, "line": text})

    def _read_with_tries(self, source: EvidenceSource) -> SourceRead | None:
        tries = int(self._spec.read_tries)
        error = ""
        for k in range(tries):
            if self._stop_event.is_set():
                return None
            try:
                return source.read_new()
            except READ_ERRORS as exc:
                error = _describe(exc)
            if k + 1 < tries:
                self._stop_event.wait(self._retry_pause_s)
        self._write(
            {"event": "evidence-failed", "t": self._clock.now(), "source": source.name, "tries": tries, "error": error}
        )
        self._fatal("runner-error", f"evidence source {source.name!r} failed {tries} reads: {error}")
        return None

    def _write(self, obj: dict[str, Any]) -> None:
        # Race: a lane that asks between the append and the copy below sees one
        # line fewer than the file holds; by the prefix rule that can leave its
        # evidence incomplete for a moment, never give a different verdict.
        self._writer.append(obj)
        with self._cond:
            self._summary.add(obj)
            self._cond.notify_all()

    def _fatal(self, cause: str, detail: str) -> None:
        # Once per cause, and not once stop() has begun: by then the run is
        # already ending and the thread's outcome says what happened.
        with self._cond:
            if self._stopping or cause in self._fatal_sent:
                return
            self._fatal_sent.add(cause)
        self._on_fatal(cause, detail)
