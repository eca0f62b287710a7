"""Fake host readers and evidence sources for tests of the sampler and the lanes.

`ScriptedReaders` stands in for `confirmatory.host.sampler.RealReaders`: each memory
reading takes the next item of a script (the last item repeats), where an
item is a pressure value or one of `Fail`, `Stall`, `Crash`.
`FakeEvidenceSource` is a source a test pushes lines into and can make fail.
`open_host_log` writes the `open` line a run writes before the sampler starts.
All of it is thread-safe: the sampler thread reads while the test scripts.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confirmatory.host.sampler import MemoryReading
from confirmatory.host.sources import ReadFailed, SourceRead
from confirmatory.records.writer import ChainWriter

TEST_SEED = "0" * 64


@dataclass(frozen=True)
class Fail:
    """A memory reading that fails (a `sample-failed` line)."""

    message: str = "scripted memory read failure"


@dataclass(frozen=True)
class Stall:
    """A memory reading that blocks `seconds` (or until `release()`), then reads `pressure`."""

    seconds: float
    pressure: float = 0.0


@dataclass(frozen=True)
class Crash:
    """A bug inside the sampler: raises something that is not a read failure."""

    message: str = "scripted sampler crash"


class ScriptedReaders:
    """`HostReaders` whose memory readings follow a script."""

    def __init__(
        self,
        script: Any = (0.0,),
        *,
        available: int = 8 << 30,
        swap_used: int = 0,
        load1: float = 0.25,
        sources: Any = (),
    ) -> None:
        self._lock = threading.Lock()
        self._script: deque[Any] = deque(script) or deque([0.0])
        self._released = threading.Event()
        self.available, self.swap_used, self.load1 = available, swap_used, load1
        self.sources = list(sources)
        self.memory_calls = 0

    def feed(self, *items: Any) -> None:
        """Append items to the script (the current last item stops repeating)."""
        with self._lock:
            self._script.extend(items)

    def set_script(self, *items: Any) -> None:
        """Replace the script; its last item repeats."""
        with self._lock:
            self._script = deque(items) or deque([0.0])

    def set_pressure(self, value: float) -> None:
        """Every reading from now on reads `value`."""
        self.set_script(value)

    def release(self) -> None:
        """End every stall now and from now on (for teardown)."""
        self._released.set()

    def memory(self) -> MemoryReading:
        with self._lock:
            item = self._script.popleft() if len(self._script) > 1 else self._script[0]
            self.memory_calls += 1
        if isinstance(item, Fail):
            raise ReadFailed(item.message)
        if isinstance(item, Crash):
            raise RuntimeError(item.message)
        pressure = item
        if isinstance(item, Stall):
            self._released.wait(item.seconds)
            pressure = item.pressure
        return MemoryReading(pressure=float(pressure), available=self.available, swap_used=self.swap_used)

    def load(self) -> float:
        return self.load1


class FakeEvidenceSource:
    """An evidence source fed by the test; `fail_next(n)` makes the next n reads fail."""

    def __init__(self, name: str = "guard") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._notes: list[str] = []
        self._failures = 0
        self.reads = 0  # read attempts, failed ones included

    def push(self, *lines: str) -> None:
        with self._lock:
            self._lines.extend(lines)

    def note(self, text: str) -> None:
        with self._lock:
            self._notes.append(text)

    def fail_next(self, n: int) -> None:
        with self._lock:
            self._failures = n

    def read_new(self) -> SourceRead:
        with self._lock:
            self.reads += 1
            if self._failures > 0:
                self._failures -= 1
                raise ReadFailed(f"scripted failure of source {self.name!r}")
            lines, self._lines = tuple(self._lines), []
            notes, self._notes = tuple(self._notes), []
        return SourceRead(lines=lines, notes=notes)


class BackStepClock:
    """The real `Clock`, plus backward steps a test declares (`step_back`).

    The real clock only reports a step when the wall clock moves back, which
    a test cannot cause; this one reports the declared steps at the next
    `take_back_max`, as the sampler reads it.
    """

    def __init__(self) -> None:
        from confirmatory.runtime.clock import Clock

        self._clock = Clock()
        self._lock = threading.Lock()
        self._declared = 0.0

    def now(self) -> float:
        return self._clock.now()

    def step_back(self, seconds: float) -> None:
        with self._lock:
            self._declared = max(self._declared, seconds)

    def take_back_max(self) -> float:
        with self._lock:
            step, self._declared = self._declared, 0.0
        return max(step, self._clock.take_back_max())


def open_host_log(path: Path, clock: Any, seed: str = TEST_SEED) -> ChainWriter:
    """A host.jsonl with its `open` line, as the run leaves it for the sampler."""
    writer = ChainWriter(Path(path), seed)
    writer.append({"event": "open", "t": clock.now()})
    return writer
