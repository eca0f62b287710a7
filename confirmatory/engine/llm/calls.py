"""What every call does around litellm's: timing, pricing the reply, carrying a failed call's billed usage, reporting it.

A reply's cost is reported to the attempt bound to this thread
(``spend.bound_attempt``) before the reply reaches the harness; litellm calls
made around this boundary are caught by a callback (``_install_direct_call_hook``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from confirmatory.core import billing
from confirmatory.engine.llm import cost
from confirmatory.engine.llm.boundary import (
    ModelLike,
    _cost,
    _lib,
    _ours,
    _unpriced_class,
    provider_of,
)
from confirmatory.engine.llm.cost import bill
from confirmatory.engine.reply import Reply


def _costed(model: ModelLike, kind: str, usage: Any, litellm_cost: float | None) -> dict[str, Any]:
    """A reply's cost fields: the runner's own cost (``cost.bill``: the usage
    the provider sent, by kind, times the model's frozen table) is the one
    counted; litellm's is kept beside it. Only a model the runner holds no
    table for (an Azure deployment litellm prices by the reply's model) is
    counted at litellm's cost, and its record says so."""
    b = bill(model, kind, usage, litellm_cost)
    fields = b.fields()
    cost_usd = b.runner_usd
    if cost_usd is None and litellm_cost is not None:
        cost_usd = litellm_cost
        fields["cost_disagreement"] = {
            "runner_nusd": None,
            "litellm_nusd": b.litellm_nusd,
            "reason": "the runner has no price table for the model: counted at litellm's cost",
        }
    nusd = b.runner_nusd if b.runner_nusd is not None else b.litellm_nusd
    return {"cost_usd": cost_usd, "cost_nusd": nusd, "litellm_cost_usd": litellm_cost, "billing": fields}


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


def _usage_cost(model: ModelLike, tokens: Mapping[str, int], kinds: Mapping[str, int] | None = None) -> float | None:
    """What litellm's cost lookup (the one behind ``response_cost``) charges
    for these tokens of ``model``, or None when it cannot price them.
    ``kinds`` (the tokens by the price table's kinds, where the provider's
    usage told them) is given to it as litellm's own usage object, so that
    its cache reads, cache writes and reasoning are priced as on a reply."""
    lib = _lib()
    extra: dict[str, Any] = {}
    if kinds is not None:
        from litellm.types.utils import (  # noqa: PLC0415 - litellm, lazily
            CompletionTokensDetailsWrapper,
            PromptTokensDetailsWrapper,
            Usage,
        )

        extra = {
            "usage_object": Usage(
                prompt_tokens=tokens["input_tokens"],
                completion_tokens=tokens["output_tokens"],
                prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=kinds.get("cached_input", 0)),
                completion_tokens_details=CompletionTokensDetailsWrapper(reasoning_tokens=kinds.get("reasoning", 0)),
                cache_creation_input_tokens=kinds.get("cache_write", 0),
                cache_read_input_tokens=kinds.get("cached_input", 0),
            ),
            "cache_creation_input_tokens": kinds.get("cache_write", 0),
            "cache_read_input_tokens": kinds.get("cached_input", 0),
        }
    try:
        prompt_usd, completion_usd = lib.cost_per_token(
            model=model.litellm_model,
            prompt_tokens=tokens["input_tokens"],
            completion_tokens=tokens["output_tokens"],
            **extra,
        )
    except Exception:  # noqa: BLE001 - unpriced
        return None
    return float(prompt_usd) + float(completion_usd)


def _empty_reply(
    model: ModelLike, kind: str, field_name: str, response: Any, tokens: dict[str, int], start: float, end: float
) -> BaseException:
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
    theirs = _cost(response)
    if theirs is None and (tokens["input_tokens"] or tokens["output_tokens"]):
        theirs = _usage_cost(model, tokens, bill(model, kind, getattr(response, "usage", None), None).tokens)
    costed = _costed(model, kind, getattr(response, "usage", None), theirs)
    cost = costed["cost_usd"]
    reply = Reply(
        kind=kind,
        content=None,
        tool_calls=(),
        finish_reason=None,
        usage=dict(tokens),
        start=start,
        end=end,
        **costed,
    )
    _note_reply(reply)
    exc: BaseException = _lib().exceptions.APIError(
        status_code=200,
        message=(
            f"the provider replied without {field_name}: HTTP 200 with no {field_name} in its {kind} reply "
            f"for {model.litellm_model} ({tokens['input_tokens']} input and {tokens['output_tokens']} "
            "output tokens billed)"
        ),
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


def _billed_usage(model: ModelLike, kind: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """The tokens the raw reply to this thread's last call billed, or None:
    input and output (``input_tokens``: every prompt token, cached and
    written included; ``output_tokens``: reasoning included) and by kind.

    litellm reports the provider's raw body to its post-call hook before it
    reads it; when it then fails to read it (``"choices"`` null or missing,
    a body it cannot map), the exception it raises carries no usage, though
    the reply was billed. The body is read in its own API's field names
    (``cost.raw_usage``: OpenAI's ``usage``, Anthropic's ``usage`` with its
    three input counts, Gemini's ``usageMetadata``); only a JSON object with
    a usage counts."""
    shape = cost.shape_of(model.litellm_model, kind)
    usage = cost.raw_usage(shape)
    if usage is None:
        return None
    kinds = billing.tokens_by_kind(shape, usage)
    prompt = kinds["input"] + kinds["cached_input"] + kinds["cache_write"]
    completion = kinds["output"] + kinds["reasoning"]
    if not (prompt or completion):
        return None
    return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}, kinds


def _carry_billed_usage(model: ModelLike, kind: str, exc: BaseException) -> None:
    """Put on a raised call's exception the cost of a reply it lost (``reply``,
    ``cost_usd``, ``usage``, as ``_empty_reply`` does), so that the documented
    ``spend.add_call(kind, start, end, error=exc)`` counts what was billed.
    The exception and its class stay litellm's."""
    if getattr(exc, "reply", None) is not None:
        return
    billed = _billed_usage(model, kind)
    if billed is None:
        return
    tokens, kinds = billed
    start = getattr(exc, "call_start", None)
    end = getattr(exc, "call_end", None)
    reply = Reply(
        kind=kind,
        content=None,
        tool_calls=(),
        finish_reason=None,
        **_costed(model, kind, None, _usage_cost(model, tokens, kinds)),
        usage=dict(tokens),
        start=start if start is not None else time.time(),
        end=end if end is not None else time.time(),
    )
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
    if attempt is not None:
        attempt.note_reply(reply)
    if attempt is not None and reply.cost_usd is not None:
        attempt.note_llm_cost(reply.cost_usd)
