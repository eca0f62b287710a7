"""The simulator's Anthropic and Gemini shapes, its cache and reasoning tokens, and its invoice.

Real HTTP: litellm (as installed) calls the simulated provider on loopback
through ``confirmatory.engine.llm``; the invoice is read from
``GET /_sim/invoice``. Each failure a shape sends is classified by the rules
from the record's error, as a lane would (docs/LITELLM.md's table).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from shapecalls import TOOLS, USER

from confirmatory.core.errors import UnparseableAnswer, describe_exception
from confirmatory.core.simulated import SIM_PRICE_TABLE
from confirmatory.demo.harness import parse_answer
from confirmatory.engine import llm
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider

rules = pytest.importorskip("confirmatory.core.rules")

KINDS = (
    "rate_limit",
    "overloaded",
    "server_error",
    "bad_gateway",
    "unavailable",
    "auth",
    "quota",
    "credit",
    "bad_request",
    "truncate",
    "safety",
    "blocked_prompt",
    "malformed",
    "hang",
    "empty_choices",
    "null_choices",
)
HANG_S = 1.0
CLIENT_TIMEOUT_S = 0.4
SHAPES = {"chat": "openai/sim-reasoner", "anthropic": "anthropic/sim-claude", "gemini": "gemini/sim-gemini"}


@pytest.fixture(scope="module")
def sim():
    plan = FaultPlan.from_table(
        {"seed": 5, "hang_s": HANG_S, "faults": [{"kind": kind, "household": kind} for kind in KINDS]}
    )
    with SimProvider(plan) as provider:
        yield provider


@pytest.fixture(scope="module")
def specs(sim):
    made = {
        shape: llm.AdHocModel(name=shape, litellm_model=model, api_base=sim.url, timeout_s=CLIENT_TIMEOUT_S)
        for shape, model in SHAPES.items()
    }
    llm.prepare(list(made.values()), SIM_PRICES)
    return made


def post(url: str, body: dict, attempt: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Confirmatory-Attempt": attempt, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, dict(resp.headers), json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.load(exc)


def nusd(model: str, tokens: dict[str, int]) -> int:
    """Tokens by kind times the catalogue's prices (whole nano-dollars per token)."""
    table = SIM_PRICE_TABLE[model]
    return sum(count * round(table[kind] * 1000) for kind, count in tokens.items())


def invoice_delta(before: dict, after: dict, model: str) -> dict:
    was = before.get(model, {"calls": 0, "tokens": {}, "nusd": 0})
    now = after[model]
    return {
        "calls": now["calls"] - was["calls"],
        "tokens": {k: v - was["tokens"].get(k, 0) for k, v in now["tokens"].items()},
        "nusd": now["nusd"] - was["nusd"],
    }


# ---- the shapes' bodies, as each vendor's API reference writes them ---------------------------


def anthropic_request(cache: bool) -> dict:
    marker = {"cache_control": {"type": "ephemeral"}} if cache else {}
    return {
        "model": "sim-claude",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are careful.", **marker}],
        "tools": [{"name": "calculate", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": USER, **marker}]}],
    }


def test_an_anthropic_reply_calls_the_tool_and_bills_cache_writes_then_reads(sim):
    url = sim.root + "/v1/messages"
    status, _h, first = post(url, anthropic_request(cache=True), "raw-a/x/0")
    assert status == 200 and first["type"] == "message" and first["stop_reason"] == "tool_use"
    assert [b["type"] for b in first["content"]] == ["thinking", "tool_use"]
    assert first["content"][1]["input"] == {"household": {"adults": [{"employment_income": 24000}]}}
    usage = first["usage"]
    assert usage["cache_creation_input_tokens"] > 0 and usage["cache_read_input_tokens"] == 0
    # the same marked prefix again: read, not written
    _s, _h, again = post(url, anthropic_request(cache=True), "raw-a/x/0")
    assert again["usage"]["cache_read_input_tokens"] == usage["cache_creation_input_tokens"]
    assert again["usage"]["cache_creation_input_tokens"] == 0
    # without cache_control, Anthropic caches nothing
    _s, _h, plain = post(url, anthropic_request(cache=False), "raw-b/x/0")
    _s, _h, plain = post(url, anthropic_request(cache=False), "raw-b/x/0")
    assert plain["usage"]["cache_read_input_tokens"] == plain["usage"]["cache_creation_input_tokens"] == 0


def test_the_anthropic_path_is_served_under_the_simulators_v1_url_too(sim):
    # litellm posts to {api_base}/v1/messages: given sim.url (".../v1"), that is /v1/v1/messages
    status, _h, body = post(sim.url + "/v1/messages", anthropic_request(cache=False), "raw-c/x/0")
    assert status == 200 and body["type"] == "message"


@pytest.mark.parametrize(
    ("kind", "status", "error_type", "retry_after"),
    [
        ("rate_limit", 429, "rate_limit_error", "1"),
        ("overloaded", 529, "overloaded_error", None),
        ("server_error", 500, "api_error", None),
        ("bad_request", 400, "invalid_request_error", None),
        ("auth", 401, "authentication_error", None),
    ],
)
def test_anthropic_errors_are_written_as_anthropic_writes_them(sim, kind, status, error_type, retry_after):
    got, headers, body = post(sim.root + "/v1/messages", anthropic_request(cache=False), f"{kind}/raw/0")
    assert got == status
    assert body["type"] == "error" and body["error"]["type"] == error_type
    assert {k.lower(): v for k, v in headers.items()}.get("retry-after") == retry_after


def gemini_request(**config) -> dict:
    return {
        "contents": [{"role": "user", "parts": [{"text": USER}]}],
        "tools": [{"functionDeclarations": [{"name": "calculate", "parameters": {"type": "object"}}]}],
        "generationConfig": config,
    }


def test_a_gemini_reply_calls_the_tool_and_reports_thoughts_and_cache_reads(sim):
    url = sim.url + "beta/models/sim-gemini:generateContent"  # .../v1beta/models/...
    status, _h, first = post(url, gemini_request(), "raw-g/x/0")
    assert status == 200
    (candidate,) = first["candidates"]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["parts"][0]["functionCall"]["name"] == "calculate"
    meta = first["usageMetadata"]
    assert meta["thoughtsTokenCount"] > 0 and "cachedContentTokenCount" not in meta
    assert (
        meta["totalTokenCount"] == meta["promptTokenCount"] + meta["candidatesTokenCount"] + meta["thoughtsTokenCount"]
    )
    _s, _h, again = post(url, gemini_request(), "raw-g/x/0")
    assert again["usageMetadata"]["cachedContentTokenCount"] == meta["promptTokenCount"]


@pytest.mark.parametrize(
    ("kind", "status", "name"),
    [
        ("rate_limit", 429, "RESOURCE_EXHAUSTED"),
        ("overloaded", 503, "UNAVAILABLE"),
        ("server_error", 500, "INTERNAL"),
        ("bad_request", 400, "INVALID_ARGUMENT"),
    ],
)
def test_gemini_errors_are_written_as_google_writes_them(sim, kind, status, name):
    got, _h, body = post(sim.url + "/models/sim-gemini:generateContent", gemini_request(), f"{kind}/raw/0")
    assert got == status and body["error"]["code"] == status and body["error"]["status"] == name


def test_gemini_safety_and_a_blocked_prompt_are_200s_as_google_sends_them(sim):
    url = sim.url + "/models/sim-gemini:generateContent"
    _s, _h, safety = post(url, gemini_request(), "safety/raw/0")
    assert safety["candidates"][0]["finishReason"] == "SAFETY" and "content" not in safety["candidates"][0]
    _s, _h, blocked = post(url, gemini_request(), "blocked_prompt/raw/0")
    assert blocked["promptFeedback"]["blockReason"] == "SAFETY" and "candidates" not in blocked
    _s, _h, cut = post(url, gemini_request(maxOutputTokens=3), "raw-cut/x/0")
    assert cut["candidates"][0]["finishReason"] == "MAX_TOKENS"


# ---- every shape bills by its vendor's rule, and the invoice says so --------------------------


def converse(spec: llm.AdHocModel, attempt: str, shape: str) -> list[llm.Reply]:
    """A two-call tool conversation (the reference study's), Anthropic's prompt marked for caching."""
    headers = {"X-Confirmatory-Attempt": attempt}
    text = [{"type": "text", "text": USER, "cache_control": {"type": "ephemeral"}}] if shape == "anthropic" else USER
    messages: list[dict] = [{"role": "system", "content": "You are careful."}, {"role": "user", "content": text}]
    if shape == "responses":
        tools = [t["function"] | {"type": "function"} for t in TOOLS]
        first = llm.responses(spec, messages, tools=tools, extra_headers=headers)
        (call,) = first.tool_calls
        follow = [
            *messages,
            {"type": "function_call", "call_id": call["id"], "name": call["name"], "arguments": call["arguments"]},
            {"type": "function_call_output", "call_id": call["id"], "output": json.dumps({"net_income": 20000})},
        ]
        return [
            first,
            llm.responses(spec, follow, tools=tools, extra_headers=headers, text_format={"type": "json_object"}),
        ]
    json_mode = {"response_format": {"type": "json_object"}} if shape == "chat-json" else {}
    first = llm.chat(spec, messages, tools=TOOLS, extra_headers=headers, **json_mode)
    (call,) = first.tool_calls
    follow = [
        *messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"net_income": 20000})},
    ]
    return [first, llm.chat(spec, follow, tools=TOOLS, extra_headers=headers, **json_mode)]


@pytest.mark.parametrize("shape", ["chat", "chat-json", "responses", "anthropic", "gemini"])
def test_each_shape_bills_cache_reads_writes_and_reasoning_and_the_invoice_matches_them(sim, specs, shape):
    spec = specs["anthropic" if shape == "anthropic" else "gemini" if shape == "gemini" else "chat"]
    served = spec.litellm_model.split("/")[1]
    before = sim.invoice()
    replies = converse(spec, f"bill-{shape}/tool/0", shape)
    assert parse_answer(replies[-1].content) == {"net_income": 20000.0}
    delta = invoice_delta(before, sim.invoice(), served)
    tokens = delta["tokens"]
    assert delta["calls"] == 2
    assert tokens["cached_input"] > 0 and tokens["output"] > 0 and tokens["input"] > 0
    if shape == "anthropic":
        # Anthropic bills thinking as output and says nothing apart of it; it writes what cache_control marks
        assert tokens["cache_write"] > 0 and tokens["reasoning"] == 0
    else:
        assert tokens["cache_write"] == 0 and tokens["reasoning"] > 0
    # USD: each kind at its own price, exactly
    assert delta["nusd"] == nusd(served, tokens)
    assert delta["nusd"] != nusd(
        served,
        {"input": tokens["input"] + tokens["cached_input"]}
        | {k: v for k, v in tokens.items() if k not in ("input", "cached_input")},
    )
    # The kinds are the usage litellm read, by the vendor's rule (prompt = input + cached + written).
    prompt = sum(r.usage["input_tokens"] for r in replies)
    completion = sum(r.usage["output_tokens"] for r in replies)
    assert prompt == tokens["input"] + tokens["cached_input"] + tokens["cache_write"]
    assert completion == tokens["output"] + tokens["reasoning"]


def test_the_invoice_is_served_as_json_at_sim_invoice(sim, specs):
    converse(specs["chat"], "served/tool/0", "chat")
    with urllib.request.urlopen(sim.root + "/_sim/invoice", timeout=5) as resp:
        served = json.load(resp)
    assert served == sim.invoice()
    entry = served["sim-reasoner"]
    assert set(entry) == {"calls", "tokens", "nusd"}
    assert set(entry["tokens"]) == {"input", "cached_input", "cache_write", "output", "reasoning"}
    assert all(isinstance(v, int) for v in [entry["calls"], entry["nusd"], *entry["tokens"].values()])


# ---- every failure of the new shapes reaches the seed's classes --------------------------------


def failure_class(exc: BaseException) -> str:
    record = {"status": "error", "error": describe_exception(exc), "calls": []}
    return rules.classify(record, [], precedence=rules.DEFAULT_PRECEDENCE, class_lists=rules.CLASS_LISTS)


# (shape, fault) -> litellm's class, the recorded status, the rules' class: docs/LITELLM.md's table
RAISED = [
    ("anthropic", "rate_limit", "RateLimitError", 429, "provider"),
    ("anthropic", "overloaded", "InternalServerError", 500, "provider"),
    ("anthropic", "server_error", "InternalServerError", 500, "provider"),
    ("anthropic", "bad_gateway", "BadGatewayError", 502, "provider"),
    ("anthropic", "unavailable", "ServiceUnavailableError", 503, "provider"),
    ("anthropic", "auth", "AuthenticationError", 401, "operator"),
    ("anthropic", "credit", "BadRequestError", 400, "operator"),
    ("anthropic", "quota", "BadRequestError", 400, "operator"),
    ("anthropic", "bad_request", "BadRequestError", 400, "model"),
    ("anthropic", "malformed", "APIConnectionError", 500, "provider"),
    ("anthropic", "hang", "Timeout", 408, "provider"),
    ("gemini", "rate_limit", "RateLimitError", 429, "provider"),
    ("gemini", "overloaded", "InternalServerError", 500, "provider"),
    ("gemini", "server_error", "InternalServerError", 500, "provider"),
    ("gemini", "bad_gateway", "APIConnectionError", 500, "provider"),
    ("gemini", "unavailable", "ServiceUnavailableError", 503, "provider"),
    ("gemini", "auth", "AuthenticationError", 401, "operator"),
    ("gemini", "quota", "RateLimitError", 429, "operator"),
    ("gemini", "bad_request", "BadRequestError", 400, "model"),
    ("gemini", "malformed", "BadRequestError", 422, "provider"),
    ("gemini", "hang", "Timeout", 408, "provider"),
]


@pytest.mark.parametrize(("shape", "kind", "error", "status", "cls"), RAISED, ids=[f"{r[0]}-{r[1]}" for r in RAISED])
def test_each_failure_of_a_shape_raises_its_litellm_class_and_reaches_its_rules_class(
    specs, shape, kind, error, status, cls
):
    with pytest.raises(getattr(llm._lib(), error)) as info:
        llm.chat(
            specs[shape], [{"role": "user", "content": USER}], extra_headers={"X-Confirmatory-Attempt": f"{kind}/a/0"}
        )
    assert type(info.value).__name__ == error
    assert describe_exception(info.value)["status_code"] == status
    assert failure_class(info.value) == cls


def test_anthropics_retry_after_header_and_geminis_retry_delay_in_the_body_are_both_kept(specs):
    # Anthropic sends Retry-After; Gemini only RetryInfo.retryDelay ("1s") in its body
    for shape, wait in (("anthropic", 1.0), ("gemini", 1.0)):
        with pytest.raises(llm._lib().RateLimitError) as info:
            llm.chat(
                specs[shape],
                [{"role": "user", "content": USER}],
                extra_headers={"X-Confirmatory-Attempt": "rate_limit/w/0"},
            )
        assert describe_exception(info.value).get("retry_after_s") == wait


@pytest.mark.parametrize("shape", ["chat", "anthropic", "gemini"])
@pytest.mark.parametrize(
    ("kind", "finish"), [("truncate", "length"), ("safety", "content_filter"), ("blocked_prompt", "content_filter")]
)
def test_a_truncation_or_a_safety_stop_comes_back_billed_and_ends_as_the_models_own(specs, shape, kind, finish):
    """Returned, not raised: the harness escalates a truncation (one that
    survives is TruncationSurvived, model) and finds no answer in a safety
    stop (UnparseableAnswer, model)."""
    reply = llm.chat(
        specs[shape], [{"role": "user", "content": USER}], extra_headers={"X-Confirmatory-Attempt": f"{kind}/r/0"}
    )
    assert reply.finish_reason == finish and reply.cost_usd and reply.cost_usd > 0
    if finish == "content_filter":
        assert reply.content is None and not reply.tool_calls
        with pytest.raises(UnparseableAnswer) as info:
            parse_answer(reply.content)
        assert failure_class(info.value) == "model"


@pytest.mark.parametrize("shape", ["chat", "anthropic", "gemini"])
def test_a_billed_200_with_nothing_in_it_is_a_provider_failure_carrying_its_cost_on_every_shape(specs, shape):
    """``"choices": []``, Anthropic's ``"content": []``, Gemini's ``"candidates": []``:
    litellm returns Anthropic's as a reply with no content; the runner raises
    it as the others, a provider failure (rerun) whose billed cost is counted."""
    with pytest.raises(llm._lib().APIError) as info:
        llm.chat(
            specs[shape],
            [{"role": "user", "content": USER}],
            extra_headers={"X-Confirmatory-Attempt": "empty_choices/e/0"},
        )
    assert describe_exception(info.value)["status_code"] == 200
    assert failure_class(info.value) == "provider"
    assert info.value.cost_usd and info.value.cost_usd > 0


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("shape", ["anthropic", "gemini"])
def test_a_billed_reply_litellm_cannot_read_is_counted_from_its_own_apis_usage_fields(sim, specs, shape):
    """``null_choices``: Anthropic's body without ``content`` (litellm raises
    APIConnectionError), Gemini's without ``candidates``. The raw body's usage,
    in its vendor's names (Anthropic's three input counts, Gemini's
    ``usageMetadata``), is what the failed call carries: the invoice's cost."""
    served = specs[shape].litellm_model.split("/")[1]
    before = sim.invoice()
    with pytest.raises(Exception) as info:  # noqa: PT011 - litellm's class differs by shape
        llm.chat(
            specs[shape],
            [{"role": "system", "content": [{"type": "text", "text": USER, "cache_control": {"type": "ephemeral"}}]}]
            + [{"role": "user", "content": USER}],
            extra_headers={"X-Confirmatory-Attempt": "null_choices/n/0"},
        )
    delta = invoice_delta(before, sim.invoice(), served)
    assert delta["calls"] == 1 and delta["nusd"] > 0
    assert failure_class(info.value) == "provider"
    assert round(info.value.cost_usd * 10**9) == delta["nusd"]
    assert info.value.reply.billing["tokens"] == delta["tokens"]
