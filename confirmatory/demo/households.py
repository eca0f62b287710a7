"""Generates the reference study's synthetic households (households.jsonl).

The file is committed and pinned by its sha256 in the bundled designs; this
module only documents, and can repeat, how it was made. Each household is
drawn from a seeded generator around a *profile*, so that the twelve cases
cover what the calculator's rules make hard: a tapering allowance, the child
benefit withdrawal, the housing means test, a child too old for child
benefit, self-employment, a pensioner.

Regenerate with ``python -m confirmatory.demo.households`` (then update the
designs' ``[households] sha256``).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20261129
OUT = Path(__file__).with_name("households.jsonl")

# (adults as (age range, employment range, self-employment range), child count, region)
_Range = tuple[int, int]
PROFILES: list[tuple[list[tuple[_Range, _Range, _Range]], int, str]] = [
    ([((22, 30), (9_000, 13_000), (0, 0))], 0, "north"),  # low earner, housing support
    ([((30, 40), (9_000, 16_000), (0, 0))], 2, "capital"),  # single parent, means test
    ([((35, 45), (28_000, 36_000), (0, 0)), ((33, 44), (0, 0), (0, 0))], 3, "midlands"),
    ([((40, 50), (62_000, 74_000), (0, 0)), ((38, 48), (18_000, 24_000), (0, 0))], 2, "south"),  # CB taper
    ([((45, 55), (105_000, 118_000), (0, 0))], 1, "capital"),  # allowance taper
    ([((28, 36), (0, 0), (22_000, 34_000))], 0, "north"),  # self-employed
    ([((67, 75), (0, 0), (0, 9_000))], 0, "south"),  # pensioner, no SI
    ([((36, 46), (41_000, 52_000), (4_000, 9_000)), ((35, 45), (12_000, 16_000), (0, 0))], 1, "midlands"),
    ([((50, 58), (140_000, 160_000), (0, 0)), ((48, 56), (0, 0), (0, 0))], 2, "capital"),  # additional rate
    ([((24, 32), (19_000, 23_000), (0, 0)), ((23, 31), (11_000, 15_000), (0, 0))], 1, "north"),
    ([((41, 49), (54_000, 59_000), (0, 0))], 2, "south"),  # just under the CB taper
    ([((44, 52), (31_000, 38_000), (0, 0))], 2, "midlands"),  # one child aged 16+
]


def _draw(rng: random.Random, bounds: _Range, step: int = 100) -> int:
    lo, hi = bounds
    if hi <= lo:
        return lo
    return rng.randrange(lo, hi + 1, step)


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    """The households, deterministically from ``seed``."""
    rng = random.Random(seed)
    out = []
    for i, (adults, n_children, region) in enumerate(PROFILES):
        household: dict[str, Any] = {"id": f"hh-{i:03d}", "region": region}
        household["adults"] = [
            {
                "age": _draw(rng, age, step=1),
                "employment_income": _draw(rng, emp),
                "self_employment_income": _draw(rng, self_emp),
            }
            for age, emp, self_emp in adults
        ]
        children = [{"age": rng.randint(0, 15)} for _ in range(n_children)]
        if i == len(PROFILES) - 1:
            # One household with a child past child-benefit age: a common slip.
            children[0]["age"] = rng.randint(16, 18)
        household["children"] = children
        household["housing_cost"] = _draw(rng, (5_400, 18_000))
        out.append(household)
    return out


def to_jsonl(households: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(h, sort_keys=True, separators=(",", ":")).encode() + b"\n" for h in households)


def main(argv: list[str] | None = None) -> int:
    OUT.write_bytes(to_jsonl(generate()))
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
