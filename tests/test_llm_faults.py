"""Each simulated fault, as litellm raises it and as the rules classify it.

Real HTTP to the simulated provider on loopback; the record's error is built
with ``describe_exception`` and classified by ``confirmatory.rules``, exactly
as a lane would. A change of litellm version that moves an exception to
another class fails here first (LITELLM.md).
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from confirmatory import llm
from confirmatory.errors import describe_exception
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider

rules = pytest.importorskip("confirmatory.rules")

USER = 'Household:\n{"adults": [{"employment_income": 24000}]}\nWhat is its annual net income?'
KINDS = ("rate_limit", "server_error", "bad_gateway", "unavailable", "hang", "truncate",
         "malformed", "bad_answer", "auth", "quota", "credit")
HANG_S = 1.5
CLIENT_TIMEOUT_S = 0.4


def model_spec(name: str, litellm_model: str, api_base: str | None) -> llm.AdHocModel:
    return llm.AdHocModel(name=name, litellm_model=litellm_model, api_base=api_base, timeout_s=CLIENT_TIMEOUT_S,
                          params={"temperature": 0.0})


@pytest.fixture(scope="module")
def sim():
    # One fault per kind, each selected by a household named after it.
    plan = FaultPlan.from_table({"seed": 3, "hang_s": HANG_S,
                                 "faults": [{"kind": kind, "household": kind} for kind in KINDS]})
    with SimProvider(plan) as provider:
        yield provider


@pytest.fixture(scope="module")
def careful(sim):
    spec = model_spec(name="careful", litellm_model="openai/sim-careful", api_base=sim.url)
    llm.prepare([spec], SIM_PRICES)
    return spec


def call_chat(spec: llm.AdHocModel, household: str) -> llm.Reply:
    return llm.chat(spec, [{"role": "user", "content": USER}],
                    extra_headers={"X-Confirmatory-Attempt": f"{household}/alone/0"})


def call_responses(spec: llm.AdHocModel, household: str) -> llm.Reply:
    return llm.responses(spec, [{"role": "user", "content": USER}],
                         extra_headers={"X-Confirmatory-Attempt": f"{household}/alone/0"})


def failure_class(exc: BaseException) -> str:
    record = {"status": "error", "error": describe_exception(exc), "calls": []}
    return rules.classify(record, [], precedence=rules.DEFAULT_PRECEDENCE, class_lists=rules.CLASS_LISTS)


def litellm_error(name: str) -> type[BaseException]:
    return getattr(llm._lib(), name)


@pytest.mark.parametrize(("kind", "error"), [
    ("rate_limit", "RateLimitError"),
    ("server_error", "InternalServerError"),
    ("bad_gateway", "BadGatewayError"),
    ("unavailable", "ServiceUnavailableError"),
    ("malformed", "InternalServerError"),
])
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


def test_a_rate_limit_carries_a_retry_after_header(sim):
    body = json.dumps({"model": "sim-careful", "messages": [{"role": "user", "content": USER}]}).encode()
    request = urllib.request.Request(f"{sim.url}/chat/completions", data=body, headers={
        "Content-Type": "application/json", "X-Confirmatory-Attempt": "rate_limit/raw/0"})
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
