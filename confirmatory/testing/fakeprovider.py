"""The fake provider: the simulated provider's four API shapes, in this process, without HTTP.

``FakeProvider`` answers OpenAI chat completions, the Responses API,
Anthropic Messages and Gemini ``generateContent`` as the HTTP simulator
does (``confirmatory.sim.server.SimProvider``), from the same function
(``confirmatory.sim.answer.answer``: the shapes' pure functions, the
conversation policy and the fault plan), through no socket: litellm is given
a client on an ``httpx`` transport that calls it (``engine.llm.serve_in_process``),
so litellm builds every request and reads every reply exactly as it does
over HTTP, and a run's records are the HTTP simulator's (docs/LIBRARY.md).

    with FakeProvider(FaultPlan.from_table(table)) as fake:
        options = RunOptions(api_bases={m.name: fake.url for m in simulated_models})

A planned hang is a silence of its length; a client whose read timeout is
shorter gets ``httpx.ReadTimeout`` after that timeout, as a socket gives it.
"""

from __future__ import annotations

import itertools
import time

import httpcore
import httpx

from confirmatory.engine.llm import serve_in_process
from confirmatory.sim.answer import SimState, StateReadout, answer
from confirmatory.sim.behaviour import SIM_MODELS
from confirmatory.sim.faults import FaultPlan
from confirmatory.sim.server import ATTEMPT_HEADER

_numbers = itertools.count(1)


def _read_timeout(request: httpx.Request) -> None:
    """Raise what httpx raises when a socket's read times out: its
    ``ReadTimeout`` from httpcore's from the socket's ``TimeoutError``, so
    the recorded error's causes are the same."""
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError as exc:
            raise httpcore.ReadTimeout("timed out") from exc
    except httpcore.ReadTimeout as exc:
        raise httpx.ReadTimeout("timed out", request=request) from exc


class _Transport(httpx.BaseTransport):
    def __init__(self, state: SimState) -> None:
        self.state = state

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET":
            if path.rstrip("/").endswith("/_sim/invoice"):
                return httpx.Response(200, json=self.state.invoice.as_json())
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "confirmatory-sim"} for m in SIM_MODELS]
            return httpx.Response(200, json={"object": "list", "data": data})
        said = answer(self.state, path, request.read(), request.headers.get(ATTEMPT_HEADER, ""))
        if said.hang_s is not None:
            read = (request.extensions.get("timeout") or {}).get("read")
            if isinstance(read, (int, float)) and read < said.hang_s:
                time.sleep(read)
                _read_timeout(request)
            time.sleep(said.hang_s)
        headers = {"Content-Type": "application/json", **said.headers}
        return httpx.Response(said.status, headers=headers, content=said.payload, request=request)


class FakeProvider(StateReadout):
    """The simulated provider in this process: ``SimProvider``'s interface
    (``url``, ``root``, ``usage()``, ``invoice()``, ``faults_served()``,
    ``calls_of()``, a context manager), no server and no port.

    ``url`` looks like a loopback URL on port 0 (no server ever listens
    there): while the fake serves, litellm's calls to it are answered here;
    after ``stop()`` they fail to connect."""

    def __init__(self, plan: FaultPlan | None = None, seed: int | None = None) -> None:
        self.plan = plan or FaultPlan()
        self.seed = self.plan.seed if seed is None else int(seed)
        self._state = SimState(self.plan, self.seed)
        self._transport = _Transport(self._state)
        self._root = f"http://127.0.0.1:0/in-process-{next(_numbers)}"
        self._serving = False

    def start(self) -> FakeProvider:
        if not self._serving:
            serve_in_process(self.url, self._transport)
            self._serving = True
        return self

    def stop(self) -> None:
        """Stop answering; idempotent."""
        if self._serving:
            serve_in_process(self.url, self._transport, serving=False)
            self._serving = False

    @property
    def root(self) -> str:
        return self._root

    @property
    def url(self) -> str:
        """The API base to give litellm (a design's ``api_bases``)."""
        return self._root + "/v1"

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
