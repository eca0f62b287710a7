"""The simulated provider: an HTTP server on loopback speaking four API shapes.

Owns the wire: each POST is answered by ``answer.answer`` (which routes it to
its shape, applies the fault plan and keeps the counts and the invoice) and
sent as it says; a planned hang is a silence of its length first.

Standard library only (no litellm, no third-party imports): the runner starts
it in-process, and ``confirmatory sim-provider`` serves it on its own.
"""

from __future__ import annotations

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

from confirmatory.engine.llm import serve_as_simulator
from confirmatory.sim.answer import (
    CHAT_ONLY_PARAMS,
    MALFORMED_BODY,
    RETRY_AFTER_S,
    SimState,
    StateReadout,
    answer,
    error_payload,
    fault_error,
    reply_for,
    shape_of,
    too_long_message,
    usage_of,
)
from confirmatory.sim.behaviour import SIM_MODELS
from confirmatory.sim.faults import FaultPlan

__all__ = [
    "ATTEMPT_HEADER",
    "CHAT_ONLY_PARAMS",
    "MALFORMED_BODY",
    "RETRY_AFTER_S",
    "SimHTTPServer",
    "SimProvider",
    "error_payload",
    "fault_error",
    "plan_from_design",
    "reply_for",
    "serve_command",
    "shape_of",
    "too_long_message",
    "usage_of",
]

ATTEMPT_HEADER = "X-Confirmatory-Attempt"


class SimHTTPServer(ThreadingHTTPServer):
    # 16 concurrent lanes overflow the default backlog of 5 and see spurious
    # 1 s connect stalls (LITELLM.md).
    request_queue_size = 256
    daemon_threads = True  # a hanging handler must not keep the process alive
    allow_reuse_address = True

    def __init__(self, port: int, state: SimState) -> None:
        self.state = state
        super().__init__(("127.0.0.1", port), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        # Small JSON replies otherwise wait on Nagle + delayed ACK (~40 ms each).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr


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

    def _error(self, status: int, message: str, kind: str) -> None:
        self._json(status, error_payload("chat", status, message, kind))

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "confirmatory-sim"} for m in SIM_MODELS]
            self._json(200, {"object": "list", "data": data})
        elif path.endswith("/_sim/invoice"):
            self._json(200, self.server.state.invoice.as_json())
        else:
            self._error(404, f"no such endpoint: {self.path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        said = answer(self.server.state, self.path, raw, self.headers.get(ATTEMPT_HEADER, ""))
        if said.hang_s is not None:
            time.sleep(said.hang_s)
        self._send(said.status, said.payload, said.headers)


class SimProvider(StateReadout):
    """The simulated provider, served from a background thread.

    ``with SimProvider(plan, seed) as sim: llm.chat(..., api_base=sim.url)``.
    """

    def __init__(self, plan: FaultPlan | None = None, seed: int | None = None, *, port: int = 0) -> None:
        self.plan = plan or FaultPlan()
        self.seed = self.plan.seed if seed is None else int(seed)
        self._state = SimState(self.plan, self.seed)
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

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT``: the server without the ``/v1`` prefix."""
        return f"http://127.0.0.1:{self.port}"

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
            print(
                f"models: {', '.join(SIM_MODELS)}; {len(plan.faults)} fault(s) planned; Ctrl-C stops", file=sys.stderr
            )
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
