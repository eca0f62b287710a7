"""The simulated provider's catalogue: the models it serves and their prices.

Kept in ``core`` because the design's checks (an ``api_base = "simulator"``
model must be one the simulator serves) and the litellm boundary's pricing
read it, and neither may import the simulator itself (``confirmatory.sim``,
which serves over HTTP through the litellm boundary).
"""

from __future__ import annotations

SIM_MODELS = ("sim-careful", "sim-sloppy", "sim-truncates")

# USD per token (input, output). Chosen so that one token is a whole number of
# nano-dollars: each call's float cost then converts back to integers exactly,
# and a test can compare summed spend with the server's token counters.
SIM_PRICES: dict[str, tuple[float, float]] = {
    "sim-careful": (1e-6, 4e-6),
    "sim-sloppy": (5e-7, 2e-6),
    "sim-truncates": (2e-6, 8e-6),
}

# The most tokens one call to the simulator carries, as a provider's context
# window and output limit do: a longer prompt is refused (400,
# context_length_exceeded) and a reply is cut at the output limit. They bound
# the costliest single call `confirmatory check` states.
SIM_MAX_INPUT_TOKENS = 16_384
SIM_MAX_OUTPUT_TOKENS = 4_096
