"""One chat-completions call through litellm (``chat``)."""

from __future__ import annotations

from typing import Any

from confirmatory.engine.llm import cost
from confirmatory.engine.llm.boundary import ModelLike, _cost, _lib, _route
from confirmatory.engine.llm.calls import (
    _carry_billed_usage,
    _costed,
    _empty_reply,
    _priced,
    _timed,
    _tokens,
)
from confirmatory.engine.reply import Reply


def chat(
    model: ModelLike,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
    max_tokens: int | None = None,
    extra_headers: dict[str, str] | None = None,
) -> Reply:
    """One chat-completions call; litellm's exceptions propagate unchanged
    (each carries ``call_start``/``call_end``). A reply litellm cannot price
    raises ``UnpricedCall`` (see ``_priced``); a reply without choices raises
    litellm's ``APIError`` carrying its cost (see ``_empty_reply``)."""
    lib = _lib()
    kwargs = _route(model)
    kwargs.update(dict(model.params or {}))
    if max_tokens is not None:
        # Override whichever token parameter the design uses (sending both
        # max_tokens and max_completion_tokens is refused by some providers).
        key = "max_completion_tokens" if "max_completion_tokens" in kwargs else "max_tokens"
        kwargs[key] = max_tokens
    if tools:
        kwargs["tools"] = tools
    if response_format is not None:
        kwargs["response_format"] = response_format
    if extra_headers:
        kwargs["extra_headers"] = dict(extra_headers)
    try:
        response, start, end = _timed(lib.completion, messages=messages, **kwargs)
    except Exception as exc:
        _carry_billed_usage(model, "chat", exc)
        raise
    usage = getattr(response, "usage", None)
    tokens = {
        "input_tokens": _tokens(usage, "prompt_tokens"),
        "output_tokens": _tokens(usage, "completion_tokens"),
        "total_tokens": _tokens(usage, "total_tokens"),
    }
    choices = getattr(response, "choices", None) or []
    if not choices:
        # litellm returns a 200 with "choices": [] as a response (it raises
        # InternalServerError only for choices missing or not a list).
        raise _empty_reply(model, "chat", "choices", response, tokens, start, end)
    if _empty_anthropic_content(model):
        # Anthropic's 200 with "content": [] comes back from litellm as a
        # choice with no content and finish_reason "stop": nothing of the
        # model's turn reached the runner, as with "choices": [] elsewhere.
        raise _empty_reply(model, "chat", "content", response, tokens, start, end)
    choice = choices[0]
    message = choice.message
    calls = tuple(
        {"id": str(tc.id), "name": str(tc.function.name), "arguments": str(tc.function.arguments or "")}
        for tc in (getattr(message, "tool_calls", None) or [])
    )
    return _priced(
        model,
        Reply(
            kind="chat",
            content=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            **_costed(model, "chat", usage, _cost(response)),
            usage=tokens,
            start=start,
            end=end,
        ),
    )


def _empty_anthropic_content(model: ModelLike) -> bool:
    """Whether the Anthropic body litellm read for this call held ``"content": []``
    and was neither cut at its limit nor a refusal (both the model's own, kept)."""
    if cost.api_family(model.litellm_model) != "anthropic":
        return False
    body = cost.raw_body()
    return (
        body is not None
        and body.get("content") == []
        and body.get("stop_reason") not in ("max_tokens", "refusal", "pause_turn")
    )
