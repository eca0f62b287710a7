"""The simulated provider: an OpenAI-compatible HTTP server on loopback.

Owns the wire: it parses chat-completions and Responses requests into a
``Conversation``, counts calls per (model, attempt key), applies the fault
plan, gives the policy's ``Turn`` (behaviour.py) the API shape asked for, and
keeps per-model token totals so tests can check spend against them.

Standard library only (no litellm, no third-party imports): the runner starts
it in-process, and ``confirmatory sim-provider`` serves it on its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import signal
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from confirmatory.core.simulated import SIM_MAX_INPUT_TOKENS, SIM_MAX_OUTPUT_TOKENS
from confirmatory.engine.llm import serve_as_simulator
from confirmatory.sim.behaviour import (
    SIM_MODELS,
    Conversation,
    Turn,
    decide,
    text_of,
    truncated,
    unparseable,
)
from confirmatory.sim.faults import ERROR_TEXT, STATUS_OF, FaultKind, FaultPlan

ATTEMPT_HEADER = "X-Confirmatory-Attempt"
RETRY_AFTER_S = "1"
MALFORMED_BODY = b'{"id": "chatcmpl-sim", "choices": [ this is not json'
# Chat-completions parameters the Responses API does not take; the real one
# answers a request carrying one with 400 "Unknown parameter".
CHAT_ONLY_PARAMS = frozenset({"seed"})


class _State:
    """Everything the handler threads share, behind one lock."""

    def __init__(self, plan: FaultPlan, seed: int) -> None:
        self.plan = plan
        self.seed = seed
        self.lock = threading.Lock()
        self.calls: dict[tuple[str, str], int] = {}
        self.seen: set[tuple[str, str, str]] = set()
        self.usage: dict[str, dict[str, int]] = {}
        self.faults_served: dict[str, int] = {}

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

    def count(self, model: str, turn: Turn) -> None:
        with self.lock:
            totals = self.usage.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0})
            totals["prompt_tokens"] += turn.prompt_tokens
            totals["completion_tokens"] += turn.completion_tokens
            totals["calls"] += 1

    def count_fault(self, kind: FaultKind) -> None:
        with self.lock:
            self.faults_served[kind.value] = self.faults_served.get(kind.value, 0) + 1


class SimHTTPServer(ThreadingHTTPServer):
    # 16 concurrent lanes overflow the default backlog of 5 and see spurious
    # 1 s connect stalls (LITELLM.md).
    request_queue_size = 256
    daemon_threads = True  # a hanging handler must not keep the process alive
    allow_reuse_address = True

    def __init__(self, port: int, state: _State) -> None:
        self.state = state
        super().__init__(("127.0.0.1", port), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        # Small JSON replies otherwise wait on Nagle + delayed ACK (~40 ms each).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr


def _chat_conversation(body: Mapping[str, Any]) -> Conversation:
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


def _responses_conversation(body: Mapping[str, Any]) -> Conversation:
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
    return _conversation(texts, results, body.get("tools") or [],
                         ((body.get("text") or {}).get("format") or {}).get("type"))


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


def _ident(prefix: str, *parts: object) -> str:
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
            "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens,
        },
    }


def responses_body(model: str, turn: Turn, ident: str, request: Mapping[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.tool_call:
        name, arguments = turn.tool_call
        output.append({"type": "function_call", "id": "fc_" + ident, "call_id": "call_" + ident[-16:],
                       "name": name, "arguments": arguments, "status": "completed"})
    if turn.content is not None:
        output.append({"type": "message", "id": "msg_" + ident, "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": turn.content, "annotations": []}]})
    incomplete = turn.finish_reason == "length"
    return {
        "id": "resp_" + ident,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
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
            "output_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def empty_body(reply: Mapping[str, Any]) -> dict[str, Any]:
    """``reply`` (either API shape) with nothing in it: ``"choices": []`` on
    chat, ``"output": []`` on Responses; its usage (and so its cost) kept."""
    key = "choices" if "choices" in reply else "output"
    return {**reply, key: []}


def null_body(reply: Mapping[str, Any]) -> dict[str, Any]:
    """``reply`` (either API shape) that litellm cannot read: ``"choices": null``
    on chat, no ``"output"`` at all on Responses; its usage (its cost) kept."""
    if "choices" in reply:
        return {**reply, "choices": None}
    return {k: v for k, v in reply.items() if k != "output"}


class _Handler(BaseHTTPRequestHandler):
    # Keep-alive: litellm's httpx client reuses connections, saving a connect per call.
    protocol_version = "HTTP/1.1"
    timeout = 120  # an idle kept-alive connection frees its thread eventually
    server: SimHTTPServer
    server_version = "confirmatory-sim/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # a line per request would drown the runner's own output

    def _send(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up first (a hang past its timeout): nothing to tell it.
            self.close_connection = True

    def _json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status: int, message: str, kind: str, headers: Mapping[str, str] | None = None) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": kind}}, headers)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "confirmatory-sim"} for m in SIM_MODELS]
            self._json(200, {"object": "list", "data": data})
        else:
            self._error(404, f"no such endpoint: {self.path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/responses"):
            self._error(404, f"no such endpoint: {self.path}", "not_found")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "request body is not JSON", "invalid_request_error")
            return
        model = str(body.get("model", ""))
        if model not in SIM_MODELS:
            self._error(404, f"The model `{model}` does not exist", "model_not_found")
            return
        unknown = sorted(set(body) & CHAT_ONLY_PARAMS) if path.endswith("/responses") else []
        if unknown:  # as the real Responses API: it takes no seed, and says so
            self._error(400, f"Unknown parameter: '{unknown[0]}'.", "invalid_request_error")
            return
        self._complete(path, model, body)

    def _complete(self, path: str, model: str, body: Mapping[str, Any]) -> None:
        state = self.server.state
        attempt = self.headers.get(ATTEMPT_HEADER, "")
        is_chat = path.endswith("/chat/completions")
        conv = _chat_conversation(body) if is_chat else _responses_conversation(body)
        # max_tokens is left out: the escalation after a truncation re-sends the
        # same conversation with a larger limit, and must count as a retry.
        if conv.prompt_tokens() > SIM_MAX_INPUT_TOKENS:  # as a provider's context window
            self._error(400, f"the prompt has {conv.prompt_tokens()} tokens, more than the "
                        f"{SIM_MAX_INPUT_TOKENS} this model accepts", "context_length_exceeded")
            return
        digest = hashlib.sha256(json.dumps(conv.texts).encode()).hexdigest()
        call, first_try = state.next_call(model, attempt, digest)

        fault = state.plan.fault_for(model, attempt, call, seed=state.seed)
        if fault is not None:
            state.count_fault(fault.kind)
            if fault.kind in STATUS_OF:
                status = STATUS_OF[fault.kind]
                headers = {"Retry-After": RETRY_AFTER_S} if fault.kind is FaultKind.RATE_LIMIT else None
                message, code = ERROR_TEXT.get(fault.kind, (f"simulated {fault.kind.value}", fault.kind.value))
                self._error(status, message, code, headers)
                return
            if fault.kind is FaultKind.HANG:
                time.sleep(state.plan.hang_seconds(fault))
                # Reached only by a client that waited longer than the hang.
                self._error(504, "simulated hang", "timeout")
                return
            if fault.kind is FaultKind.MALFORMED:
                self._send(200, MALFORMED_BODY)
                return

        turn = decide(conv, model=model, seed=state.seed, attempt=attempt, call=call, first_try=first_try)
        full_text = turn.content if turn.content is not None else (turn.tool_call[1] if turn.tool_call else "")
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
        # the model's own output limit: a request may ask for less, never more
        limit = min(limit, SIM_MAX_OUTPUT_TOKENS) if isinstance(limit, int) else SIM_MAX_OUTPUT_TOKENS
        if fault is not None and fault.kind is FaultKind.TRUNCATE:
            turn = truncated(full_text, turn.prompt_tokens)
        elif fault is not None and fault.kind is FaultKind.BAD_ANSWER:
            turn = unparseable(turn.prompt_tokens)
        elif isinstance(limit, int) and turn.finish_reason != "length" and turn.completion_tokens > limit:
            turn = truncated(full_text, turn.prompt_tokens)  # the request's own limit was too small
        if turn.completion_tokens > limit:  # never billed past the limit, as a provider's
            turn = dataclasses.replace(turn, completion_tokens=limit, finish_reason="length")

        ident = _ident("sim", state.seed, model, attempt, call)
        state.count(model, turn)
        reply = chat_body(model, turn, ident) if is_chat else responses_body(model, turn, ident, body)
        if fault is not None and fault.kind is FaultKind.EMPTY_CHOICES:
            # The model's turn was generated and billed, but the reply (as a
            # gateway may send it) holds none of it.
            reply = empty_body(reply)
        elif fault is not None and fault.kind is FaultKind.NULL_CHOICES:
            reply = null_body(reply)
        self._json(200, reply)


class SimProvider:
    """The simulated provider, served from a background thread.

    ``with SimProvider(plan, seed) as sim: llm.chat(..., api_base=sim.url)``.
    """

    def __init__(self, plan: FaultPlan | None = None, seed: int | None = None, *, port: int = 0) -> None:
        self.plan = plan or FaultPlan()
        self.seed = self.plan.seed if seed is None else int(seed)
        self._state = _State(self.plan, self.seed)
        self._port = port
        self._server: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> SimProvider:
        if self._server is not None:
            return self
        self._server = SimHTTPServer(self._port, self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="sim-provider", daemon=True
        )
        self._thread.start()
        # Calls to it carry the placeholder key, never one of the environment's.
        serve_as_simulator(self.url)
        return self

    def stop(self) -> None:
        """Stop serving; idempotent. A handler still sleeping in a hang is a daemon and is left to end."""
        if self._server is None:
            return
        serve_as_simulator(self.url, serving=False)
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulated provider is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The API base to give litellm: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def usage(self) -> dict[str, dict[str, int]]:
        """Per served model: prompt_tokens, completion_tokens and calls billed
        (answered with a completion, or with an ``empty_choices`` or ``null_choices`` reply)."""
        with self._state.lock:
            return {m: dict(t) for m, t in self._state.usage.items()}

    def faults_served(self) -> dict[str, int]:
        with self._state.lock:
            return dict(self._state.faults_served)

    def calls_of(self, model: str, attempt: str) -> int:
        """How many requests this attempt has sent to ``model`` so far."""
        with self._state.lock:
            return self._state.calls.get((model, attempt), 0)

    def __enter__(self) -> SimProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def plan_from_design(design: Path) -> FaultPlan:
    """The fault plan of a design file's ``[simulator]`` table (empty when absent)."""
    with design.open("rb") as fh:
        table = tomllib.load(fh).get("simulator")
    if table is not None and not isinstance(table, dict):
        raise ValueError(f"simulator: {table!r} is not a table ([simulator])")
    return FaultPlan.from_table(table)


def serve_command(port: int = 0, design: Path | None = None) -> int:
    """``confirmatory sim-provider``: serve until Ctrl-C; print the API base first.

    A design it cannot use (unreadable, not TOML, a wrong ``[simulator]``
    table) is one line naming the file and what is wrong, exit status 3."""
    try:
        plan = plan_from_design(design) if design is not None else FaultPlan()
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        why = f"cannot be read: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        what = "not valid TOML: " if isinstance(exc, tomllib.TOMLDecodeError) else ""
        print(f"sim-provider: {design}: {what}{why}", file=sys.stderr)
        return 3
    # Ctrl-C and SIGTERM stop it, also when it was started with SIGINT
    # ignored (a shell's background job): Python then keeps SIG_IGN and no
    # KeyboardInterrupt would ever come.
    def stop_serving(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, stop_serving) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            sim = SimProvider(plan, port=port).start()
        except (OSError, OverflowError) as exc:
            # A port in use (or not ours to take), or out of range (the CLI
            # refuses that first, as a usage error): one line, the status of
            # the design's problems above.
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            print(f"sim-provider: cannot listen on 127.0.0.1 port {port}: {why}", file=sys.stderr)
            return 3
        try:
            print(sim.url, flush=True)
            print(f"models: {', '.join(SIM_MODELS)}; {len(plan.faults)} fault(s) planned; Ctrl-C stops",
                  file=sys.stderr)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            sim.stop()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 0
