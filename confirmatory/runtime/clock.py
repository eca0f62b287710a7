"""The run's never-backwards clock, and a fake one for threaded tests.

Owns: the ``t`` written into every log line (RECORDS.md "Encoding"). ``now()``
is ``time.time()`` clamped so that it is always above every value it has
already returned (the next float up when the wall clock has not moved on or
stepped back: two readings are never equal, so a decision and a household end
taken under the same lock are strictly ordered, as RECORDS.md says), and it
notes how far back the wall clock stepped each time it had to clamp (the host
sampler records that as ``clock_back_max_s``).

Race: the wall clock is read *inside* the lock. Read outside it, two threads
can read t1 < t2 and then enter the lock in the order t2, t1; the clamp then
hides the inversion from the clock itself, but the caller that ordered its
events by the lock would see them stamped against their real order (a
measurement found 388 such inversions in 20 million reads by 12 threads;
docs/RUN.md "Threads and ordering" says which instants take the lock).

``time.time`` is looked up at each call, not bound at import, so freezegun and
a test's monkeypatch reach it.
"""

from __future__ import annotations

import math
import threading
import time


class Clock:
    """``time.time()``, always above every value already returned; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._wall_top = float("-inf")  # the highest wall-clock reading so far
        self.back_max_s = 0.0  # largest backward step ever corrected
        self._back_since_take = 0.0

    def now(self) -> float:
        with self._lock:
            raw = time.time()  # inside the lock: see the module docstring
            top = self._wall_top
            if raw < top:
                step = top - raw  # the wall clock's own step back, not the clock's nudges
                if step > self.back_max_s:
                    self.back_max_s = step
                if step > self._back_since_take:
                    self._back_since_take = step
            else:
                self._wall_top = raw
            last = self._last
            if raw <= last:
                raw = math.nextafter(last, math.inf)
            self._last = raw
            return raw

    def start_above(self, t: float) -> None:
        """Never return ``t`` or anything below it from now on: a continued
        run's clock starts above every time its crashed runner recorded,
        whatever the wall clock says after a reboot."""
        with self._lock:
            if t > self._last:
                self._last = float(t)
            # a wall clock now behind ``t`` stepped back across the crash: noted
            # as any backward step (host samples' clock_back_max_s), so that a
            # record's raw call times are judged with it (verify, invariant 5)
            if t > self._wall_top:
                self._wall_top = float(t)

    def take_back_max(self) -> float:
        """The largest backward step corrected since the last take; resets it."""
        with self._lock:
            step = self._back_since_take
            self._back_since_take = 0.0
            return step


class FakeClock:
    """A clock that moves only when told to; safe to share between threads.

    It never steps back (``advance`` and ``set`` refuse), so its backward-step
    figures stay 0; they exist so that it can stand in for ``Clock``.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._lock = threading.Lock()
        self._t = float(start)
        self.back_max_s = 0.0

    def now(self) -> float:
        with self._lock:
            return self._t

    def take_back_max(self) -> float:
        return 0.0

    def advance(self, dt: float) -> None:
        if not dt >= 0:  # also refuses NaN
            raise ValueError(f"a clock cannot advance by {dt!r}")
        with self._lock:
            self._t += dt

    def set(self, t: float) -> None:
        with self._lock:
            if not t >= self._t:
                raise ValueError(f"a clock cannot go back from {self._t!r} to {t!r}")
            self._t = float(t)
