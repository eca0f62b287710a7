"""The OpenAI shapes of the simulator: chat completions and the Responses API.

Pure functions, request dict -> ``Conversation`` and ``Turn`` -> reply dict,
so an in-process fake can reuse them. Usage follows OpenAI's: ``prompt_tokens``
(``input_tokens``) include ``prompt_tokens_details.cached_tokens``
(``input_tokens_details.cached_tokens``), ``completion_tokens``
(``output_tokens``) include ``completion_tokens_details.reasoning_tokens``
(``output_tokens_details.reasoning_tokens``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from confirmatory.sim.behaviour import Conversation, Turn, text_of


def chat_conversation(body: Mapping[str, Any]) -> Conversation:
    texts: list[tuple[str, str]] = []
    results: list[str] = []
    for msg in body.get("messages") or []:
        role = str(msg.get("role", "user"))
        text = text_of(msg.get("content"))
        if msg.get("tool_calls"):
            text += json.dumps(msg["tool_calls"], sort_keys=True)
        if role == "tool":
            results.append(text)
        texts.append((role, text))
    return _conversation(texts, results, body.get("tools") or [], (body.get("response_format") or {}).get("type"))


def responses_conversation(body: Mapping[str, Any]) -> Conversation:
    texts: list[tuple[str, str]] = []
    results: list[str] = []
    if body.get("instructions"):
        texts.append(("system", str(body["instructions"])))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "function_call_output":
            output = text_of(item.get("output"))
            results.append(output)
            texts.append(("tool", output))
        elif kind == "function_call":
            texts.append(("assistant", f"{item.get('name')}({item.get('arguments')})"))
        else:
            texts.append((str(item.get("role", "user")), text_of(item.get("content"))))
    return _conversation(
        texts, results, body.get("tools") or [], ((body.get("text") or {}).get("format") or {}).get("type")
    )


def _conversation(texts: list[tuple[str, str]], results: list[str], tools: list[Any], fmt: Any) -> Conversation:
    """What either API's request says, once its messages are read: the tools
    offered (a chat tool nests its name under ``function``) and JSON mode."""
    names = tuple(str((t.get("function") or t).get("name", "")) for t in tools if isinstance(t, dict))
    return Conversation(
        texts=tuple(texts),
        tool_names=names,
        tool_results=tuple(results),
        json_mode=fmt in ("json_object", "json_schema"),
        tools_text=json.dumps(tools, sort_keys=True) if tools else "",
    )


def ident_of(prefix: str, *parts: object) -> str:
    return prefix + hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:20]


def chat_body(model: str, turn: Turn, ident: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_call:
        name, arguments = turn.tool_call
        message["tool_calls"] = [
            {"id": "call_" + ident[-16:], "type": "function", "function": {"name": name, "arguments": arguments}}
        ]
    return {
        "id": "chatcmpl-" + ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_sim",
        "choices": [{"index": 0, "message": message, "finish_reason": turn.finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": turn.prompt_tokens,
            "completion_tokens": turn.completion_tokens + turn.reasoning_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens + turn.reasoning_tokens,
            "prompt_tokens_details": {"cached_tokens": turn.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        },
    }


def responses_body(model: str, turn: Turn, ident: str, request: Mapping[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.tool_call:
        name, arguments = turn.tool_call
        output.append(
            {
                "type": "function_call",
                "id": "fc_" + ident,
                "call_id": "call_" + ident[-16:],
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    if turn.content is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_" + ident,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.content, "annotations": []}],
            }
        )
    incomplete = turn.finish_reason in ("length", "content_filter")
    return {
        "id": "resp_" + ident,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {
            "reason": "content_filter" if turn.finish_reason == "content_filter" else "max_output_tokens"
        }
        if incomplete
        else None,
        "error": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": {},
        "output": output,
        "parallel_tool_calls": True,
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": request.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": turn.prompt_tokens,
            "output_tokens": turn.completion_tokens + turn.reasoning_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens + turn.reasoning_tokens,
            "input_tokens_details": {"cached_tokens": turn.cached_tokens},
            "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        },
    }


_PAYLOAD_KEYS = ("choices", "output", "content", "candidates")


def empty_body(reply: Mapping[str, Any]) -> dict[str, Any]:
    """``reply`` (any shape) with nothing in it: ``"choices": []`` on chat,
    ``"output": []`` on Responses, ``"content": []`` on Anthropic,
    ``"candidates": []`` on Gemini; its usage (and so its cost) kept."""
    key = next((k for k in _PAYLOAD_KEYS if k in reply), None)
    return {**reply, key: []} if key else dict(reply)


def null_body(reply: Mapping[str, Any]) -> dict[str, Any]:
    """``reply`` that a client cannot read: ``"choices": null`` on chat, the
    payload's key left out on the other shapes; its usage (its cost) kept."""
    if "choices" in reply:
        return {**reply, "choices": None}
    key = next((k for k in _PAYLOAD_KEYS if k in reply), None)
    return {k: v for k, v in reply.items() if k != key}
