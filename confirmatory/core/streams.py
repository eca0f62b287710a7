"""Named random streams and the two draws built on them (docs/DRAW.md).

Owns: how a 64-bit value is derived from the design's seed, how a bounded
integer is drawn from those values, the shuffle, the household draw and the
per-model arm orders. Everything here is pure and written so that a reviewer
can recompute it in any language from the text of docs/DRAW.md alone:

* the k-th value of stream ``s`` is the first 8 bytes (big-endian) of
  ``sha256(f"{seed}:{s}:{k}")``;
* ``below(n)`` skips values at or above ``(2**64 // n) * n`` (rejection, so
  no residue is favoured) and returns the value modulo ``n``;
* a shuffle is Fisher-Yates from the last index down to index 1, drawing
  ``j`` in ``[0, i]``.

Python's ``hash`` and ``random`` are deliberately not used: both would tie the
draw to an interpreter (``PYTHONHASHSEED``, the Mersenne Twister's seeding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

_TWO_64 = 1 << 64

DRAW_STREAM = "draw"


def order_stream_name(model: str) -> str:
    """The name of a model's arm-order stream."""
    return f"order/{model}"


def stream_u64(seed: int, name: str, k: int) -> int:
    """The k-th 64-bit value (0-based) of stream ``name`` under ``seed``."""
    if isinstance(seed, bool):
        # f"{True}" is "True": a bool here is a caller's bug, not a seed.
        raise TypeError("seed must be an integer, not a bool")
    if k < 0:
        raise ValueError(f"stream index must be >= 0, got {k}")
    digest = hashlib.sha256(f"{seed}:{name}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class Stream:
    """One named stream, consumed in order; not thread-safe (one owner)."""

    __slots__ = ("seed", "name", "position")

    def __init__(self, seed: int, name: str) -> None:
        self.seed = seed
        self.name = name
        self.position = 0  # index of the next value to be taken

    def next_u64(self) -> int:
        value = stream_u64(self.seed, self.name, self.position)
        self.position += 1
        return value

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)``, by rejection."""
        if n < 1:
            raise ValueError(f"below(n) needs n >= 1, got {n}")
        limit = (_TWO_64 // n) * n
        while True:
            value = self.next_u64()
            if value < limit:
                return value % n

    def shuffle(self, items: Iterable[T]) -> list[T]:
        """A shuffled copy of ``items`` (the input is not changed)."""
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


def _sorted_unique(values: Iterable[str], what: str) -> list[str]:
    ordered = sorted(values)
    for a, b in zip(ordered, ordered[1:]):
        if a == b:
            raise ValueError(f"duplicate {what}: {a!r}")
    return ordered


def draw_order(seed: int, household_ids: Iterable[str]) -> list[str]:
    """The households in draw order: sorted by id, then shuffled by ``draw``."""
    return Stream(seed, DRAW_STREAM).shuffle(_sorted_unique(household_ids, "household id"))


def arm_orders(seed: int, model: str, draw: Sequence[str], arm_names: Iterable[str]) -> dict[str, list[str]]:
    """Each household's arm order for ``model``, keyed in draw order.

    One stream per model, consumed continuously: the sorted arms are shuffled
    for the first household of the draw, then - continuing where that shuffle
    stopped - for the second, and so on. The order therefore depends on the
    draw, which is why the draw is passed in rather than recomputed here.
    """
    arms = _sorted_unique(arm_names, "arm name")
    _sorted_unique(draw, "household id in the draw")
    stream = Stream(seed, order_stream_name(model))
    return {household: stream.shuffle(arms) for household in draw}
