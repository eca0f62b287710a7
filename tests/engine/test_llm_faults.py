"""Each simulated fault, as litellm raises it and as the rules classify it.

Real HTTP to the simulated provider on loopback; the record's error is built
with ``describe_exception`` and classified by ``confirmatory.core.rules``, exactly
as a lane would. A change of litellm version that moves an exception to
another class fails here first (LITELLM.md).
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from confirmatory.core.errors import describe_exception
from confirmatory.core.money import to_nusd
from confirmatory.engine import llm
from confirmatory.engine.spend import AttemptSpend, Spend
from confirmatory.runtime.clock import Clock
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider

rules = pytest.importorskip("confirmatory.core.rules")

USER = 'Household:\n{"adults": [{"employment_income": 24000}]}\nWhat is its annual net income?'
KINDS = (
    "rate_limit",
    "server_error",
    "bad_gateway",
    "unavailable",
    "hang",
    "truncate",
    "malformed",
    "bad_answer",
    "auth",
    "quota",
    "credit",
    "empty_choices",
    "null_choices",
)
HANG_S = 1.5
CLIENT_TIMEOUT_S = 0.4


def model_spec(name: str, litellm_model: str, api_base: str | None) -> llm.AdHocModel:
    return llm.AdHocModel(
        name=name,
        litellm_model=litellm_model,
        api_base=api_base,
        timeout_s=CLIENT_TIMEOUT_S,
        params={"temperature": 0.0},
    )


@pytest.fixture(scope="module")
def sim():
    # One fault per kind, each selected by a household named after it.
    plan = FaultPlan.from_table(
        {"seed": 3, "hang_s": HANG_S, "faults": [{"kind": kind, "household": kind} for kind in KINDS]}
    )
    with SimProvider(plan) as provider:
        yield provider


@pytest.fixture(scope="module")
def careful(sim):
    spec = model_spec(name="careful", litellm_model="openai/sim-careful", api_base=sim.url)
    llm.prepare([spec], SIM_PRICES)
    return spec


def call_chat(spec: llm.AdHocModel, household: str) -> llm.Reply:
    return llm.chat(
        spec, [{"role": "user", "content": USER}], extra_headers={"X-Confirmatory-Attempt": f"{household}/alone/0"}
    )


def call_responses(spec: llm.AdHocModel, household: str) -> llm.Reply:
    return llm.responses(
        spec, [{"role": "user", "content": USER}], extra_headers={"X-Confirmatory-Attempt": f"{household}/alone/0"}
    )


def failure_class(exc: BaseException) -> str:
    record = {"status": "error", "error": describe_exception(exc), "calls": []}
    return rules.classify(record, [], precedence=rules.DEFAULT_PRECEDENCE, class_lists=rules.CLASS_LISTS)


def litellm_error(name: str) -> type[BaseException]:
    return getattr(llm._lib(), name)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("rate_limit", "RateLimitError"),
        ("server_error", "InternalServerError"),
        ("bad_gateway", "BadGatewayError"),
        ("unavailable", "ServiceUnavailableError"),
        ("malformed", "InternalServerError"),
    ],
)
def test_a_provider_side_fault_on_chat_raises_its_litellm_class_and_is_a_provider_failure(careful, kind, error):
    with pytest.raises(litellm_error(error)) as info:
        call_chat(careful, kind)
    assert type(info.value).__name__ == error
    assert failure_class(info.value) == "provider"


def test_a_hang_past_the_client_timeout_raises_timeout_and_is_a_provider_failure(careful):
    with pytest.raises(litellm_error("Timeout")) as info:
        call_chat(careful, "hang")
    assert failure_class(info.value) == "provider"
    # The failed call's times travel on the exception, for the harness to report.
    assert info.value.call_end - info.value.call_start >= CLIENT_TIMEOUT_S * 0.9


def test_an_auth_fault_raises_authentication_error_and_is_an_operator_failure(careful):
    with pytest.raises(litellm_error("AuthenticationError")) as info:
        call_chat(careful, "auth")
    assert describe_exception(info.value)["status_code"] == 401
    assert failure_class(info.value) == "operator"


@pytest.mark.parametrize("call", ["chat", "responses"])
def test_an_exhausted_quota_is_an_operator_failure_though_it_comes_as_a_rate_limit(careful, call):
    """OpenAI says insufficient_quota with a 429: a person must pay, reruns cannot help."""
    with pytest.raises(litellm_error("RateLimitError")) as info:
        (call_chat if call == "chat" else call_responses)(careful, "quota")
    assert describe_exception(info.value)["status_code"] == 429
    assert failure_class(info.value) == "operator"


def test_a_credit_balance_too_low_is_an_operator_failure_though_it_comes_as_a_bad_request(careful):
    with pytest.raises(litellm_error("BadRequestError")) as info:
        call_chat(careful, "credit")
    assert describe_exception(info.value)["status_code"] == 400
    assert failure_class(info.value) == "operator"


def test_a_plain_rate_limit_stays_a_provider_failure(careful):
    with pytest.raises(litellm_error("RateLimitError")) as info:
        call_chat(careful, "rate_limit")
    assert failure_class(info.value) == "provider"


def test_a_malformed_body_on_the_responses_api_raises_api_error_and_is_a_provider_failure(careful):
    with pytest.raises(litellm_error("APIError")) as info:
        call_responses(careful, "malformed")
    assert type(info.value).__name__ == "APIError"
    assert failure_class(info.value) == "provider"


def test_a_rate_limit_on_the_responses_api_is_still_a_rate_limit_error(careful):
    with pytest.raises(litellm_error("RateLimitError")):
        call_responses(careful, "rate_limit")


@pytest.mark.parametrize("call", [call_chat, call_responses], ids=["chat", "responses"])
def test_the_wait_a_rate_limit_asks_for_is_kept_in_its_error(careful, call):
    """The simulator's 429 says Retry-After: 1; the record's error keeps it
    (retry_after_s), and the lane's wait before the rerun pass reads it."""
    with pytest.raises(litellm_error("RateLimitError")) as info:
        call(careful, "rate_limit")
    assert describe_exception(info.value)["retry_after_s"] == 1.0


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),  # the finer one first
        ({"Retry-After": "Fri, 04 Dec 2026 08:00:00 GMT"}, None),  # a date: not read
        ({}, None),
    ],
    ids=["seconds", "milliseconds", "a date", "none"],
)
def test_a_retry_after_header_is_read_in_seconds_or_milliseconds_and_a_date_is_not(headers, kept):
    server = _OneReply({"error": {"message": "slow down", "type": "rate_limit"}}, status=429, headers=headers)
    try:
        spec = model_spec(name="gateway", litellm_model="openai/any", api_base=server.url)
        llm.prepare([spec], SIM_PRICES)
        with pytest.raises(litellm_error("RateLimitError")) as info:
            call_chat(spec, "any")
    finally:
        server.close()
    assert describe_exception(info.value).get("retry_after_s") == kept


def test_a_rate_limit_carries_a_retry_after_header(sim):
    body = json.dumps({"model": "sim-careful", "messages": [{"role": "user", "content": USER}]}).encode()
    request = urllib.request.Request(
        f"{sim.url}/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "X-Confirmatory-Attempt": "rate_limit/raw/0"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"


def test_a_truncate_fault_returns_finish_reason_length_with_usage_and_cost(careful):
    reply = call_chat(careful, "truncate")
    assert reply.finish_reason == "length"
    assert reply.cost_usd and reply.cost_usd > 0


def test_a_truncate_fault_on_the_responses_api_reads_as_length_too(careful):
    reply = call_responses(careful, "truncate")
    assert reply.finish_reason == "length"
    assert reply.cost_usd and reply.cost_usd > 0


def test_a_bad_answer_fault_returns_a_reply_whose_content_is_not_json(careful):
    reply = call_chat(careful, "bad_answer")
    assert reply.finish_reason == "stop" and reply.content
    with pytest.raises(ValueError):
        json.loads(reply.content)


def test_an_unknown_model_name_is_not_found_and_an_operator_failure(sim):
    spec = model_spec(name="nobody", litellm_model="openai/sim-nobody", api_base=sim.url)
    with pytest.raises(litellm_error("NotFoundError")) as info:
        llm.chat(spec, [{"role": "user", "content": USER}])
    assert failure_class(info.value) == "operator"


def test_a_refused_connection_is_an_internal_server_error_whose_cause_chain_is_recorded():
    with socket.socket() as probe:  # a port that was free a moment ago; nothing listens on it now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = model_spec(name="gone", litellm_model="openai/sim-careful", api_base=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(litellm_error("InternalServerError")) as info:
        llm.chat(spec, [{"role": "user", "content": USER}])
    error = describe_exception(info.value)
    assert error["status_code"] == 500
    assert any(name in error["cause"] for name in ("openai.APIConnectionError", "httpx.ConnectError"))
    assert failure_class(info.value) == "provider"


def test_a_call_without_faults_on_the_same_server_succeeds(careful):
    reply = call_chat(careful, "quiet-household")
    assert json.loads(reply.content.removeprefix("Answer: ")) == {"net_income": 18000.0}


# ---- a billed reply with nothing in it ----------------------------------------------------------


def _attempt() -> tuple[Spend, AttemptSpend]:
    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    return spend, AttemptSpend(
        spend,
        model="careful",
        household="empty_choices",
        arm="alone",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )


def _before(sim) -> tuple[dict, int]:
    """The server's usage and invoiced nano-dollars of sim-careful so far."""
    return dict(sim.usage().get("sim-careful", {})), sim.invoice().get("sim-careful", {}).get("nusd", 0)


def _billed(sim, before: tuple[dict, int]) -> tuple[int, int, int]:
    """Input and output tokens the server billed since ``before``, and their
    cost in nano-dollars as its invoice says (cache reads at their own price)."""
    used, invoiced = before
    after = sim.usage()["sim-careful"]
    tokens_in = after["prompt_tokens"] - used.get("prompt_tokens", 0)
    tokens_out = after["completion_tokens"] - used.get("completion_tokens", 0)
    return tokens_in, tokens_out, sim.invoice()["sim-careful"]["nusd"] - invoiced


@pytest.mark.parametrize("call", ["chat", "responses"])
def test_a_billed_reply_without_choices_is_a_provider_failure_that_carries_its_times_and_its_cost(sim, careful, call):
    """HTTP 200, "choices": [] (Responses: "output": []) and a billed usage: a
    provider failure (rerun), not an IndexError of the harness's; the failed
    call reported as documented (no cost given) counts what the reply cost."""
    before = _before(sim)
    spend, attempt = _attempt()
    with attempt.bound():
        with pytest.raises(litellm_error("APIError")) as info:
            (call_chat if call == "chat" else call_responses)(careful, "empty_choices")
        exc = info.value
        tokens_in, tokens_out, cost = _billed(sim, before)
        assert cost > 0
        field = "choices" if call == "chat" else "output"
        assert f"the provider replied without {field}" in str(exc)
        assert f"({tokens_in} input and {tokens_out} output tokens billed)" in str(exc)
        error = describe_exception(exc)
        assert error["status_code"] == 200 and failure_class(exc) == "provider"
        # The call's times, and its cost, travel on the exception ...
        assert exc.call_start <= exc.call_end
        assert to_nusd(exc.cost_usd) == to_nusd(exc.reply.cost_usd) == cost
        assert exc.reply.usage["input_tokens"] == tokens_in and exc.reply.usage["output_tokens"] == tokens_out
        # ... the bound attempt was told of the reply, as of any returned one ...
        assert attempt.unreported() == (cost, 0)
        # ... and the documented failed-call report counts it.
        assert attempt.add_call(call, exc.call_start, exc.call_end, error=exc) == cost
        attempt.checkpoint()  # nothing is left unreported: the conversation may go on
    assert attempt.unreported() == (0, 0)
    assert spend.total_nusd == spend.model_total("careful") == cost
    total, (recorded,) = attempt.snapshot()
    assert total == recorded["cost_nusd"] == cost
    assert recorded["error"]["type"] == "litellm.exceptions.APIError" and recorded["error"]["status_code"] == 200
    assert (recorded["start"], recorded["end"]) == (exc.call_start, exc.call_end)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("call", ["chat", "responses"])
def test_a_billed_reply_litellm_cannot_read_still_counts_what_it_cost(sim, careful, call):
    """HTTP 200, "choices": null (Responses: no "output") and a billed usage.
    On chat litellm raises InternalServerError with no usage on it (the cost
    was lost: docs/LITELLM.md); the usage of the raw body, which litellm's
    post-call hook saw, is now priced onto the exception, so the documented
    failed-call report counts it and the bound attempt knows of it."""
    before = _before(sim)
    spend, attempt = _attempt()
    with attempt.bound():
        with pytest.raises(litellm_error("InternalServerError" if call == "chat" else "APIError")) as info:
            (call_chat if call == "chat" else call_responses)(careful, "null_choices")
        exc = info.value
        tokens_in, tokens_out, cost = _billed(sim, before)
        assert cost > 0 and failure_class(exc) == "provider"
        if call == "chat":
            assert "choices" in str(exc) and "not a list" in str(exc)  # litellm's own error, unchanged
        assert to_nusd(exc.cost_usd) == to_nusd(exc.reply.cost_usd) == cost
        assert exc.reply.usage["input_tokens"] == tokens_in and exc.reply.usage["output_tokens"] == tokens_out
        assert (exc.reply.start, exc.reply.end) == (exc.call_start, exc.call_end)
        assert attempt.unreported() == (cost, 0)
        assert attempt.add_call(call, exc.call_start, exc.call_end, error=exc) == cost
        attempt.checkpoint()
    assert spend.total_nusd == cost


def test_a_failed_call_after_a_billed_one_carries_no_cost_of_the_earlier_reply(sim, careful):
    # The raw bodies are the call's own: a rate limit right after a billed
    # reply that litellm could not read carries nothing.
    with pytest.raises(litellm_error("InternalServerError")) as first:
        call_chat(careful, "null_choices")
    assert to_nusd(first.value.cost_usd) > 0
    with pytest.raises(litellm_error("RateLimitError")) as limited:
        call_chat(careful, "rate_limit")
    assert getattr(limited.value, "reply", None) is None and getattr(limited.value, "cost_usd", None) is None


def test_a_cost_given_with_the_failed_call_is_what_counts_and_other_errors_carry_none(sim, careful):
    spend, attempt = _attempt()
    with pytest.raises(litellm_error("APIError")) as info:
        call_chat(careful, "empty_choices")
    exc = info.value
    assert to_nusd(exc.cost_usd) > 0
    assert attempt.add_call("chat", exc.call_start, exc.call_end, error=exc, cost_nusd=7) == 7
    assert attempt.add_call("chat", exc.call_start, exc.call_end, error=exc, cost_usd=0.0) == 0
    with pytest.raises(litellm_error("RateLimitError")) as limited:
        call_chat(careful, "rate_limit")
    assert attempt.add_call("chat", limited.value.call_start, limited.value.call_end, error=limited.value) == 0
    assert spend.total_nusd == 7


class _OneReply:
    """A loopback server that answers every Responses request with one body
    the simulator does not send (``output`` null; an incomplete reply with no
    output), for the two readings ``llm.responses`` gives them."""

    def __init__(self, body: dict, status: int = 200, headers: dict | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        data = json.dumps(body).encode()
        self.keys: list[str] = []  # the Authorization each request carried
        keys = self.keys

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                keys.append(str(self.headers.get("Authorization")))
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _responses_body(**fields) -> dict:
    return {
        "id": "resp_x",
        "object": "response",
        "created_at": 1,
        "model": "sim-careful",
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 100,
            "output_tokens": 50,
            "total_tokens": 150,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    } | fields


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_a_responses_reply_with_output_null_is_priced_from_its_usage_though_litellm_gave_no_cost():
    # litellm leaves this reply's usage a dict and its response_cost None
    # (docs/LITELLM.md): not an unpriced model (operator), a provider failure
    # whose tokens are priced by the same lookup.
    server = _OneReply(_responses_body(output=None))
    try:
        spec = model_spec("careful", "openai/sim-careful", server.url)
        llm.prepare([spec], SIM_PRICES)
        with pytest.raises(litellm_error("APIError")) as info:
            llm.responses(spec, "hi")
    finally:
        server.close()
    price_in, price_out = SIM_PRICES["sim-careful"]
    assert "the provider replied without output" in str(info.value) and failure_class(info.value) == "provider"
    assert to_nusd(info.value.cost_usd) == 100 * to_nusd(price_in) + 50 * to_nusd(price_out)


def test_an_incomplete_responses_reply_without_output_stays_a_truncation():
    server = _OneReply(
        _responses_body(output=[], status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    )
    try:
        spec = model_spec("careful", "openai/sim-careful", server.url)
        llm.prepare([spec], SIM_PRICES)
        reply = llm.responses(spec, "hi")
    finally:
        server.close()
    assert reply.finish_reason == "length" and reply.content is None and reply.cost_usd > 0


def _key_echo() -> _OneReply:
    """A loopback server (a local gateway, an ssh tunnel) answering a chat
    reply and keeping the key each request carried."""
    return _OneReply(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "sim-careful",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    )


@pytest.mark.parametrize("env_key", [None, "sk-local-gateway-key-0123456789"])
def test_a_loopback_gateway_gets_the_environments_key_and_the_simulator_never_does(monkeypatch, env_key):
    # An ssh tunnel or a key-checking local gateway (litellm proxy, vLLM
    # --api-key) on loopback: before, it was always sent "sim-no-key", so
    # every call failed with an authentication error and the model paused.
    if env_key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", env_key)
    from confirmatory.engine.llm import boundary

    monkeypatch.setattr(boundary, "_env_key_found", {})  # the environment is read afresh
    gateway = _key_echo()
    try:
        spec = model_spec("careful", "openai/sim-careful", gateway.url)
        llm.prepare([spec], SIM_PRICES)
        assert llm.chat(spec, [{"role": "user", "content": "hi"}]).content == "ok"
    finally:
        gateway.close()
    assert gateway.keys == [f"Bearer {env_key or llm.SIM_API_KEY}"]
    # The simulated provider (one started in this process) is never sent a real key.
    sim_key = _key_echo()
    llm.serve_as_simulator(sim_key.url)
    try:
        spec = model_spec("careful", "openai/sim-careful", sim_key.url)
        llm.chat(spec, [{"role": "user", "content": "hi"}])
    finally:
        llm.serve_as_simulator(sim_key.url, serving=False)
        sim_key.close()
    assert sim_key.keys == [f"Bearer {llm.SIM_API_KEY}"]


def test_the_simulated_provider_is_marked_while_it_serves():
    with SimProvider(FaultPlan()) as provider:
        url = provider.url
        assert llm._loopback_key(model_spec("c", "openai/sim-careful", url), url) == llm.SIM_API_KEY
        assert url.rstrip("/") in llm._sim_bases
    assert url.rstrip("/") not in llm._sim_bases
