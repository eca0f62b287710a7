"""The simulated provider's catalogue: the models it serves, their prices and which of them think.

Kept in ``core`` because the design's checks (an ``api_base = "simulator"``
model must be one the simulator serves) and the litellm boundary's pricing
read it, and neither may import the simulator itself (``confirmatory.sim``,
which serves over HTTP through the litellm boundary).
"""

from __future__ import annotations

from fractions import Fraction

SIM_MODELS = (
    "sim-careful",
    "sim-sloppy",
    "sim-truncates",
    "sim-reasoner",
    "sim-claude",
    "sim-gemini",
)

# The kinds of token a vendor bills, as a price table names them
# (docs/SIMULATOR.md "Billing"): ``input`` and ``output`` exclude the
# cached, cache-write and reasoning tokens counted under their own kind.
PRICE_KINDS = ("input", "cached_input", "cache_write", "output", "reasoning")

# USD per million tokens, by kind. Every price is a whole number of
# nano-dollars per token (USD per million tokens x 1000), so a call's cost
# is an exact integer and no rounding ever happens on the simulator's own
# prices. Cache reads cost a tenth of input (OpenAI's, Anthropic's and
# Gemini's ratio), cache writes 1.25 x input (Anthropic's 5-minute rate),
# reasoning the output price (every vendor bills thinking as output).
SIM_PRICE_TABLE: dict[str, dict[str, float]] = {
    "sim-careful": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "output": 4.0, "reasoning": 4.0},
    "sim-sloppy": {"input": 0.5, "cached_input": 0.05, "cache_write": 0.625, "output": 2.0, "reasoning": 2.0},
    "sim-truncates": {"input": 2.0, "cached_input": 0.2, "cache_write": 2.5, "output": 8.0, "reasoning": 8.0},
    "sim-reasoner": {"input": 1.1, "cached_input": 0.275, "cache_write": 1.375, "output": 4.4, "reasoning": 4.4},
    "sim-claude": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0, "reasoning": 15.0},
    "sim-gemini": {"input": 1.25, "cached_input": 0.125, "cache_write": 1.25, "output": 10.0, "reasoning": 10.0},
}

# The models that "think": each reply carries reasoning tokens, reported in
# the API's own field (chat completion_tokens_details.reasoning_tokens,
# Responses output_tokens_details.reasoning_tokens, Gemini
# thoughtsTokenCount; Anthropic a thinking block, when the request enables
# thinking, counted in output_tokens as Anthropic does).
SIM_THINKS = frozenset({"sim-reasoner", "sim-claude", "sim-gemini"})

# USD per token (input, output): what litellm is told (engine.llm.prepare).
# Derived from the table, so the two cannot drift apart.
SIM_PRICES: dict[str, tuple[float, float]] = {
    name: (table["input"] / 1e6, table["output"] / 1e6) for name, table in SIM_PRICE_TABLE.items()
}

# The most tokens one call to the simulator carries, as a provider's context
# window and output limit do: a longer prompt is refused (400,
# context_length_exceeded) and a reply is cut at the output limit. They bound
# the costliest single call `confirmatory check` states.
SIM_MAX_INPUT_TOKENS = 16_384
SIM_MAX_OUTPUT_TOKENS = 4_096


def nusd_per_token(usd_per_mtok: float | int | str) -> Fraction:
    """A price in USD per million tokens as exact nano-dollars per token
    (x 1000), read from its decimal text so that 0.275 is 275, not 274.99..."""
    return Fraction(str(usd_per_mtok)) * 1000


def bill_nusd(tokens: dict[str, int], table: dict[str, float]) -> int:
    """What one call costs, in integer nano-dollars: the exact sum over kinds
    of tokens x price, rounded once, half to even: the runner's rule
    (``core.billing.cost_nusd``, docs/LITELLM.md "What a call costs"), so
    that the invoice and the runner's spend agree on any table; it never
    moves a catalogue price, each a whole number of nano-dollars per token.
    A kind the table lacks is priced as ``output`` for ``reasoning`` and as
    ``input`` otherwise."""
    total = Fraction(0)
    for kind, count in tokens.items():
        if not count:
            continue
        price = table.get(kind)
        if price is None:
            price = table["output"] if kind == "reasoning" else table["input"]
        total += nusd_per_token(price) * count
    return round(total)
