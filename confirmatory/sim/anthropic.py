"""The Anthropic Messages shape of the simulator: ``POST .../v1/messages``.

Pure functions, request dict -> ``Conversation`` and ``Turn`` -> reply or
error dict, so an in-process fake can reuse them. Bodies follow Anthropic's
API reference (Messages; Errors): content blocks ``text`` / ``tool_use`` /
``thinking``, ``stop_reason`` ``end_turn`` / ``tool_use`` / ``max_tokens`` /
``refusal``, usage ``input_tokens``, ``cache_creation_input_tokens``,
``cache_read_input_tokens``, ``output_tokens``; errors
``{"type": "error", "error": {"type": ..., "message": ...}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confirmatory.sim.behaviour import Conversation, Turn
from confirmatory.sim.faults import FaultKind

# Anthropic's error type for each HTTP status it documents (Errors page).
ERROR_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    529: "overloaded_error",
}

# What the simulator answers on this shape for the faults with an error status.
FAULT_STATUS: dict[FaultKind, int] = {
    FaultKind.RATE_LIMIT: 429,
    FaultKind.SERVER_ERROR: 500,
    FaultKind.BAD_GATEWAY: 502,
    FaultKind.UNAVAILABLE: 503,
    FaultKind.OVERLOADED: 529,
    FaultKind.AUTH: 401,
    FaultKind.QUOTA: 400,  # Anthropic's money signal is the credit balance (a 400)
    FaultKind.CREDIT: 400,
    FaultKind.BAD_REQUEST: 400,
}

FAULT_MESSAGE: dict[FaultKind, str] = {
    FaultKind.RATE_LIMIT: "Number of request tokens has exceeded your per-minute rate limit "
    "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage.",
    FaultKind.OVERLOADED: "Overloaded",
    FaultKind.SERVER_ERROR: "Internal server error",
    FaultKind.AUTH: "invalid x-api-key",
    FaultKind.QUOTA: "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits.",
    FaultKind.CREDIT: "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits.",
    FaultKind.BAD_REQUEST: "messages.0.content: Input should be a valid list (simulated invalid request)",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPE.get(status, "api_error"), "message": message}}


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return json.dumps(block, sort_keys=True)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "tool_use":
        return json.dumps({"name": block.get("name"), "input": block.get("input")}, sort_keys=True)
    if kind == "tool_result":
        return _content_text(block.get("content"))
    if kind == "thinking":
        return str(block.get("thinking") or "")
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(_block_text(b) for b in content)
    return _block_text(content) if content is not None else ""


def _marked(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return obj.get("cache_control") is not None
    if isinstance(obj, list):
        return any(_marked(b) for b in obj)
    return False


def conversation(body: Mapping[str, Any]) -> tuple[Conversation, list[int]]:
    """The request as the policy reads it, and its ``cache_control``
    breakpoints as indices into ``Conversation.segments()``."""
    texts: list[tuple[str, str]] = []
    results: list[str] = []
    breakpoints: list[int] = []
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    offset = 1 if tools else 0
    if tools and any(_marked(t) for t in tools):
        breakpoints.append(0)
    system = body.get("system")
    if system:
        texts.append(("system", _content_text(system)))
        if _marked(system):
            breakpoints.append(offset + len(texts) - 1)
    for msg in body.get("messages") or []:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                results.append(_content_text(block.get("content")))
        role = str(msg.get("role", "user"))
        if blocks and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in blocks):
            role = "tool"
        texts.append((role, _content_text(content)))
        if _marked(content):
            breakpoints.append(offset + len(texts) - 1)
    names = tuple(str(t.get("name", "")) for t in tools)
    # litellm sends a placeholder tool when history holds tool calls and no
    # tools are offered: it offers nothing.
    if names == ("dummy_tool",):
        names = ()
    conv = Conversation(
        texts=tuple(texts),
        tool_names=names,
        tool_results=tuple(results),
        json_mode=False,  # the Messages API has no JSON mode
        tools_text=json.dumps(tools, sort_keys=True) if tools else "",
    )
    return conv, breakpoints


def max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_tokens")
    return value if isinstance(value, int) else None


def reply_body(model: str, turn: Turn, ident: str) -> dict[str, Any]:
    """A Messages API reply: ``turn`` with its usage, cache and thinking included."""
    content: list[dict[str, Any]] = []
    if turn.reasoning_tokens:
        content.append({"type": "thinking", "thinking": turn.thought, "signature": "sim-" + ident[-24:]})
    if turn.content:
        content.append({"type": "text", "text": turn.content})
    if turn.tool_call:
        name, arguments = turn.tool_call
        content.append({"type": "tool_use", "id": "toolu_" + ident[-20:], "name": name, "input": json.loads(arguments)})
    stop = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
    return {
        "id": "msg_" + ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop.get(turn.finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.prompt_tokens - turn.cached_tokens - turn.cache_write_tokens,
            "cache_creation_input_tokens": turn.cache_write_tokens,
            "cache_read_input_tokens": turn.cached_tokens,
            "output_tokens": turn.completion_tokens + turn.reasoning_tokens,
        },
    }
