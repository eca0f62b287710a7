"""One Responses-API call through litellm (``responses``)."""

from __future__ import annotations

from typing import Any

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


def responses(
    model: ModelLike,
    input: list[dict[str, Any]] | str,  # noqa: A002 - the Responses API's own name
    *,
    tools: list[dict[str, Any]] | None = None,
    max_output_tokens: int | None = None,
    extra_headers: dict[str, str] | None = None,
    text_format: dict[str, Any] | None = None,
) -> Reply:
    """One Responses-API call (``text_format`` e.g. ``{"type": "json_object"}``);
    litellm's exceptions propagate unchanged (each carries ``call_start``/``call_end``);
    a reply litellm cannot price raises ``UnpricedCall`` (see ``_priced``); a
    reply without output that is not ``incomplete`` raises litellm's
    ``APIError`` carrying its cost (see ``_empty_reply``)."""
    lib = _lib()
    kwargs = _route(model, "responses")
    params = dict(model.params or {})
    # The Responses API takes no seed (it answers 400 "Unknown parameter");
    # litellm 1.110.2 leaves it out too, but that is not its promise. The
    # design's seed therefore reaches chat calls only (config.json says so).
    params.pop("seed", None)
    # The Responses API names the output limit differently.
    for key in ("max_tokens", "max_completion_tokens"):
        if key in params:
            params.setdefault("max_output_tokens", params.pop(key))
    kwargs.update(params)
    if max_output_tokens is not None:
        kwargs["max_output_tokens"] = max_output_tokens
    if tools:
        kwargs["tools"] = tools
    if text_format is not None:
        kwargs["text"] = {"format": text_format}
    if extra_headers:
        kwargs["extra_headers"] = dict(extra_headers)
    try:
        response, start, end = _timed(lib.responses, input=input, **kwargs)
    except Exception as exc:
        _carry_billed_usage(model, "responses", exc)
        raise
    usage = getattr(response, "usage", None)
    tokens = {
        "input_tokens": _tokens(usage, "input_tokens"),
        "output_tokens": _tokens(usage, "output_tokens"),
        "total_tokens": _tokens(usage, "total_tokens"),
    }
    status = getattr(response, "status", None)
    output = getattr(response, "output", None) or []
    if not output and status != "incomplete":
        # "output": [] or null: nothing the model said, not even a truncated
        # start (an "incomplete" reply without output stays a truncation).
        raise _empty_reply(model, "responses", "output", response, tokens, start, end)
    texts: list[str] = []
    calls: list[dict[str, str]] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "function_call":
            calls.append({"id": str(item.call_id), "name": str(item.name), "arguments": str(item.arguments or "")})
        elif kind == "message":
            for part in getattr(item, "content", None) or []:
                if getattr(part, "type", None) == "output_text":
                    texts.append(str(part.text))
    if status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        finish: str | None = "length" if reason in (None, "max_output_tokens") else str(reason)
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop" if status == "completed" else status
    return _priced(
        model,
        Reply(
            kind="responses",
            content="".join(texts) if texts else None,
            tool_calls=tuple(calls),
            finish_reason=finish,
            **_costed(model, "responses", usage, _cost(response)),
            usage=tokens,
            start=start,
            end=end,
        ),
    )
