"""The in-process fake provider answers every call as the HTTP simulator does.

Each shape the runner speaks (OpenAI chat, Responses, Anthropic Messages,
Gemini), each fault the plan can serve, through ``confirmatory.engine.llm``
and the installed litellm: once to the simulator over loopback HTTP, once to
``confirmatory.testing.fakeprovider.FakeProvider`` in this process; the
replies (content, tool calls, finish, usage, cost, billing) and the raised
exceptions (class, status, what the record says of them) must be the same,
and so must the two invoices. A whole run's records through each are compared
in tests/testing/test_fakeprovider_run.py.
"""

from __future__ import annotations

import json
import socket

import pytest
from shapecalls import TOOLS, USER

from confirmatory.core.errors import describe_exception
from confirmatory.engine import llm
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider
from confirmatory.testing.fakeprovider import FakeProvider

KINDS = (
    "rate_limit",
    "server_error",
    "unavailable",
    "auth",
    "bad_request",
    "truncate",
    "safety",
    "blocked_prompt",
    "malformed",
    "null_choices",
    "empty_choices",
    "bad_answer",
    "hang",
)
SHAPES = {
    "chat": "openai/sim-reasoner",
    "responses": "openai/sim-careful",
    "anthropic": "anthropic/sim-claude",
    "gemini": "gemini/sim-gemini",
}
HANG_S = 0.6
TIMEOUT_S = 0.3
# The quick tier compares these; the full suite every kind of KINDS.
QUICK = ("none", "rate_limit", "malformed", "null_choices", "truncate", "blocked_prompt", "hang")


def plan() -> FaultPlan:
    return FaultPlan.from_table(
        {"seed": 5, "hang_s": HANG_S, "faults": [{"kind": k, "household": k, "call": 0} for k in KINDS]}
    )


@pytest.fixture(scope="module")
def providers():
    with SimProvider(plan()) as sim, FakeProvider(plan()) as fake:
        yield sim, fake


def specs(base: str) -> dict[str, llm.AdHocModel]:
    made = {
        shape: llm.AdHocModel(name=shape, litellm_model=model, api_base=base, timeout_s=TIMEOUT_S)
        for shape, model in SHAPES.items()
    }
    llm.prepare(list(made.values()), SIM_PRICES)
    return made


def outcome(spec: llm.AdHocModel, shape: str, attempt: str, turns: int = 2) -> list[object]:
    """A tool conversation of ``turns`` calls, each call's reply or exception as a comparable value."""
    headers = {"X-Confirmatory-Attempt": attempt}
    text = [{"type": "text", "text": USER, "cache_control": {"type": "ephemeral"}}] if shape == "anthropic" else USER
    messages: list[dict] = [{"role": "system", "content": "You are careful."}, {"role": "user", "content": text}]
    said: list[object] = []
    for turn in range(turns):
        try:
            if shape == "responses":
                tools = [t["function"] | {"type": "function"} for t in TOOLS]
                reply = llm.responses(spec, messages, tools=tools if turn == 0 else None, extra_headers=headers)
            else:
                reply = llm.chat(spec, messages, tools=TOOLS if turn == 0 else None, extra_headers=headers)
        except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
            described = describe_exception(exc)
            described.pop("message", None)  # names the API base, which differs
            said.append(("raised", type(exc).__name__, json.dumps(described, sort_keys=True, default=str)))
            continue
        said.append(
            (
                reply.content,
                [(c["name"], c["arguments"]) for c in reply.tool_calls],
                reply.finish_reason,
                reply.usage,
                reply.cost_nusd,
                reply.litellm_cost_usd,
                json.dumps(reply.billing, sort_keys=True),
            )
        )
        messages = [*messages, {"role": "user", "content": "Once more, please."}]
    return said


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "kind", [k if k in QUICK else pytest.param(k, marks=pytest.mark.slow) for k in ("none", *KINDS)]
)
def test_the_fake_answers_each_shape_and_fault_as_the_http_simulator(providers, shape, kind):
    """A fault is planned on an attempt's first call; a second call (a cache read) only without one."""
    sim, fake = providers
    attempt, turns = f"{kind}/{shape}/0", 2 if kind == "none" else 1
    over_http = outcome(specs(sim.url)[shape], shape, attempt, turns)
    in_process = outcome(specs(fake.url)[shape], shape, attempt, turns)
    assert in_process == over_http
    assert fake.calls_of(SHAPES[shape].split("/")[1], attempt) == sim.calls_of(SHAPES[shape].split("/")[1], attempt)


def test_the_fake_bills_as_the_simulator_and_serves_the_faults_it_plans(providers):
    sim, fake = providers
    for shape in SHAPES:
        for kind in ("none", "null_choices"):
            attempt = f"{kind}/bill-{shape}/0"
            outcome(specs(sim.url)[shape], shape, attempt)
            outcome(specs(fake.url)[shape], shape, attempt)
    assert fake.invoice() == sim.invoice()
    assert fake.usage() == sim.usage()
    assert fake.faults_served() == sim.faults_served()
    assert fake.faults_served()["null_choices"] > 0


def test_the_fake_opens_no_socket_and_a_stopped_fake_answers_nothing(monkeypatch):
    opened: list[object] = []
    real = socket.socket.connect

    def connect(self, address):  # a connection anywhere would be HTTP
        opened.append(address)
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    with FakeProvider() as fake:
        reply = llm.chat(specs(fake.url)["chat"], [{"role": "user", "content": USER}])
    assert reply.content and opened == []
    with pytest.raises(Exception, match="Connection error"):  # port 0: nothing listens there
        llm.chat(specs(fake.url)["chat"], [{"role": "user", "content": USER}])
    assert opened  # tried, and refused
