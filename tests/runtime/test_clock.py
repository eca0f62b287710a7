"""The run's clock always moves forward, and reports how far the wall clock went back."""

import datetime as dt
import random
import sys
import threading
import time

import pytest
from freezegun import freeze_time

from confirmatory.runtime.clock import Clock, FakeClock

_real_sleep = time.sleep
JITTER_S = 0.0002  # the wall clock steps back by up to 0.2 ms


class JitteryWall:
    """A stand-in for time.time: rising, but each read up to 0.2 ms back.

    Thread-safe on its own (so that it stays correct even if a clock reads it
    outside its lock); remembers each call's index in a thread-local, so a
    caller learns where its read fell in the global order of reads.
    """

    def __init__(self, seed: int = 7, *, yield_after_read: bool = False) -> None:
        self.yield_after_read = yield_after_read
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._base = time.time()
        self.raw: list[float] = []
        self.local = threading.local()

    def __call__(self) -> float:
        with self._lock:
            i = len(self.raw)
            value = self._base + i * 1e-5 - self._rng.random() * JITTER_S
            self.raw.append(value)
        self.local.index = i
        if self.yield_after_read:
            # Give the GIL away between the read and the caller's next step:
            # a clock that read outside its lock would now be overtaken.
            _real_sleep(0)
        return value

    def expected_back_max(self) -> float:
        """The largest step back from the highest earlier read, in call order."""
        best, top = 0.0, float("-inf")
        for value in self.raw:
            if top - value > best:
                best = top - value
            top = max(top, value)
        return best


def test_stepping_the_wall_clock_back_never_yields_a_smaller_value():
    clock = Clock()
    with freeze_time("2030-01-01 12:00:00") as frozen:
        first = clock.now()
        frozen.move_to("2030-01-01 11:59:57")  # the wall clock steps back 3 s
        second = clock.now()
        frozen.tick(dt.timedelta(seconds=1))  # still 2 s behind
        third = clock.now()
        frozen.move_to("2030-01-01 12:00:05")
        fourth = clock.now()
    assert first < second < third  # held just above the first reading
    assert third - first < 1e-6
    assert fourth == first + 5
    assert clock.back_max_s == pytest.approx(3.0)


def test_a_wall_clock_that_does_not_move_still_gives_distinct_readings():
    """RECORDS.md: a decision's t and a household end's t, taken under one
    lock, are strictly ordered; equal readings would tie them."""
    clock = Clock()
    with freeze_time("2030-01-01 12:00:00"):
        values = [clock.now() for _ in range(1000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert values[-1] - values[0] < 1e-3
    assert clock.back_max_s == 0.0


def test_the_largest_step_back_since_the_last_take_is_reported_and_reset():
    clock = Clock()
    with freeze_time("2030-01-01 12:00:00") as frozen:
        clock.now()
        frozen.move_to("2030-01-01 11:59:58")
        clock.now()
        assert clock.take_back_max() == pytest.approx(2.0)
        assert clock.take_back_max() == 0.0
        frozen.move_to("2030-01-01 11:59:59")  # 1 s behind the value already returned
        clock.now()
        assert clock.take_back_max() == pytest.approx(1.0)
    assert clock.back_max_s == pytest.approx(2.0)  # the all-time figure is kept


def test_a_jittering_wall_clock_is_smoothed_in_one_thread(monkeypatch):
    wall = JitteryWall()
    monkeypatch.setattr(time, "time", wall)
    clock = Clock()
    values = [clock.now() for _ in range(5000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert wall.expected_back_max() > 0
    assert clock.back_max_s == wall.expected_back_max()


def racing(targets: list) -> None:
    """Run each target in a thread of its own, switching threads as often as
    the interpreter allows (races show up if they exist), until all end."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=target) for target in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)


@pytest.mark.slow
def test_twelve_threads_see_no_step_back_alone_or_together(monkeypatch):
    wall = JitteryWall(seed=11, yield_after_read=True)
    monkeypatch.setattr(time, "time", wall)
    clock = Clock()
    per_thread: list[list[tuple[int, float]]] = [[] for _ in range(12)]
    start = threading.Barrier(12)

    def work(out: list[tuple[int, float]]) -> None:
        start.wait()
        for _ in range(800):
            value = clock.now()
            out.append((wall.local.index, value))  # where this read fell, globally

    racing([lambda out=out: work(out) for out in per_thread])

    for seq in per_thread:
        assert all(a[1] < b[1] for a, b in zip(seq, seq[1:]))
    # Reads of the wall clock happen under the clock's lock, so their global
    # order is the order in which values were handed out.
    in_lock_order = [value for _, value in sorted(p for seq in per_thread for p in seq)]
    assert all(a < b for a, b in zip(in_lock_order, in_lock_order[1:]))
    assert clock.back_max_s == wall.expected_back_max()


def test_the_fake_clock_moves_only_when_told():
    clock = FakeClock()
    assert clock.now() == 1_800_000_000.0
    clock.advance(2.5)
    assert clock.now() == 1_800_000_002.5
    clock.set(1_800_000_010.0)
    assert clock.now() == 1_800_000_010.0
    assert clock.take_back_max() == 0.0 and clock.back_max_s == 0.0


@pytest.mark.parametrize("bad", [-0.001, float("nan")])
def test_the_fake_clock_refuses_to_advance_backwards(bad):
    clock = FakeClock(start=100.0)
    with pytest.raises(ValueError):
        clock.advance(bad)
    assert clock.now() == 100.0


def test_the_fake_clock_refuses_to_be_set_into_the_past():
    clock = FakeClock(start=100.0)
    with pytest.raises(ValueError):
        clock.set(99.999)
    assert clock.now() == 100.0


def test_the_fake_clock_loses_no_advance_between_threads():
    # Shown to fail when advance() reads, yields and writes without the lock.
    # (Dropping the lock alone is not caught here: CPython 3.11 does not switch
    # threads inside `self._t += dt` on floats.)
    clock = FakeClock(start=0.0)

    def work() -> None:
        for _ in range(2000):
            clock.advance(0.5)

    racing([work] * 8)
    assert clock.now() == 8 * 2000 * 0.5
