"""The host sampler: what the machine was doing while attempts ran.

Owns the one thread that writes host.jsonl after its `open` line, the real
readers behind it (memory pressure, memory, swap, load) and the outside
evidence sources (a file to follow, a command to re-run).  It is the only
module that imports psutil.  What a line means for an attempt is decided in
`confirmatory.hostrules`; this module only writes the lines and keeps a copy
in memory so that the lanes can ask without re-reading the file.

Failure vocabulary: a reader signals a failed reading by raising `ReadFailed`
(or `OSError`); that becomes a `sample-failed` line or a retried evidence
read.  Anything else raised inside the sampler is a bug: it ends the thread,
which is captured as `outcome` and reported as cause `sampler`.
See docs/HOST.md.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import psutil

from confirmatory.chain import iter_lines
from confirmatory.hostrules import HostTimeline, HostVerdict

PSI_MEMORY = "/proc/pressure/memory"
WAIT_POLL_S = 0.05  # how often wait_complete looks at the caller's stop event


class ReadFailed(Exception):
    """A reading could not be taken (a value of the world, not a bug)."""


READ_ERRORS = (ReadFailed, OSError)


@dataclass(frozen=True, slots=True)
class MemoryReading:
    pressure: float  # 0-100
    available: int  # bytes
    swap_used: int  # bytes


@dataclass(frozen=True, slots=True)
class SourceRead:
    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what happened to the source (rotation, truncation)


class EvidenceSource(Protocol):
    name: str

    def read_new(self) -> SourceRead: ...


class HostReaders(Protocol):
    sources: Sequence[EvidenceSource]

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

    def __init__(self, psi_path: str | os.PathLike = PSI_MEMORY, sources: Sequence[EvidenceSource] = ()):
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


def _decode_lines(chunks: list[bytes]) -> list[str]:
    out = []
    for raw in chunks:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if text.strip():
            out.append(text)
    return out


class FileSource:
    """Follows a file like `tail -F`: only bytes appended after the first read.

    The file stays open between reads, so the tail of a file renamed away by
    rotation is still read before switching to the new file at the path.
    Reads use `os.pread` and commit their state only at the end, so a read
    that fails half-way can be retried without losing or repeating lines.
    A missing file is not a failure (logs are often created lazily); it is
    noted once, and a file that appears later is read from its start.
    """

    def __init__(self, name: str, path: str | os.PathLike):
        self.name = name
        self.path = Path(path)
        self._started = False
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._pending = b""
        self._skip_partial = False  # the line being written at baseline is not ours
        self._missing_noted = False

    def read_new(self) -> SourceRead:
        if not self._started:
            return self._baseline()
        notes: list[str] = []
        lines: list[bytes] = []
        pending, skip, offset = self._pending, self._skip_partial, self._offset
        if self._fd is not None:
            if os.fstat(self._fd).st_size < offset:
                # Race: truncated and refilled past `offset` between two reads looks
                # like growth; what was written before the refill is then lost.
                notes.append(f"{self.path} truncated below byte {offset}; reading it again from the start")
                pending, skip, offset = b"", False, 0
            data = _pread_all(self._fd, offset)
            pending, offset = pending + data, offset + len(data)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        new_fd = None
        missing_noted = self._missing_noted
        if st is None:
            if not missing_noted:
                notes.append(f"{self.path} is missing; waiting for it to appear")
                missing_noted = True
        elif (st.st_dev, st.st_ino) != self._ident:
            new_fd = os.open(self.path, os.O_RDONLY)
            try:
                if self._fd is not None:
                    notes.append(f"{self.path} was replaced (rotation); the old file was read to its end")
                    old_lines, rest, skip = _split_lines(pending, skip)
                    lines.extend(old_lines)
                    if rest and not skip:
                        lines.append(rest)  # the old file's unfinished last line
                else:
                    notes.append(f"{self.path} appeared; reading it from the start")
                pending, skip, offset = b"", False, 0
                data = _pread_all(new_fd, 0)
                pending, offset = data, len(data)
                ident = (os.fstat(new_fd).st_dev, os.fstat(new_fd).st_ino)
            except BaseException:
                os.close(new_fd)
                raise
            missing_noted = False
        parts, pending, skip = _split_lines(pending, skip)
        lines.extend(parts)
        # Commit: nothing above changed the source's state.
        if new_fd is not None:
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self._ident = new_fd, ident
        self._pending, self._skip_partial, self._offset = pending, skip, offset
        self._missing_noted = missing_noted
        return SourceRead(lines=tuple(_decode_lines(lines)), notes=tuple(notes))

    def _baseline(self) -> SourceRead:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._started, self._missing_noted = True, True
            return SourceRead(notes=(f"{self.path} is missing; waiting for it to appear",))
        try:
            st = os.fstat(fd)
            last = os.pread(fd, 1, st.st_size - 1) if st.st_size else b"\n"
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ident, self._offset = fd, (st.st_dev, st.st_ino), st.st_size
        self._skip_partial = last != b"\n"
        self._started = True
        return SourceRead()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _split_lines(data: bytes, skip_first: bool) -> tuple[list[bytes], bytes, bool]:
    """(complete lines, unfinished rest, still skipping) - `skip_first` drops the baseline's partial line."""
    parts = data.split(b"\n")
    rest = parts.pop()
    if skip_first and parts:
        parts, skip_first = parts[1:], False
    return parts, rest, skip_first


def _pread_all(fd: int, offset: int) -> bytes:
    chunks = []
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


class CommandSource:
    """Runs a command at every read; output lines it has not printed before count.

    The first successful run is the baseline (its lines predate the monitor).
    Lines are counted as a multiset: the k-th copy of a line is new when no
    earlier output held k copies, so a log that repeats a message still
    shows each repeat once.  A command must exit: a follow-mode command
    (`-f`, `--follow`) would time out (see docs/HOST.md for the alternatives).
    A non-zero exit status is a failed read.
    """

    def __init__(self, name: str, argv: Sequence[str], *, timeout_s: float = 10.0):
        self.name = name
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self._seen: Counter[str] | None = None

    def read_new(self) -> SourceRead:
        try:
            proc = subprocess.run(
                self.argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.timeout_s
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ReadFailed(f"command {self.argv[0]!r}: {type(exc).__name__}: {exc}") from exc
        if proc.returncode != 0:
            tail = proc.stderr.decode("utf-8", errors="replace").strip()[-300:]
            raise ReadFailed(f"command {self.argv[0]!r} exited {proc.returncode}: {tail}")
        output = _decode_lines(proc.stdout.split(b"\n"))
        if self._seen is None:
            self._seen = Counter(output)
            return SourceRead()
        copies: Counter[str] = Counter()
        new = []
        for line in output:
            copies[line] += 1
            if copies[line] > self._seen[line]:
                new.append(line)
        for line, k in copies.items():
            self._seen[line] = max(self._seen[line], k)
        return SourceRead(lines=tuple(new))


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def sources_from_spec(evidence: Sequence[Any], *, command_timeout_s: float = 10.0) -> list[EvidenceSource]:
    """The design's `[[host.evidence]]` entries as sources ({name, path} or {name, command})."""
    sources: list[EvidenceSource] = []
    for item in evidence:
        name, path, command = _field(item, "name"), _field(item, "path"), _field(item, "command")
        if (path is None) == (command is None):
            raise ValueError(f"evidence source {name!r}: give exactly one of path or command")
        if path is not None:
            sources.append(FileSource(name, path))
        else:
            sources.append(CommandSource(name, command, timeout_s=command_timeout_s))
    return sources


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
            timeout = min(10.0, max(1.0, float(spec.sample_interval_s)))
            readers = RealReaders(sources=sources_from_spec(spec.evidence, command_timeout_s=timeout))
        self.readers = readers
        # The booking window: the design's, else the run's own span from start().
        self._window = window if window is not None else getattr(spec, "window", None)
        self._retry_pause_s = (
            retry_pause_s if retry_pause_s is not None else min(1.0, spec.sample_interval_s / 10)
        )
        self._cond = threading.Condition()
        # What the sampler wrote, indexed by time (the lanes' verdicts slice it).
        self._timeline = HostTimeline()
        self._lines: list[dict] = self._timeline.lines
        # Set by a lane waiting for evidence: the sampler takes a step at once
        # instead of at its next interval, so a pass waits about one step.
        self._demand = threading.Event()
        self._stop_event = threading.Event()
        self._stopping = False
        self._ended = False
        self._thread: threading.Thread | None = None
        self._waiters = 0
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
            self._timeline = HostTimeline([dict(line.obj) for line in iter_lines(Path(self._writer.path))])
            self._lines = self._timeline.lines
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

    @property
    def lines(self) -> tuple[dict, ...]:
        with self._cond:
            return tuple(self._lines)

    # -- questions the lanes ask ------------------------------------------------

    def line_count(self) -> int:
        """How many host.jsonl lines are written so far (a prefix to decide on)."""
        with self._cond:
            return len(self._lines)

    def verdict(self, start: float, end: float, limit: int | None = None) -> HostVerdict:
        """The verdict on the first ``limit`` lines written (all so far when None).

        Lines are only ever appended, so a verdict on a prefix needs no copy:
        the timeline slices the lines around the attempt's window.
        """
        with self._cond:
            n = len(self._lines) if limit is None else limit
            return self._timeline.verdict(start, end, max_gap_s=self._spec.max_gap_s,
                                          pressure_threshold=self._spec.pressure_threshold, limit=n)

    def wait_complete(self, t_end: float, stop: threading.Event) -> bool:
        """Wait until a sample lies after `t_end` (+ slack); at most ~3 intervals.

        Returns early (False) when `stop` is set, the monitor stops or its
        thread has ended; `stop` is polled because an outside Event cannot
        notify this Condition.
        """
        interval = float(self._spec.sample_interval_s)
        limit = max(3 * interval, float(self._spec.max_gap_s) + interval)
        deadline = time.monotonic() + limit
        with self._cond:
            self._waiters += 1
            try:
                while True:
                    if self._timeline.completion(t_end) is not None:
                        return True
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or stop.is_set() or self._stopping or self._ended:
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
            detail = f"no good host sample for {since:.1f} s (last error: {last_error or 'none; a reading did not return'})"
            self._fatal("sampler", detail)
            return detail
        return None

    # -- the thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # captured: the run must learn why its sampler ended
            self.outcome = exc
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
        # Outside sources first, then the sample: the sample that completes an
        # attempt's evidence comes after every evidence line read by then, so
        # a guard line written during the attempt is in the verdict's prefix.
        self._read_sources()
        self._sample()
        self.sampler_cpu_s = time.thread_time()
        self.check_health()

    def _sample(self) -> None:
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
        self._write({
            "event": "sample", "t": t, "wall": time.time(), "mono": mono,
            "mem_pressure": float(reading.pressure), "mem_available": int(reading.available),
            "swap_used": int(reading.swap_used), "load1": float(load1), "clock_back_max_s": float(back),
        })
        with self._cond:
            self._last_good_mono = mono

    def _read_sources(self) -> None:
        lo, hi = self._window  # type: ignore[misc]
        for source in self.readers.sources:
            result = self._read_with_tries(source)
            if result is None:
                continue
            for note in result.notes:
                self._write({"event": "evidence-note", "t": self._clock.now(), "source": source.name, "note": note})
            for text in result.lines:
                t = self._clock.now()
                if lo <= t and (hi is None or t <= hi):
                    self._write({"event": "evidence", "t": t, "source": source.name, "line": text})

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
        self._write({"event": "evidence-failed", "t": self._clock.now(), "source": source.name,
                     "tries": tries, "error": error})
        self._fatal("runner-error", f"evidence source {source.name!r} failed {tries} reads: {error}")
        return None

    def _write(self, obj: dict) -> None:
        # Race: a lane that asks between the append and the copy below sees one
        # line fewer than the file holds; by the prefix rule that can leave its
        # evidence incomplete for a moment, never give a different verdict.
        self._writer.append(obj)
        with self._cond:
            self._timeline.append(obj)
            self._cond.notify_all()

    def _fatal(self, cause: str, detail: str) -> None:
        # Once per cause, and not once stop() has begun: by then the run is
        # already ending and the thread's outcome says what happened.
        with self._cond:
            if self._stopping or cause in self._fatal_sent:
                return
            self._fatal_sent.add(cause)
        self._on_fatal(cause, detail)
