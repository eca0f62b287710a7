"""A column of doubles that keeps little of itself in memory.

`records.HostSummary` holds two numbers per host sample (its time and its
completion key) so that every attempt's completing sample is found exactly.
Held in arrays, that is 16 bytes a sample: verify's memory would grow with
host.jsonl's lines. Held in columns it stays flat.

A column is appended to in order. Every full block of ``block`` values goes
to a temporary file with no name (``os.pwrite``); only the block's first
value stays in memory, as a sparse index. The values not yet in a full block
(the tail) stay in memory. Reading an earlier value reads its block back
(``os.pread``) and keeps the last few blocks read: lookups that move forward
through the column, as verify's attempts do (they come nearly in time
order), read each block about once.

Where no temporary file can be made or written (a full or read-only
temporary directory), the blocks stay in memory instead: the column then
grows as an array would, and answers the same.

The file has no name from the start, so nothing is ever left behind. A
column that writes to a descriptor it was given (``fd``) can be pickled and
read in another process that holds the same descriptor: verify's parent
opens one file per column before it forks its host-span workers, each
worker fills its columns there, and the parent reads them after the worker
has ended.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from bisect import bisect_right as _bisect_right
from collections.abc import Iterator
from typing import IO

BLOCK = 8192
"""Values per block: 64 KiB."""
KEPT = 4
"""Blocks read back and kept, per column."""
_ITEM = array("d").itemsize


class Column:
    """An append-only sequence of floats: ``append``, ``len``, ``column[k]``,
    ``rank`` (``bisect_right`` for a column that never decreases), ``extend``
    (by another column), ``tolist``. ``settle`` moves the tail's full blocks
    out of memory: whoever appends calls it now and then (``append`` itself
    is the tail's own, at C speed, and never writes)."""

    __slots__ = ("append", "tail", "block", "_firsts", "_full", "_fd", "_file", "_blocks", "_kept")

    def __init__(self, fd: int | None = None, *, block: int = BLOCK) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.tail = array("d")
        self.append = self.tail.append  # the tail is never replaced, only shortened in place
        self.block = block
        self._firsts = array("d")  # the first value of every full block
        self._full = 0  # full blocks stored
        self._fd = fd  # where full blocks go (a file's descriptor), once there is one
        self._file: IO[bytes] | None = None  # the temporary file this column made itself (closed with it)
        self._blocks: list[array[float]] | None = None  # full blocks in memory, where no file could take them
        self._kept: dict[int, array[float]] = {}

    # -- growing ------------------------------------------------------------------
    def settle(self) -> None:
        """Store every full block of the tail, and drop it from memory."""
        tail, size = self.tail, self.block
        while len(tail) >= size:
            self._store(tail[:size])
            del tail[:size]

    def extend(self, other: Column, floor: float | None = None) -> None:
        """Append every value of ``other``, in order (``other`` is unchanged).
        With ``floor``, for an ``other`` that never decreases (a running
        maximum, which goes on here): each value raised to at least ``floor``."""
        for values in other._in_blocks():
            if floor is not None and len(values) and not values[0] >= floor:
                values = array("d", (v if v >= floor else floor for v in values))
            self.tail.extend(values)
            self.settle()

    def _in_blocks(self) -> Iterator[array[float]]:
        """The values a block at a time (the tail last), read back one by one."""
        for b in range(self._full):
            yield self._read(b)
        yield self.tail

    def _store(self, values: array[float]) -> None:
        if self._blocks is None:
            try:
                if self._fd is None:
                    self._file = tempfile.TemporaryFile()
                    self._fd = self._file.fileno()
                data, at = memoryview(values.tobytes()), self._full * self.block * _ITEM
                while data:
                    written = os.pwrite(self._fd, data, at)
                    data, at = data[written:], at + written
            except OSError:
                # no room, or no file: from now on the blocks stay in memory,
                # those already written read back first
                self._blocks = [self._read(b) for b in range(self._full)]
        if self._blocks is not None:
            self._blocks.append(values)
        self._firsts.append(values[0])
        self._full += 1

    # -- reading ------------------------------------------------------------------
    def _read(self, b: int) -> array[float]:
        """Full block ``b``, from memory or read back from the file."""
        if self._blocks is not None:
            return self._blocks[b]
        assert self._fd is not None  # a block was stored, so a file took it
        size = self.block * _ITEM
        at, parts = b * size, []
        while size:
            data = os.pread(self._fd, size, at)
            if not data:
                raise OSError(f"column file ends inside block {b}")
            parts.append(data)
            size, at = size - len(data), at + len(data)
        values = array("d")
        values.frombytes(b"".join(parts))
        return values

    def _block(self, b: int) -> array[float]:
        """Full block ``b``, kept among the last few read."""
        if self._blocks is not None:
            return self._blocks[b]
        kept = self._kept
        values = kept.get(b)
        if values is None:
            values = self._read(b)
            if len(kept) >= KEPT:
                del kept[next(iter(kept))]  # the one read longest ago
            kept[b] = values
        return values

    def __len__(self) -> int:
        return self._full * self.block + len(self.tail)

    def __getitem__(self, k: int) -> float:
        stored = self._full * self.block
        n = stored + len(self.tail)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("column index out of range")
        if k >= stored:
            return self.tail[k - stored]
        return self._block(k // self.block)[k % self.block]

    def rank(self, x: float) -> int:
        """How many values are <= ``x``: ``bisect.bisect_right(column, x)``
        for a column whose values never decrease (for any other column, use
        ``bisect.bisect_right`` itself, which reads values one by one)."""
        j = _bisect_right(self._firsts, x)  # full blocks whose first value is <= x
        tail = self.tail
        if j == self._full and tail and tail[0] <= x:
            return j * self.block + _bisect_right(tail, x)
        if j == 0:
            return 0
        return (j - 1) * self.block + _bisect_right(self._block(j - 1), x)

    def __iter__(self) -> Iterator[float]:
        for values in self._in_blocks():
            yield from values

    def tolist(self) -> list[float]:
        return list(self)

    def in_memory(self) -> int:
        """How many values this column holds in memory now (the tail, the
        sparse index, the blocks kept or, without a file, every block)."""
        held = len(self.tail) + len(self._firsts) + sum(map(len, self._kept.values()))
        return held + (sum(map(len, self._blocks)) if self._blocks is not None else 0)

    # -- between processes --------------------------------------------------------------
    def __getstate__(self) -> tuple[array[float], int, array[float], int, int | None, list[array[float]] | None]:
        if self._file is not None:
            raise TypeError(
                "a column in a temporary file of its own cannot leave its process; "
                "give it a descriptor that the other process holds too (fd=...)"
            )
        return (self.tail, self.block, self._firsts, self._full, self._fd, self._blocks)

    def __setstate__(
        self, state: tuple[array[float], int, array[float], int, int | None, list[array[float]] | None]
    ) -> None:
        self.tail, self.block, self._firsts, self._full, self._fd, self._blocks = state
        self.append = self.tail.append
        self._file = None
        self._kept = {}
