"""column.Column: a sequence of floats whose full blocks live in a file with no name.

It must answer exactly as an array of the same values (length, every index,
bisect), whether its blocks went to its file, to a descriptor it was given,
or (no file could take them) stayed in memory; and what it holds in memory
must not grow with its length."""

from __future__ import annotations

import bisect
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.records.column import KEPT, Column

FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)


def filled(values, block, settle_every=1, fd=None):
    column = Column(fd, block=block)
    for k, v in enumerate(values):
        column.append(v)
        if k % settle_every == 0:
            column.settle()
    return column


def same_as_list(column: Column, values: list[float]) -> None:
    assert len(column) == len(values)
    assert column.tolist() == values
    assert [column[k] for k in range(len(values))] == values
    assert [column[-k] for k in range(1, len(values) + 1)] == [values[-k] for k in range(1, len(values) + 1)]
    for k in (len(values), -len(values) - 1):
        with pytest.raises(IndexError):
            column[k]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, max_size=60), st.integers(1, 7), st.integers(1, 9))
def test_a_column_holds_what_was_appended(values, block, settle_every):
    same_as_list(filled(values, block, settle_every), values)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 1.5, 2.0, 7.0, 7.0, 9.0]), max_size=60),
    st.integers(1, 6),
    st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0, 8.0, 9.0, 10.0]), min_size=1, max_size=20),
)
def test_rank_is_bisect_right_on_a_column_that_never_decreases(values, block, probes):
    values.sort()  # ties across block edges included
    column = filled(values, block)
    for x in probes:
        assert column.rank(x) == bisect.bisect_right(values, x), (x, values)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, max_size=40), st.integers(1, 5), FLOATS, st.integers(0, 45), st.integers(0, 45))
def test_the_generic_bisect_on_any_column_answers_as_on_a_list(values, block, x, lo, hi):
    # an edited host log's keys need not be in order: bisect then reads value by value
    column = filled(values, block)
    lo, hi = min(lo, len(values)), min(hi, len(values))
    assert bisect.bisect_right(column, x, lo, hi) == bisect.bisect_right(values, x, lo, hi)


@settings(max_examples=100, deadline=None)
@given(st.lists(FLOATS, max_size=40), st.lists(FLOATS, max_size=40), st.integers(1, 5), st.integers(1, 5))
def test_extend_appends_another_column(first, second, block_a, block_b):
    a, b = filled(first, block_a), filled(second, block_b)
    a.extend(b)
    same_as_list(a, first + second)
    same_as_list(b, second)


def test_what_a_column_holds_in_memory_does_not_grow_with_its_length():
    block = 64
    column = Column(block=block)
    values = [float(k) for k in range(block * 400)]
    for k, v in enumerate(values):
        column.append(v)
        if k % block == 0:
            column.settle()
    assert column._blocks is None  # the blocks went to the file
    # reads all over the column keep at most KEPT blocks
    for k in range(0, len(values), 97):
        assert column[k] == values[k] and column.rank(values[k]) == k + 1
    held = column.in_memory()
    assert held <= 2 * block + len(values) // block + KEPT * block, held
    assert held < len(values) // 20


def test_a_column_that_cannot_write_keeps_its_blocks_in_memory(tmp_path):
    path = tmp_path / "read-only"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        values = [k / 3 for k in range(50)]
        column = filled(values, 4, fd=fd)
        assert column._blocks is not None and column.in_memory() >= len(values)
        same_as_list(column, values)
        assert column.rank(values[20]) == 21
    finally:
        os.close(fd)


FILL_UNTIL_FULL = """
import os, resource, signal, sys
from confirmatory.records.column import Column
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)    # a write past the limit fails (EFBIG) instead
resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 1024 * 8, resource.RLIM_INFINITY))  # room for 3 blocks
column = Column(block=1024)
values = [k * 0.5 for k in range(10 * 1024 + 17)]
for k, v in enumerate(values):
    column.append(v)
    if k % 1000 == 0:
        column.settle()
column.settle()
assert column._blocks is not None and len(column._blocks) == 10, "the blocks did not move to memory"
assert column.tolist() == values and [column[k] for k in range(0, len(values), 101)] == values[::101]
assert column.rank(values[5000]) == 5001
print("ok")
"""


def test_a_file_that_fills_up_midway_loses_nothing():
    # a real write failure: the process may write only 3 blocks' worth of file
    out = subprocess.run([sys.executable, "-c", FILL_UNTIL_FULL], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _fill_in_child(fd: int, n: int, send) -> None:
    column = Column(fd, block=8)
    for k in range(n):
        column.append(k * 1.25)
    column.settle()
    send.send(column)  # pickled: only the tail and the sparse index travel
    send.close()


def test_a_column_written_by_a_child_into_a_shared_descriptor_is_read_by_the_parent():
    with tempfile.TemporaryFile() as fh:
        mp = multiprocessing.get_context("fork")
        recv, send = mp.Pipe(duplex=False)
        child = mp.Process(target=_fill_in_child, args=(fh.fileno(), 203, send))
        child.start()
        column = recv.recv()
        child.join()
        assert child.exitcode == 0
        assert column._blocks is None and len(column.tail) == 203 % 8
        same_as_list(column, [k * 1.25 for k in range(203)])


def test_a_column_with_a_file_of_its_own_does_not_pickle():
    column = filled([float(k) for k in range(10)], 2)
    with pytest.raises(TypeError, match="descriptor"):
        pickle.dumps(column)
    small = Column(block=4)  # no block yet, so no file: it travels whole
    small.append(1.0)
    assert pickle.loads(pickle.dumps(small)).tolist() == [1.0]


def test_a_bad_block_size_is_refused():
    with pytest.raises(ValueError, match="block"):
        Column(block=0)


def test_the_host_summary_keeps_little_of_its_samples_in_memory():
    from confirmatory.records.hostindex import HostSummary

    summary = HostSummary(max_gap_s=45, pressure_threshold=10, block=64)
    summary.add({"event": "open", "t": 0.0})
    n = 20_000
    for k in range(1, n + 1):
        summary.add({"event": "sample", "t": float(k), "mem_pressure": 0.0, "clock_back_max_s": 0.0})
    for k in range(0, n, 37):  # the lookups read blocks back, and keep only a few
        assert summary.completion(k + 0.5) == k + 1
    held = summary.sample_t.in_memory() + summary.sample_c.in_memory()
    assert held < n // 10, held  # in arrays: 2 * n
    assert summary.sample_t.tolist() == [float(k) for k in range(1, n + 1)]
