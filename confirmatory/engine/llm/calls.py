"""What every call does around litellm's: timing, pricing the reply, carrying a failed call's billed usage, reporting it.

A reply's cost is reported to the attempt bound to this thread
(``spend.bound_attempt``) before the reply reaches the harness; litellm calls
made around this boundary are caught by a callback (``_install_direct_call_hook``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from confirmatory.engine.llm.boundary import (
    ModelLike,
    _cost,
    _lib,
    _ours,
    _unpriced_class,
    provider_of,
)
from confirmatory.engine.reply import Reply


def _priced(model: ModelLike, reply: Reply) -> Reply:
    """``reply``, unless litellm could not price it and the model must be priced.

    litellm's ``response_cost`` is None exactly when it has no price for the
    requested model (a priced model's reply without usage costs 0.0, not
    None), so a None is never "free": counting it as $0 would let the
    model's cap and the spend ceiling pass unnoticed (docs/LITELLM.md).
    """
    _note_reply(reply)
    if reply.cost_usd is not None or not getattr(model, "require_price", True):
        return reply
    usage = reply.usage
    exc = cast(Any, _unpriced_class())(  # (Any: UnpricedCall, made on litellm's class, takes reply=)
        f"litellm has no price for {model.litellm_model}: its {reply.kind} call returned "
        f"({usage.get('input_tokens', 0)} input and {usage.get('output_tokens', 0)} output tokens) "
        "without a cost, so its spend cannot be counted and the spend ceiling cannot be enforced; "
        "a person must act before the model runs again",
        reply=reply,
        litellm_model=model.litellm_model,
    )
    _stamp(exc, reply.start, reply.end)
    raise exc


def _tokens(usage: Any, name: str) -> int:
    """A token count of a reply's usage: an object, or a plain dict (litellm
    leaves a Responses usage as a dict when the reply has ``"output": null``)."""
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, 0)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _usage_cost(model: ModelLike, tokens: Mapping[str, int]) -> float | None:
    """What litellm's cost lookup (the one behind ``response_cost``) charges
    for these tokens of ``model``, or None when it cannot price them."""
    try:
        prompt_usd, completion_usd = _lib().cost_per_token(
            model=model.litellm_model, prompt_tokens=tokens["input_tokens"],
            completion_tokens=tokens["output_tokens"])
    except Exception:  # noqa: BLE001 - unpriced
        return None
    return float(prompt_usd) + float(completion_usd)


def _empty_reply(model: ModelLike, kind: str, field_name: str, response: Any, tokens: dict[str, int],
                 start: float, end: float) -> BaseException:
    """The exception for an HTTP 200 reply with nothing in ``choices`` (chat)
    or ``output`` (Responses): a provider failure (litellm's ``APIError``,
    status 200, as litellm itself raises for a 200 whose body it cannot read
    on the Responses API), so the attempt is rerun, not a bare IndexError of
    the harness's that stops the model.

    The reply was billed: its cost is told to the bound attempt (as a
    returned reply's is) and carried on the exception, ``reply`` (a
    ``Reply`` with no content, its usage, cost and times) and ``cost_usd``,
    so that ``spend.add_call(kind, start, end, error=exc)`` counts it
    (docs/HARNESS.md). ``call_start``/``call_end`` are its times. When
    litellm put no cost on the reply, the cost is asked of its cost lookup
    for the reply's tokens (None if it cannot price them)."""
    cost = _cost(response)
    if cost is None and (tokens["input_tokens"] or tokens["output_tokens"]):
        cost = _usage_cost(model, tokens)
    reply = Reply(kind=kind, content=None, tool_calls=(), finish_reason=None, cost_usd=cost,
                  usage=dict(tokens), start=start, end=end)
    _note_reply(reply)
    exc: BaseException = _lib().exceptions.APIError(
        status_code=200,
        message=(f"the provider replied without {field_name}: HTTP 200 with no {field_name} in its {kind} reply "
                 f"for {model.litellm_model} ({tokens['input_tokens']} input and {tokens['output_tokens']} "
                 "output tokens billed)"),
        llm_provider=provider_of(model.litellm_model),
        model=model.litellm_model,
    )
    exc.reply = reply  # type: ignore[attr-defined]
    exc.cost_usd = cost  # type: ignore[attr-defined]
    exc.usage = dict(tokens)  # type: ignore[attr-defined]
    _stamp(exc, start, end)
    return exc


def _stamp(exc: BaseException, start: float, end: float) -> None:
    """Leave the call's times on the exception: a harness reports failed calls too."""
    try:
        exc.call_start = start  # type: ignore[attr-defined]
        exc.call_end = end  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass




def _timed(call: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``call(**kwargs)`` with its raw start and end times; a raised exception
    carries them too (``call_start``/``call_end``), and propagates unchanged."""
    start = time.time()
    _ours.active = True
    _ours.bodies = []  # the provider's raw replies to this call (_DirectCalls.log_post_api_call)
    try:
        response = call(**kwargs)
    except BaseException as exc:
        _stamp(exc, start, time.time())
        raise
    finally:
        _ours.active = False
    return response, start, time.time()



# A reply's usage fields, by API: (input, output, total).
_USAGE_FIELDS = {
    "chat": ("prompt_tokens", "completion_tokens", "total_tokens"),
    "responses": ("input_tokens", "output_tokens", "total_tokens"),
}


def _billed_usage(kind: str) -> dict[str, int] | None:
    """The tokens the raw replies to this thread's last call billed, or None.

    litellm reports the provider's raw body to its post-call hook before it
    reads it; when it then fails to read it (``"choices"`` null or missing,
    a body it cannot map), the exception it raises carries no usage, though
    the reply was billed. Only a body that is a JSON object with a usage
    counts."""
    import json  # noqa: PLC0415 - only on a failed call

    names = _USAGE_FIELDS[kind]
    tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for raw in getattr(_ours, "bodies", None) or ():
        try:
            body = json.loads(raw)
        except (TypeError, ValueError):
            continue
        usage = body.get("usage") if isinstance(body, dict) else None
        if not isinstance(usage, dict):
            continue
        for key, name in zip(tokens, names):
            value = usage.get(name, usage.get(key))
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens[key] += value
    return tokens if tokens["input_tokens"] or tokens["output_tokens"] else None


def _carry_billed_usage(model: ModelLike, kind: str, exc: BaseException) -> None:
    """Put on a raised call's exception the cost of a reply it lost (``reply``,
    ``cost_usd``, ``usage``, as ``_empty_reply`` does), so that the documented
    ``spend.add_call(kind, start, end, error=exc)`` counts what was billed.
    The exception and its class stay litellm's."""
    if getattr(exc, "reply", None) is not None:
        return
    tokens = _billed_usage(kind)
    if tokens is None:
        return
    start = getattr(exc, "call_start", None)
    end = getattr(exc, "call_end", None)
    reply = Reply(kind=kind, content=None, tool_calls=(), finish_reason=None,
                  cost_usd=_usage_cost(model, tokens), usage=dict(tokens),
                  start=start if start is not None else time.time(),
                  end=end if end is not None else time.time())
    try:
        exc.reply = reply  # type: ignore[attr-defined]
        exc.cost_usd = reply.cost_usd  # type: ignore[attr-defined]
        exc.usage = dict(tokens)  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return
    _note_reply(reply)


def _note_reply(reply: Reply) -> None:
    """Tell the attempt bound to this thread (if any) what this reply cost:
    the lane checks that the harness reported it (spend.AttemptSpend.unreported)."""
    from confirmatory.engine.spend import bound_attempt

    attempt = bound_attempt()
    if attempt is not None and reply.cost_usd is not None:
        attempt.note_llm_cost(reply.cost_usd)
