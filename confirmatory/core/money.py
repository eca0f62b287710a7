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
from decimal import ROUND_HALF_EVEN, Decimal

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
    """``$12.345678`` - dollars to the micro-dollar, rounded half to even."""
    if isinstance(nusd, bool) or not isinstance(nusd, int):
        raise TypeError(f"nusd must be an int, not {type(nusd).__name__}")
    # Integer arithmetic throughout: no Decimal context precision to outgrow.
    micro, rest = divmod(abs(nusd), 1000)
    if rest > 500 or (rest == 500 and micro % 2 == 1):
        micro += 1
    sign = "-" if nusd < 0 and micro else ""  # no "-$0.000000"
    whole, frac = divmod(micro, 10**6)
    return f"{sign}${whole}.{frac:06d}"
