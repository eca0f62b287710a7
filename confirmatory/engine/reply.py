"""What one model call that returned gives the harness: ``Reply``, a value.

Its own module, below both the litellm boundary (which makes one) and the
spend (which counts the cost one carries), so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Reply:
    """One model call that returned.

    ``finish_reason`` is ``"length"`` for a truncated turn in either API
    (a Responses ``incomplete`` with reason ``max_output_tokens``).
    ``cost_usd`` is the runner's own cost of the call (its usage by kind
    times the model's frozen price table, ``cost_nusd`` nano-dollars, as
    dollars: ``money.to_nusd`` gives ``cost_nusd`` back exactly); it is what
    the harness reports and the spend counts. It is never None for a
    design's model: ``chat``/``responses`` raise ``UnpricedCall`` instead
    (None only for an ``AdHocModel`` that does not ``require_price``).
    ``litellm_cost_usd`` is litellm's ``response_cost``, kept as a
    cross-check; ``billing`` what the call's record keeps of both
    (``cost.Bill.fields``: tokens by kind, both costs, their disagreement).
    ``usage`` holds ``input_tokens``, ``output_tokens``, ``total_tokens``
    in both APIs. ``start``/``end`` are raw ``time.time()``.
    """

    kind: str  # "chat" or "responses"
    content: str | None
    tool_calls: tuple[dict[str, str], ...]  # {"id", "name", "arguments" (a JSON string)}
    finish_reason: str | None
    cost_usd: float | None
    usage: dict[str, int] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    cost_nusd: int | None = None
    litellm_cost_usd: float | None = None
    billing: dict[str, Any] | None = None
