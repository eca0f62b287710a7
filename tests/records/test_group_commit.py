"""Group commit: lines appended to one log by several threads share an fsync,
and no line is acknowledged before the fsync that covers it has returned.

The fsync of the log is held at a gate (``os.fsync`` wrapped, the real one
called once the test opens the gate), so a batch is in flight for as long
as the test likes, while other threads append behind it.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from confirmatory.records.chain import ChainWriteFailed, log_seed
from confirmatory.records.reader import check_chain, iter_lines, prefix_tree
from confirmatory.records.writer import ChainWriter

SEED = log_seed("0" * 64, "run.jsonl")


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class Gate:
    """``os.fsync`` of one file, held: each call waits for ``release()`` (or
    raises ``fail``'s error when told to); every other file passes."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = str(path)
        self.entered = threading.Semaphore(0)
        self._go = threading.Semaphore(0)
        self.calls: list[int] = []  # descriptors fsynced, one per call
        self.returned = 0
        self.fail_next = False
        real = os.fsync

        def gated(fd: int) -> None:
            if fd_path(fd) != self.path:
                return real(fd)
            self.calls.append(fd)
            self.entered.release()
            assert self._go.acquire(timeout=30), "the test never opened the gate"
            if self.fail_next:
                raise OSError(errno.EIO, "injected EIO")
            real(fd)
            self.returned += 1

        monkeypatch.setattr(os, "fsync", gated)

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=30), "no fsync came"

    def release(self) -> None:
        self._go.release()


def appender(w: ChainWriter, obj: dict, done: dict, errors: dict) -> threading.Thread:
    def run() -> None:
        try:
            done[obj["who"]] = w.append(obj)
        except ChainWriteFailed as exc:
            errors[obj["who"]] = exc

    t = threading.Thread(target=run)
    t.start()
    return t


def queued(w: ChainWriter, n: int) -> None:
    """Wait until ``n`` lines have a seq but no acknowledgement."""
    deadline = time.monotonic() + 30
    while len(w._queue) < n:
        assert time.monotonic() < deadline, "the appends never queued"
        time.sleep(0.001)


def test_lines_appended_while_a_batch_is_in_flight_share_the_next_fsync_and_wait_for_it(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    w = ChainWriter(path, SEED)
    gate = Gate(path, monkeypatch)
    done: dict[str, str] = {}
    errors: dict[str, Exception] = {}
    a = appender(w, {"event": "open", "who": "a"}, done, errors)
    gate.wait_entered()  # a's batch is in flight
    others = [appender(w, {"event": "tick", "who": who}, done, errors) for who in "bcd"]
    queued(w, 3)
    time.sleep(0.05)
    assert done == {} and w.snapshot()[0] == 0  # nothing acknowledged before its fsync returned
    gate.release()
    a.join(30)
    assert list(done) == ["a"]
    gate.wait_entered()  # one leader took b, c and d: a second fsync, in flight
    time.sleep(0.05)
    # Written, not yet fsynced: not acknowledged, not counted.
    assert path.read_bytes().count(b"\n") == 4
    assert list(done) == ["a"] and w.snapshot()[0] == 1
    gate.release()
    for t in others:
        t.join(30)
    assert sorted(done) == ["a", "b", "c", "d"] and errors == {}
    assert len(gate.calls) == gate.returned == 2  # four lines, two fsyncs
    lines, head, root = w.anchor_snapshot()
    w.close()
    assert (lines, head) == (4, check_chain(path, SEED).head)
    assert root == prefix_tree(path, 4).root().hex()
    assert sorted(line.obj["who"] for line in iter_lines(path)) == ["a", "b", "c", "d"]
    assert {line.obj["seq"] for line in iter_lines(path)} == {0, 1, 2, 3}


def test_a_failed_batch_fsync_refuses_every_line_in_and_behind_it_and_is_never_retried(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    w = ChainWriter(path, SEED)
    w.append({"event": "open"})
    size = path.stat().st_size
    gate = Gate(path, monkeypatch)
    writes: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(fd)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    done: dict[str, str] = {}
    errors: dict[str, Exception] = {}
    a = appender(w, {"event": "tick", "who": "a"}, done, errors)
    gate.wait_entered()
    others = [appender(w, {"event": "tick", "who": who}, done, errors) for who in "bc"]
    queued(w, 2)
    gate.fail_next = True
    gate.release()  # a's batch fails: b and c, queued behind it, are refused with it
    for t in (a, *others):
        t.join(30)
    assert done == {} and sorted(errors) == ["a", "b", "c"]
    assert all("fsync of line 1 failed" in str(e) for e in errors.values()), errors
    assert len(gate.calls) == 1  # one fsync of that descriptor, never a second
    assert len(writes) == 1  # b and c were never written
    assert w.failed and w.snapshot()[0] == 1
    with pytest.raises(ChainWriteFailed, match="failed earlier"):
        w.append({"event": "refused"})
    assert len(gate.calls) == 1 and len(writes) == 1
    assert path.read_bytes()[size:].count(b"\n") == 1  # only a's line, once
    w.close()


def test_append_many_writes_consecutive_lines_with_one_fsync(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    calls: list[str] = []
    real = os.fsync
    with ChainWriter(path, SEED) as w:
        monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd_path(fd)), real(fd))[1])
        digests = w.append_many([{"event": "open"}, {"event": "a"}, {"event": "b"}])
        assert calls == [str(path)] and w.snapshot() == (3, digests[-1])
    assert [line.obj["event"] for line in iter_lines(path)] == ["open", "a", "b"]
    assert check_chain(path, SEED).head == digests[-1]


def test_many_threads_appending_at_once_leave_one_unbroken_chain_with_every_line_once(tmp_path):
    path = tmp_path / "run.jsonl"
    per, threads = 40, 8
    got: list[list[str]] = [[] for _ in range(threads)]
    with ChainWriter(path, SEED) as w:
        go = threading.Barrier(threads)

        def work(i: int) -> None:
            go.wait()
            for k in range(per):
                got[i].append(w.append({"event": "tick", "who": i, "k": k}))

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        lines, head, root = w.anchor_snapshot()
        batches = w.batches
    check = check_chain(path, SEED)
    assert check.ok and (check.lines, check.head) == (lines, head) == (per * threads, head)
    assert root == prefix_tree(path, lines).root().hex()
    by_hash = {line.hash: line.obj for line in iter_lines(path)}
    for i in range(threads):  # each thread's lines in its own order, each returned hash its line's
        assert [by_hash[h]["k"] for h in got[i]] == list(range(per))
        assert {by_hash[h]["who"] for h in got[i]} == {i}
    assert batches <= per * threads
