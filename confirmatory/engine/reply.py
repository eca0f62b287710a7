"""What one model call that returned gives the harness: ``Reply``, a value.

Its own module, below both the litellm boundary (which makes one) and the
spend (which counts the cost one carries), so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Reply:
    """One model call that returned.

    ``finish_reason`` is ``"length"`` for a truncated turn in either API
    (a Responses ``incomplete`` with reason ``max_output_tokens``).
    ``cost_usd`` is litellm's float: convert it once, with
    ``money.to_nusd``, where it is counted. It is never None for a design's
    model: ``chat``/``responses`` raise ``UnpricedCall`` instead (None only
    for an ``AdHocModel`` that does not ``require_price``).
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
