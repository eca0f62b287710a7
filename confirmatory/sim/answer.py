"""The simulator's answer to one request, without the wire.

``answer(state, path, raw, attempt)`` takes a POST's path, its body's bytes
and its attempt key, and gives the status, body and headers the simulated
provider sends: it routes the request to its shape (OpenAI chat completions
and Responses, openai.py; Anthropic Messages, anthropic.py; Gemini,
gemini.py), which parses it into a ``Conversation``; it counts calls per
(model, attempt key), applies the fault plan, gives the policy's ``Turn``
(behaviour.py) its cache reads and writes and the shape asked for, and keeps
per-model token totals and the vendors' invoice (billing.py) in a
``SimState``. The HTTP server (server.py) and the in-process fake provider
(``confirmatory.testing.fakeprovider``) both send what it answers, so a
request is answered alike by either.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confirmatory.core.simulated import SIM_MAX_INPUT_TOKENS, SIM_MAX_OUTPUT_TOKENS
from confirmatory.sim import anthropic, gemini
from confirmatory.sim.behaviour import (
    SIM_MODELS,
    Conversation,
    Turn,
    decide,
    refused,
    thinking,
    truncated,
    unparseable,
)
from confirmatory.sim.billing import Invoice, PrefixCache
from confirmatory.sim.faults import ERROR_TEXT, STATUS_OF, FaultKind, FaultPlan
from confirmatory.sim.openai import (
    chat_body,
    chat_conversation,
    empty_body,
    ident_of,
    null_body,
    responses_body,
    responses_conversation,
)

RETRY_AFTER_S = "1"
MALFORMED_BODY = b'{"id": "chatcmpl-sim", "choices": [ this is not json'
# Chat-completions parameters the Responses API does not take; the real one
# answers a request carrying one with 400 "Unknown parameter".
CHAT_ONLY_PARAMS = frozenset({"seed"})


class SimState:
    """Everything the handler threads share, behind one lock."""

    def __init__(self, plan: FaultPlan, seed: int) -> None:
        self.plan = plan
        self.seed = seed
        self.lock = threading.Lock()
        self.calls: dict[tuple[str, str], int] = {}
        self.seen: set[tuple[str, str, str]] = set()
        self.usage: dict[str, dict[str, int]] = {}
        self.faults_served: dict[str, int] = {}
        self.invoice = Invoice()
        self.cache = PrefixCache()

    def next_call(self, model: str, attempt: str, request_digest: str) -> tuple[int, bool]:
        """The call index of this request within its attempt, and whether the
        attempt has sent this exact request before (an escalation re-sends it)."""
        with self.lock:
            index = self.calls.get((model, attempt), 0)
            self.calls[(model, attempt)] = index + 1
            key = (model, attempt, request_digest)
            first_try = key not in self.seen
            self.seen.add(key)
            return index, first_try

    def cache_turn(
        self, shape: str, model: str, attempt: str, conv: Conversation, breakpoints: list[int], turn: Turn
    ) -> Turn:
        """``turn`` with its prompt's cache reads (and, on Anthropic, writes)."""
        segments, sizes = conv.segments()
        if shape == "anthropic":
            read, written = self.cache.explicit(model, attempt, segments, sizes, breakpoints)
        else:
            read, written = self.cache.implicit(model, attempt, segments, sizes), 0
        return dataclasses.replace(turn, cached_tokens=read, cache_write_tokens=written)

    def count(self, model: str, shape: str, turn: Turn, usage: Mapping[str, Any]) -> None:
        """Count a billed reply: the totals, and the invoice from the usage as sent."""
        self.invoice.add(model, shape, usage)
        with self.lock:
            totals = self.usage.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0})
            totals["prompt_tokens"] += turn.prompt_tokens
            totals["completion_tokens"] += turn.completion_tokens + turn.reasoning_tokens
            totals["calls"] += 1

    def count_fault(self, kind: FaultKind) -> None:
        with self.lock:
            self.faults_served[kind.value] = self.faults_served.get(kind.value, 0) + 1


_GEMINI_PATH = re.compile(r"/models/([^/:]+):generateContent$")


def shape_of(path: str) -> tuple[str | None, str | None]:
    """The API shape a POST path asks for, and the model a Gemini path names.

    Paths are matched by their end, under any prefix: litellm posts
    Anthropic calls to ``{api_base}/v1/messages`` (so ``.../v1/v1/messages``
    when given the simulator's ``.../v1`` URL) and Gemini calls to
    ``{api_base}/models/<model>:generateContent``."""
    if path.endswith("/chat/completions"):
        return "chat", None
    if path.endswith("/responses"):
        return "responses", None
    if path.endswith("/messages"):
        return "anthropic", None
    match = _GEMINI_PATH.search(path)
    if match:
        return "gemini", match.group(1)
    return None, None


def error_payload(shape: str, status: int, message: str, code: str, kind: FaultKind | None = None) -> dict[str, Any]:
    """An error body as the API of ``shape`` writes it."""
    if shape == "anthropic":
        return anthropic.error_body(status, message)
    if shape == "gemini":
        return gemini.error_body(status, message, kind)
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


def fault_error(shape: str, kind: FaultKind) -> tuple[int, str, str] | None:
    """(status, message, code) of a fault that answers with an error status on ``shape``, or None."""
    if shape == "anthropic":
        table, messages = anthropic.FAULT_STATUS, anthropic.FAULT_MESSAGE
    elif shape == "gemini":
        table, messages = gemini.FAULT_STATUS, gemini.FAULT_MESSAGE
    else:
        table, messages = STATUS_OF, {}
    if kind not in table:
        return None
    message, code = ERROR_TEXT.get(kind, (f"simulated {kind.value}", kind.value))
    return table[kind], messages.get(kind, message), code


def too_long_message(shape: str, tokens: int) -> str:
    if shape == "anthropic":
        return f"prompt is too long: {tokens} tokens > {SIM_MAX_INPUT_TOKENS} maximum"
    if shape == "gemini":
        return (
            f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({SIM_MAX_INPUT_TOKENS})."
        )
    return f"the prompt has {tokens} tokens, more than the {SIM_MAX_INPUT_TOKENS} this model accepts"


def reply_for(shape: str, model: str, turn: Turn, ident: str, request: Mapping[str, Any]) -> dict[str, Any]:
    if shape == "chat":
        return chat_body(model, turn, ident)
    if shape == "responses":
        return responses_body(model, turn, ident, request)
    if shape == "anthropic":
        return anthropic.reply_body(model, turn, ident)
    return gemini.reply_body(model, turn, ident)


class StateReadout:
    """What a provider over a ``SimState`` tells its caller: the simulated
    provider on HTTP and the in-process fake read the same counts."""

    _state: SimState

    def usage(self) -> dict[str, dict[str, int]]:
        """Per served model: prompt_tokens (cached included), completion_tokens
        (reasoning included) and calls billed (answered with a completion, or
        with an ``empty_choices`` or ``null_choices`` reply), whatever the shape."""
        with self._state.lock:
            return {m: dict(t) for m, t in self._state.usage.items()}

    def invoice(self) -> dict[str, dict[str, Any]]:
        """The vendors' bill so far, as ``GET /_sim/invoice`` serves it:
        ``{model: {"calls": n, "tokens": {kind: n}, "nusd": n}}``."""
        return self._state.invoice.as_json()

    def faults_served(self) -> dict[str, int]:
        with self._state.lock:
            return dict(self._state.faults_served)

    def calls_of(self, model: str, attempt: str) -> int:
        """How many requests this attempt has sent to ``model`` so far."""
        with self._state.lock:
            return self._state.calls.get((model, attempt), 0)


def usage_of(shape: str, reply: Mapping[str, Any]) -> Mapping[str, Any]:
    usage = reply.get("usageMetadata" if shape == "gemini" else "usage")
    return usage if isinstance(usage, Mapping) else {}


@dataclass(frozen=True)
class Answer:
    """What the simulated provider sends for one request: ``status``, the
    body's bytes, its headers. ``hang_s`` is set for a planned hang: the
    provider says nothing for that long, then answers (this 504) a client
    that waited longer."""

    status: int
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    hang_s: float | None = None


def _json(status: int, obj: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, json.dumps(obj).encode(), dict(headers or {}))


def _error(
    status: int,
    message: str,
    kind: str,
    headers: Mapping[str, str] | None = None,
    *,
    shape: str = "chat",
    fault: FaultKind | None = None,
) -> Answer:
    return _json(status, error_payload(shape, status, message, kind, fault), headers)


def answer(state: SimState, path: str, raw: bytes, attempt: str) -> Answer:
    """The answer to ``POST path`` with body ``raw`` from
    attempt ``attempt`` (its ``X-Confirmatory-Attempt``; "" without one)."""
    shape, path_model = shape_of(path.split("?", 1)[0].rstrip("/"))
    if shape is None:
        return _error(404, f"no such endpoint: {path}", "not_found")
    try:
        body = json.loads(raw)
    except ValueError:
        return _error(400, "request body is not JSON", "invalid_request_error", shape=shape)
    model = path_model if path_model is not None else str(body.get("model", ""))
    if model not in SIM_MODELS:
        return _error(404, f"The model `{model}` does not exist", "model_not_found", shape=shape)
    unknown = sorted(set(body) & CHAT_ONLY_PARAMS) if shape == "responses" else []
    if unknown:  # as the real Responses API: it takes no seed, and says so
        return _error(400, f"Unknown parameter: '{unknown[0]}'.", "invalid_request_error")
    return _complete(state, shape, model, body, attempt)


def _complete(state: SimState, shape: str, model: str, body: Mapping[str, Any], attempt: str) -> Answer:
    breakpoints: list[int] = []
    if shape == "chat":
        conv = chat_conversation(body)
    elif shape == "responses":
        conv = responses_conversation(body)
    elif shape == "anthropic":
        conv, breakpoints = anthropic.conversation(body)
    else:
        conv = gemini.conversation(body)
    # max_tokens is left out: the escalation after a truncation re-sends the
    # same conversation with a larger limit, and must count as a retry.
    if conv.prompt_tokens() > SIM_MAX_INPUT_TOKENS:  # as a provider's context window
        message = too_long_message(shape, conv.prompt_tokens())
        return _error(400, message, "context_length_exceeded", shape=shape)
    digest = hashlib.sha256(json.dumps(conv.texts).encode()).hexdigest()
    call, first_try = state.next_call(model, attempt, digest)

    fault = state.plan.fault_for(model, attempt, call, seed=state.seed)
    if fault is not None:
        state.count_fault(fault.kind)
        refusal = fault_error(shape, fault.kind)
        if refusal is not None:
            status, message, code = refusal
            limited = fault.kind is FaultKind.RATE_LIMIT and shape != "gemini"  # Gemini puts it in the body
            headers = {"Retry-After": RETRY_AFTER_S} if limited else None
            return _error(status, message, code, headers, shape=shape, fault=fault.kind)
        if fault.kind is FaultKind.HANG:
            # Answered only to a client that waited longer than the hang.
            hang = _error(504, "simulated hang", "timeout", shape=shape)
            return dataclasses.replace(hang, hang_s=state.plan.hang_seconds(fault))
        if fault.kind is FaultKind.MALFORMED:
            return Answer(200, MALFORMED_BODY)

    turn = decide(conv, model=model, seed=state.seed, attempt=attempt, call=call, first_try=first_try)
    full_text = turn.content if turn.content is not None else (turn.tool_call[1] if turn.tool_call else "")
    if shape == "anthropic":
        limit: Any = anthropic.max_tokens(body)
    elif shape == "gemini":
        limit = gemini.max_tokens(body)
    else:
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
    # the model's own output limit: a request may ask for less, never more
    limit = min(limit, SIM_MAX_OUTPUT_TOKENS) if isinstance(limit, int) else SIM_MAX_OUTPUT_TOKENS
    kind = fault.kind if fault is not None else None
    if kind is FaultKind.TRUNCATE:
        turn = truncated(full_text, turn.prompt_tokens)
    elif kind is FaultKind.BAD_ANSWER:
        turn = unparseable(turn.prompt_tokens)
    elif kind in (FaultKind.SAFETY, FaultKind.BLOCKED_PROMPT):
        turn = refused(turn.prompt_tokens)
    elif isinstance(limit, int) and turn.finish_reason != "length" and turn.completion_tokens > limit:
        turn = truncated(full_text, turn.prompt_tokens)  # the request's own limit was too small
    if turn.completion_tokens > limit:  # never billed past the limit, as a provider's
        turn = dataclasses.replace(turn, completion_tokens=limit, finish_reason="length")
    blocked = kind is FaultKind.BLOCKED_PROMPT and shape == "gemini"
    if not blocked:  # a thinking model thinks on every shape (docs/SIMULATOR.md)
        turn = thinking(turn, model)
    turn = state.cache_turn(shape, model, attempt, conv, breakpoints, turn)

    ident = ident_of("sim", state.seed, model, attempt, call)
    if blocked:
        reply = gemini.blocked_body(model, turn, ident)
    else:
        reply = reply_for(shape, model, turn, ident, body)
    state.count(model, shape, turn, usage_of(shape, reply))
    if kind is FaultKind.EMPTY_CHOICES:
        # The model's turn was generated and billed, but the reply (as a
        # gateway may send it) holds none of it.
        reply = empty_body(reply)
    elif kind is FaultKind.NULL_CHOICES:
        reply = null_body(reply)
    return _json(200, reply)
