"""Billing: a call's usage by kind of token, times the design's frozen prices, in integer nano-dollars.

Pure: no I/O, no litellm. Each API reports its usage in its own words
(docs/LITELLM.md "What a call costs" quotes the vendors); ``tokens_by_kind``
reads a reply's usage object as the provider sent it into the five kinds of
the price table, each token counted under exactly one kind:

- ``input``: prompt tokens neither read from nor written to a cache;
- ``cached_input``: prompt tokens read from a cache;
- ``cache_write``: prompt tokens written to a cache (Anthropic);
- ``output``: generated tokens that are not reasoning;
- ``reasoning``: reasoning ("thinking") tokens reported apart from the output.

``cost_nusd`` multiplies them by a ``PriceTable`` (USD per million tokens)
exactly (``Fraction`` of each price's decimal spelling) and rounds the call's
total once, half to even, at the nano-dollar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

KINDS: tuple[str, ...] = ("input", "cached_input", "cache_write", "output", "reasoning")

# The four billing rules, by the API's shape.
SHAPES: tuple[str, ...] = ("chat", "responses", "anthropic", "gemini")

# The kinds each shape can bill (reasoning, where a shape reports it apart,
# is priced at ``output`` unless the table says otherwise: never missing).
BILLED_KINDS: dict[str, tuple[str, ...]] = {
    "chat": ("input", "cached_input", "output", "reasoning"),
    "responses": ("input", "cached_input", "output", "reasoning"),
    "anthropic": ("input", "cached_input", "cache_write", "output"),
    "gemini": ("input", "cached_input", "output", "reasoning"),
}

# The share of the larger of two costs by which they may differ before a
# call carries a ``cost_disagreement`` (1 %).
DISAGREEMENT_SHARE = Fraction(1, 100)


@dataclass(frozen=True)
class PriceTable:
    """USD per million tokens of each kind; ``None`` where the table has no
    price for it (``reasoning`` then costs ``output``)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    reasoning: float | None = None

    def price(self, kind: str) -> float | None:
        """USD per million tokens of ``kind`` (reasoning defaults to output)."""
        if kind == "reasoning" and self.reasoning is None:
            return self.output
        value: float | None = getattr(self, kind)
        return value

    def as_dict(self) -> dict[str, float | None]:
        """The table as records keep it: every kind, USD per million tokens."""
        return {kind: self.price(kind) for kind in KINDS}


def sim_table(prices: tuple[float, float], served: str | None = None) -> PriceTable:
    """The simulator's price table for the model it serves as ``served``, in
    USD per million tokens: its catalogue's (``core.simulated.SIM_PRICE_TABLE``:
    cache reads, cache writes and reasoning at their own prices, the prices
    its invoice bills at) when ``prices`` (USD per token, input and output)
    are that model's; otherwise ``prices`` alone, cache reads and writes at
    the input price."""
    from confirmatory.core.simulated import SIM_PRICE_TABLE, SIM_PRICES

    if served is not None and served in SIM_PRICE_TABLE and tuple(prices) == SIM_PRICES[served]:
        return PriceTable(**SIM_PRICE_TABLE[served])
    in_mtok, out_mtok = (float(Decimal(repr(float(x))).scaleb(6)) for x in prices)
    return PriceTable(input=in_mtok, output=out_mtok, cached_input=in_mtok, cache_write=in_mtok)


def design_price(spec: Any) -> dict[str, Any]:
    """What a model's manifest says its calls are counted at, from the design
    alone (``spec``: its ``ModelSpec``): the design's table, the simulator's,
    or litellm's map (its table, read at the run's start, is in config.json)."""
    from confirmatory.core.simulated import SIM_PRICES

    if spec.price_usd_per_mtok is not None:
        return {"source": "design", "table": spec.price_usd_per_mtok.table().as_dict()}
    if spec.api_base == "simulator" and spec.served_name in SIM_PRICES:
        return {
            "source": "simulator",
            "table": sim_table(SIM_PRICES[spec.served_name], spec.served_name).as_dict(),
        }
    return {"source": "litellm", "table": None}


def missing_kinds(shape: str, table: PriceTable) -> list[str]:
    """The kinds ``shape`` can bill that ``table`` has no price for."""
    return [kind for kind in BILLED_KINDS[shape] if table.price(kind) is None]


def _count(usage: Mapping[str, Any] | None, *path: str) -> int:
    """A non-negative integer at ``path`` in ``usage``; 0 where absent or not a count."""
    value: Any = usage
    for key in path:
        if not isinstance(value, Mapping):
            return 0
        value = value.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def tokens_by_kind(shape: str, usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The tokens of one reply's usage (as its API sends it) by kind.

    A count that includes another (OpenAI's ``prompt_tokens`` includes its
    ``cached_tokens``) is split, never below 0: a usage claiming more cached
    than prompt tokens bills every cached token at the cached price.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown billing shape {shape!r}; one of {SHAPES}")
    if shape in ("chat", "responses"):
        prompt, completion, details = (
            ("prompt_tokens", "completion_tokens", ("prompt_tokens_details", "completion_tokens_details"))
            if shape == "chat"
            else ("input_tokens", "output_tokens", ("input_tokens_details", "output_tokens_details"))
        )
        cached = _count(usage, details[0], "cached_tokens")
        reasoning = _count(usage, details[1], "reasoning_tokens")
        return {
            "input": max(0, _count(usage, prompt) - cached),
            "cached_input": cached,
            "cache_write": 0,
            "output": max(0, _count(usage, completion) - reasoning),
            "reasoning": reasoning,
        }
    if shape == "anthropic":
        return {
            "input": _count(usage, "input_tokens"),
            "cached_input": _count(usage, "cache_read_input_tokens"),
            "cache_write": _count(usage, "cache_creation_input_tokens"),
            "output": _count(usage, "output_tokens"),
            "reasoning": 0,
        }
    cached = _count(usage, "cachedContentTokenCount")
    return {
        "input": max(0, _count(usage, "promptTokenCount") - cached),
        "cached_input": cached,
        "cache_write": 0,
        "output": _count(usage, "candidatesTokenCount"),
        "reasoning": _count(usage, "thoughtsTokenCount"),
    }


def _exact(usd_per_mtok: float) -> Fraction:
    # The decimal the design wrote (repr is the shortest spelling that reads back).
    return Fraction(Decimal(repr(float(usd_per_mtok))))


def cost_nusd(tokens: Mapping[str, int], table: PriceTable) -> int:
    """Nano-dollars for ``tokens`` (by kind) at ``table``; a kind billed
    without a price raises ``ValueError`` (the preflight refuses such a table)."""
    total = Fraction(0)
    for kind in KINDS:
        n = tokens.get(kind, 0)
        if not n:
            continue
        price = table.price(kind)
        if price is None:
            raise ValueError(f"{n} {kind} tokens billed but the price table has no {kind} price")
        total += n * _exact(price)
    # USD per million tokens -> nano-dollars per token: x 10**9 / 10**6.
    return round(total * 1000)


def disagreement(runner_nusd: int, litellm_nusd: int | None) -> dict[str, Any] | None:
    """The record's ``cost_disagreement`` for one call, or None when litellm's
    cost is within 1 % of the runner's (both 0 agree)."""
    if litellm_nusd is None:
        return {"runner_nusd": runner_nusd, "litellm_nusd": None, "reason": "litellm gave no cost"}
    larger = max(runner_nusd, litellm_nusd)
    if abs(runner_nusd - litellm_nusd) <= DISAGREEMENT_SHARE * larger:
        return None
    return {
        "runner_nusd": runner_nusd,
        "litellm_nusd": litellm_nusd,
        "reason": "litellm's cost differs from the runner's by more than 1 %",
    }
