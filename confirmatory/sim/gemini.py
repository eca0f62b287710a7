"""The Gemini shape of the simulator: ``POST .../models/<model>:generateContent``.

Pure functions, request dict -> ``Conversation`` and ``Turn`` -> reply or
error dict, so an in-process fake can reuse them. Bodies follow the Gemini
API reference (``GenerateContentResponse``; the error model of Google
APIs): ``candidates[].content.parts`` with ``text`` or ``functionCall``,
``finishReason`` ``STOP`` / ``MAX_TOKENS`` / ``SAFETY``,
``promptFeedback.blockReason`` for a blocked prompt, ``usageMetadata``
``promptTokenCount`` (cached included), ``cachedContentTokenCount``,
``candidatesTokenCount`` (thoughts excluded), ``thoughtsTokenCount``,
``totalTokenCount``; errors ``{"error": {"code", "message", "status"}}``.
A request may spell its fields in camelCase or snake_case, as the API's
JSON mapping accepts (litellm sends ``function_call``, ``generationConfig``
with ``max_output_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confirmatory.sim.behaviour import Conversation, Turn
from confirmatory.sim.faults import FaultKind

# The canonical status name of each HTTP status Gemini documents.
STATUS_NAME = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

FAULT_STATUS: dict[FaultKind, int] = {
    FaultKind.RATE_LIMIT: 429,
    FaultKind.SERVER_ERROR: 500,
    FaultKind.BAD_GATEWAY: 502,
    FaultKind.UNAVAILABLE: 503,
    FaultKind.OVERLOADED: 503,
    FaultKind.AUTH: 400,  # Gemini answers a bad key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID
    FaultKind.QUOTA: 429,
    FaultKind.CREDIT: 429,
    FaultKind.BAD_REQUEST: 400,
}

FAULT_MESSAGE: dict[FaultKind, str] = {
    FaultKind.RATE_LIMIT: "You exceeded your current quota, please check your plan and billing details. "
    "For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n"
    "* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, "
    "limit: 10, model: sim-gemini\nPlease retry in 1s.",
    FaultKind.SERVER_ERROR: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    FaultKind.UNAVAILABLE: "The service is currently unavailable.",
    FaultKind.OVERLOADED: "The model is overloaded. Please try again later.",
    FaultKind.AUTH: "API key not valid. Please pass a valid API key.",
    FaultKind.QUOTA: "You exceeded your current quota, please check your plan and billing details.\n"
    "* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, "
    "limit: 250, model: sim-gemini",
    FaultKind.CREDIT: "You exceeded your current quota, please check your plan and billing details.",
    FaultKind.BAD_REQUEST: 'Invalid JSON payload received. Unknown name "simulated": Cannot find field.',
}


def error_body(status: int, message: str, kind: FaultKind | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS_NAME.get(status, "UNKNOWN")}
    if kind is FaultKind.AUTH:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
            }
        ]
    elif kind in (FaultKind.RATE_LIMIT, FaultKind.QUOTA, FaultKind.CREDIT):
        # A per-minute rate limit and a used-up daily quota say the same
        # words; the QuotaFailure's quotaId tells them apart.
        period = "PerMinute" if kind is FaultKind.RATE_LIMIT else "PerDay"
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                        "quotaId": f"GenerateRequests{period}PerProjectPerModel-FreeTier",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"},
        ]
    return {"error": error}


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _part_text(part: Any) -> tuple[str, str | None]:
    """(text of a part, the function result it carries or None)."""
    if not isinstance(part, Mapping):
        return str(part), None
    if part.get("text") is not None:
        return str(part["text"]), None
    call = _get(part, "functionCall", "function_call")
    if isinstance(call, Mapping):
        return json.dumps({"name": call.get("name"), "args": call.get("args")}, sort_keys=True), None
    response = _get(part, "functionResponse", "function_response")
    if isinstance(response, Mapping):
        result = response.get("response")
        text = json.dumps(result, sort_keys=True) if not isinstance(result, str) else result
        return text, text
    return "", None


def _parts_text(content: Any) -> tuple[str, list[str]]:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    texts, results = [], []
    for part in parts or []:
        text, result = _part_text(part)
        texts.append(text)
        if result is not None:
            results.append(result)
    return "".join(texts), results


def conversation(body: Mapping[str, Any]) -> Conversation:
    texts: list[tuple[str, str]] = []
    results: list[str] = []
    system = _get(body, "systemInstruction", "system_instruction")
    if system:
        texts.append(("system", _parts_text(system)[0]))
    for content in body.get("contents") or []:
        text, found = _parts_text(content)
        role = "assistant" if content.get("role") == "model" else "user"
        if found:
            results.extend(found)
            role = "tool"
        texts.append((role, text))
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    declarations = [d for t in tools for d in (_get(t, "functionDeclarations", "function_declarations") or [])]
    config = _get(body, "generationConfig", "generation_config") or {}
    mime = _get(config, "responseMimeType", "response_mime_type")
    return Conversation(
        texts=tuple(texts),
        tool_names=tuple(str(d.get("name", "")) for d in declarations if isinstance(d, Mapping)),
        tool_results=tuple(results),
        json_mode=mime == "application/json",
        tools_text=json.dumps(tools, sort_keys=True) if tools else "",
    )


def max_tokens(body: Mapping[str, Any]) -> int | None:
    config = _get(body, "generationConfig", "generation_config") or {}
    value = _get(config, "maxOutputTokens", "max_output_tokens")
    return value if isinstance(value, int) else None


def usage(turn: Turn) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "promptTokenCount": turn.prompt_tokens,
        "candidatesTokenCount": turn.completion_tokens,
        "totalTokenCount": turn.prompt_tokens + turn.completion_tokens + turn.reasoning_tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": turn.prompt_tokens}],
    }
    if turn.cached_tokens:
        meta["cachedContentTokenCount"] = turn.cached_tokens
    if turn.reasoning_tokens:
        meta["thoughtsTokenCount"] = turn.reasoning_tokens
    return meta


_SAFETY_RATINGS = [
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True},
    {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"},
]


def reply_body(model: str, turn: Turn, ident: str) -> dict[str, Any]:
    """A ``generateContent`` reply for ``turn``."""
    parts: list[dict[str, Any]] = []
    if turn.content:
        parts.append({"text": turn.content})
    if turn.tool_call:
        name, arguments = turn.tool_call
        parts.append({"functionCall": {"name": name, "args": json.loads(arguments)}})
    finish = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}.get(turn.finish_reason, "STOP")
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}
    if finish == "SAFETY":
        candidate["safetyRatings"] = _SAFETY_RATINGS
        candidate.pop("content")
    return {"candidates": [candidate], "usageMetadata": usage(turn), "modelVersion": model, "responseId": ident}


def blocked_body(model: str, turn: Turn, ident: str) -> dict[str, Any]:
    """A prompt blocked before any candidate: ``promptFeedback.blockReason``,
    the prompt's tokens in the usage."""
    return {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": _SAFETY_RATINGS},
        "usageMetadata": {"promptTokenCount": turn.prompt_tokens, "totalTokenCount": turn.prompt_tokens},
        "modelVersion": model,
        "responseId": ident,
    }
