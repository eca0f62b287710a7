"""Money: integer nano-dollars, and the one conversion from a provider's float.

Owns: ``NUSD_PER_USD`` and the conversion of a float cost (as litellm reports
it) into integer nano-dollars (RECORDS.md "Encoding"). Sums of money are only
ever taken over integers, so 384 calls of $0.00002 add up to exactly
384 * 20_000 nusd - summing the floats first would not.

Why ``Decimal(repr(x))``: ``repr`` is the shortest decimal string that reads
back as the same float, i.e. the number the provider meant to report; going
through ``Decimal(x)`` instead would carry the float's binary error
(0.00002 is 2.0000000000000001636e-05) into the rounding.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

NUSD_PER_USD = 10**9


def to_nusd(cost_usd: float | int | None) -> int:
    """Integer nano-dollars for a cost in dollars; ``None`` (no cost known) is 0.

    Rounds half to even at the nano-dollar. Refuses negative, NaN and infinite
    costs with ``ValueError``: a provider reporting one is a fault to surface,
    not an amount to count.
    """
    if cost_usd is None:
        return 0
    if isinstance(cost_usd, bool) or not isinstance(cost_usd, (int, float)):
        raise TypeError(f"a cost must be a float, an int or None, not {type(cost_usd).__name__}")
    if isinstance(cost_usd, int):
        if cost_usd < 0:
            raise ValueError(f"a cost cannot be negative: {cost_usd!r}")
        return cost_usd * NUSD_PER_USD
    if not math.isfinite(cost_usd):
        raise ValueError(f"a cost must be finite: {cost_usd!r}")
    if cost_usd < 0:
        raise ValueError(f"a cost cannot be negative: {cost_usd!r}")
    # scaleb shifts the exponent only: exact for the <= 17 digits repr gives.
    scaled = Decimal(repr(cost_usd)).scaleb(9)
    return int(scaled.to_integral_value(rounding=ROUND_HALF_EVEN))


# Design values (caps, reserves, margins) are dollars written by a person; the
# same conversion serves, under a name that says where the value came from.
usd_to_nusd = to_nusd


def format_usd(nusd: int) -> str:
    """``$12.345678`` - dollars to the micro-dollar, rounded half up (away
    from zero): the one rounding rule wherever dollars are shown (the page,
    ``show``, the live display, verify's text, ``check``)."""
    if isinstance(nusd, bool) or not isinstance(nusd, int):
        raise TypeError(f"nusd must be an int, not {type(nusd).__name__}")
    # Integer arithmetic throughout: no Decimal context precision to outgrow.
    micro, rest = divmod(abs(nusd), 1000)
    if rest >= 500:
        micro += 1
    sign = "-" if nusd < 0 and micro else ""  # no "-$0.000000"
    whole, frac = divmod(micro, 10**6)
    return f"{sign}${whole}.{frac:06d}"


def household_key(obj: Mapping[str, Any]) -> str:
    """A line's household run: ``hh-003``, or ``hh-003@1`` for its round 1
    (the same key verify's checks use)."""
    r = obj.get("round", 0)
    return f"{obj.get('household')}" if not r else f"{obj.get('household')}@{r}"


@dataclass(frozen=True, slots=True)
class Spend:
    """A model's spend as its records hold it, in nano-dollars, by where each
    part is read from (docs/REPORT.md "Money")."""

    recorded_nusd: int = 0  # attempt lines of the households that ended (a household line)
    late_nusd: int = 0  # late-cost lines
    lost_nusd: int = 0  # continuation lines' lost_nusd: journaled costs a crash left without a record
    in_flight_nusd: int = 0  # journaled (call-cost) since the last continuation, of households not ended yet

    @property
    def total_nusd(self) -> int:
        return self.recorded_nusd + self.late_nusd + self.lost_nusd + self.in_flight_nusd

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.recorded_nusd + other.recorded_nusd,
            self.late_nusd + other.late_nusd,
            self.lost_nusd + other.lost_nusd,
            self.in_flight_nusd + other.in_flight_nusd,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "recorded_nusd": self.recorded_nusd,
            "late_nusd": self.late_nusd,
            "lost_nusd": self.lost_nusd,
            "in_flight_nusd": self.in_flight_nusd,
            "total_nusd": self.total_nusd,
        }


def _cost(v: Any) -> int:
    return v if type(v) is int and v >= 0 else 0


def model_spend(
    lines: Iterable[Mapping[str, Any]], *, recorded_nusd: int | None = None, settled: Collection[str] | None = None
) -> Spend:
    """The one count of a model's spend from its run.jsonl lines, in order.

    Recorded: the attempts of every household with a household line (given
    as ``recorded_nusd`` by a reader that summed them already, with the
    ended households' keys as ``settled``). Late and lost: every late-cost
    line, every continuation's ``lost_nusd``. In flight: what the spend
    journal (call-cost lines, written before a cost counts) holds since the
    last continuation for households with no household line yet, less their
    late costs (journaled too): the dollars a crashed or running run has
    spent that no household line counts yet. On a closed run it is 0; after
    ``continue`` the crash's share of it is the continuation's ``lost_nusd``
    and the rest its cut households' attempt lines.
    """
    items = list(lines)
    if settled is None:
        settled = {household_key(o) for o in items if o.get("event") == "household"}
    recorded = 0
    late = lost = 0
    journal: dict[tuple[str, Any, Any], int] = {}
    late_open: dict[tuple[str, Any, Any], int] = {}
    for o in items:
        ev = o.get("event")
        if ev == "attempt" and recorded_nusd is None:
            if household_key(o) in settled:
                recorded += _cost(o.get("cost_nusd"))
        elif ev == "late-cost":
            late += _cost(o.get("cost_nusd"))
            key = (household_key(o), o.get("arm"), o.get("pass"))
            late_open[key] = late_open.get(key, 0) + _cost(o.get("cost_nusd"))
        elif ev == "continuation":
            lost += _cost(o.get("lost_nusd"))
            journal.clear()  # journaled before it: lost (counted above) or lined since
            late_open.clear()
        elif ev == "call-cost":
            key = (household_key(o), o.get("arm"), o.get("pass"))
            journal[key] = journal.get(key, 0) + _cost(o.get("cost_nusd"))
    in_flight = sum(max(0, nusd - late_open.get(key, 0)) for key, nusd in journal.items() if key[0] not in settled)
    return Spend(recorded if recorded_nusd is None else recorded_nusd, late, lost, in_flight)
