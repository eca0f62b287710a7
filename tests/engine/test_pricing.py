"""Every dollar is counted: a model litellm cannot price is refused before a
run starts, and a reply litellm could not price is never counted as free.

Real parts throughout: the design loader and the runner's preflight on real
design files, litellm's own price table, litellm over real HTTP to the
simulated provider on 127.0.0.1, the reference harness with a real ``Spend``.
An OpenAI-compatible local server (``hosted_vllm/...``) is how a model
litellm has no price for is reached without leaving the machine.

Planted faults, each run while these tests were written (docs/LITELLM.md):
- preflight without the price check -> the refusal tests fail;
- ``price_problem`` through ``get_model_info`` instead of ``cost_per_token``
  -> the fine-tune test fails (it would refuse what response_cost prices);
- no $0 check -> the zero-price test fails;
- ``_priced`` returning the reply unchanged (None counted as $0) -> every
  UnpricedCall test fails, and the harness test sees a free call;
- ``require_price`` defaulting to False for design models -> the ModelSpec
  tests fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from confirmatory.commands.demo import REFERENCE_DESIGN
from confirmatory.commands.run import Refused, preflight, run_command
from confirmatory.core import rules
from confirmatory.core.errors import describe_exception
from confirmatory.core.simulated import SIM_PRICE_TABLE
from confirmatory.demo import harness
from confirmatory.design.model import Arm, Household, ModelSpec
from confirmatory.engine import llm
from confirmatory.engine.spend import AttemptSpend, Spend
from confirmatory.runtime.clock import Clock
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider
from confirmatory.testing.designs import write_design

DEMO = REFERENCE_DESIGN.parent
USER = 'Household:\n{"adults": [{"employment_income": 24000}]}\nWhat is its annual net income?'
# The simulator serves "sim-careful"; litellm prices "openai/sim-careful" once
# registered, but has no price for the same served model behind another route.
UNPRICED = "hosted_vllm/sim-careful"
PRICED = "openai/sim-careful"
NO_WITNESS = {"command": ["true"]}


def design_with(tmp_path: Path, litellm_model: str, api_base: str = "https://api.example.test/v1") -> Path:
    return write_design(
        tmp_path / "design",
        households=2,
        models=[
            {
                "name": "m0",
                "litellm_model": litellm_model,
                "api_base": api_base,
                "price_usd_per_mtok": None,
                "price": "litellm",
            }
        ],
        anchors=NO_WITNESS,
    )


@pytest.fixture()
def keys(monkeypatch):
    # Only the price may be missing: the keys litellm asks for are "set".
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")


@pytest.fixture(scope="module")
def sim():
    with SimProvider(FaultPlan.from_table({"seed": 5})) as provider:
        llm.prepare([llm.AdHocModel(name="careful", litellm_model=PRICED, api_base=provider.url)], SIM_PRICES)
        yield provider


def spec(litellm_model: str, url: str, *, timeout_s: float = 5.0) -> ModelSpec:
    """A design's model, as the runner hands it to the harness."""
    return ModelSpec(
        name="m0",
        litellm_model=litellm_model,
        cap_usd=1.0,
        reserve_usd=0.01,
        params={"temperature": 0.0, "max_tokens": 400},
        timeout_s=timeout_s,
        api_base=url,
    )


# ---- preflight ----------------------------------------------------------------------------------


def test_preflight_refuses_a_model_litellm_has_no_price_for_naming_the_field_and_the_model(tmp_path, keys):
    design = design_with(tmp_path, "openai/my-finetune")
    with pytest.raises(Refused) as info:
        preflight(design, tmp_path / "run", workers=None)
    (problem,) = info.value.problems
    assert problem.startswith(
        "models[0].litellm_model: litellm has no price for openai/my-finetune; the spend ceiling cannot be enforced"
    )
    assert "price_usd_per_mtok" in problem  # and says how to give one


def test_run_refuses_an_unpriced_model_before_anything_is_written(tmp_path, keys, capsys):
    design = design_with(tmp_path, "openai/my-finetune")
    run_dir = tmp_path / "runs" / "r"
    assert run_command(design, run_dir, quiet=True) == 3
    assert not run_dir.exists() and not (tmp_path / "runs").exists()
    assert "models[0].litellm_model: litellm has no price for openai/my-finetune" in capsys.readouterr().err


@pytest.mark.parametrize("api_base", ["http://127.0.0.1:8000/v1", "http://localhost:4000", "http://[::1]:8000/v1"])
def test_a_model_on_loopback_is_refused_without_a_price_too(tmp_path, keys, capsys, api_base):
    """A server on this machine may front a paid API (a proxy, a tunnel); its
    unpriced replies would count as $0 and pause the model at every call, with
    nothing an operator could change in a frozen design."""
    design = design_with(tmp_path, "openai/acme-local-7b", api_base=api_base)
    with pytest.raises(Refused) as info:
        preflight(design, tmp_path / "run", workers=None)
    expected = (
        "models[0].litellm_model: litellm has no price for openai/acme-local-7b; the spend ceiling cannot be enforced "
        "(give the model a price_usd_per_mtok"
    )
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems
    from confirmatory.engine.check import check_command

    assert check_command(design) == 3
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    "litellm_model, api_base",
    [
        ("my-local-model", "http://127.0.0.1:9/v1"),  # an OpenAI-compatible server, the prefix forgotten
        ("opnai/gpt-4o", "https://api.example.test/v1"),  # a provider misspelt
    ],
)
def test_preflight_refuses_a_model_string_litellm_cannot_route(tmp_path, keys, litellm_model, api_base):
    """Every call would fail with a BadRequestError recorded as the model's own
    failure (class model, kept): the data would be silently wrong."""
    design = design_with(tmp_path, litellm_model, api_base=api_base)
    with pytest.raises(Refused) as info:
        preflight(design, tmp_path / "run", workers=None)
    assert any(
        p.startswith(f"models[0].litellm_model: litellm cannot route {litellm_model!r} to a provider")
        and "openai/<name>" in p
        for p in info.value.problems
    ), info.value.problems


def test_preflight_refuses_a_model_litellm_prices_at_zero(tmp_path, keys):
    design = design_with(tmp_path, "ollama/llama3", api_base="https://ollama.example.test")
    with pytest.raises(Refused) as info:
        preflight(design, tmp_path / "run", workers=None)
    assert any(
        p.startswith("models[0].litellm_model: litellm prices ollama/llama3 at $0 per token")
        for p in info.value.problems
    )


@pytest.mark.parametrize(
    "litellm_model",
    [
        "openai/gpt-4o",
        "anthropic/claude-sonnet-4-5",
        # priced by litellm from its base model, as response_cost does
        "openai/ft:gpt-4o-mini-2024-07-18:my-org::abc123",
    ],
)
def test_preflight_accepts_models_litellm_prices(tmp_path, keys, monkeypatch, litellm_model):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key-0000")
    loaded = preflight(design_with(tmp_path, litellm_model), tmp_path / "run", workers=None)
    assert loaded.design.models[0].litellm_model == litellm_model


def test_preflight_accepts_the_bundled_simulator_design_whose_prices_prepare_registers(tmp_path):
    from confirmatory.anchors.witness import init_local_witness

    init_local_witness(tmp_path / ".witness")  # where the design's anchor command looks: {run_dir}/../.witness
    loaded = preflight(DEMO / "minimal.toml", tmp_path / "run", workers=None)
    assert all(m.api_base == "simulator" for m in loaded.design.models)


def test_the_preflight_lookup_agrees_with_the_cost_litellm_puts_on_a_real_reply(sim):
    # Same served model, same server: one route priced, one not; the preflight
    # lookup says so exactly when the reply's response_cost does.
    for litellm_model in (PRICED, UNPRICED):
        ad_hoc = llm.AdHocModel(name="x", litellm_model=litellm_model, api_base=sim.url, timeout_s=5.0)
        reply = llm.chat(ad_hoc, [{"role": "user", "content": USER}])
        assert reply.usage["total_tokens"] > 0
        assert (llm.price_problem(litellm_model) is None) == (reply.cost_usd is not None), litellm_model
    assert llm.price_problem(UNPRICED) == f"litellm has no price for {UNPRICED}; the spend ceiling cannot be enforced"


# ---- the runtime belt -----------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_an_unpriced_reply_of_a_design_model_raises_an_operator_error_carrying_its_tokens_and_times(sim, api):
    call = llm.chat if api == "chat" else llm.responses
    with pytest.raises(llm.UnpricedCall) as info:
        call(spec(UNPRICED, sim.url), [{"role": "user", "content": USER}])
    exc = info.value
    assert isinstance(exc, llm._lib().exceptions.ModelNotMappedError)
    assert exc.usage["input_tokens"] > 0 and exc.usage["output_tokens"] > 0
    assert exc.reply.cost_usd is None and exc.reply.kind == api
    assert 0 < exc.call_start <= exc.call_end
    error = describe_exception(exc)
    assert error["type"] == "confirmatory.engine.llm.UnpricedCall"
    assert "litellm.exceptions.ModelNotMappedError" in error["mro"]
    assert f"{exc.usage['input_tokens']} input and {exc.usage['output_tokens']} output tokens" in error["message"]
    record = {"status": "error", "error": error}
    assert rules.record_class(record) == rules.Cls.OPERATOR
    assert rules.decide(record, [], reruns_used=0, max_reruns=2).action == rules.Action.PAUSE
    # ... even by class lists that predate UnpricedCall: its MRO names litellm's error.
    older = {
        k: [n for n in v if n != "confirmatory.engine.llm.UnpricedCall"] if k == "operator" else v
        for k, v in rules.CLASS_LISTS.items()
    }
    assert rules.record_class(record, class_lists=older) == rules.Cls.OPERATOR


def test_a_priced_reply_of_a_design_model_comes_back_with_its_cost(sim):
    # (a conversation's first call: nothing of it is read from the simulator's cache)
    first = {"X-Confirmatory-Attempt": "priced/first/0"}
    reply = llm.chat(spec(PRICED, sim.url), [{"role": "user", "content": USER}], extra_headers=first)
    in_price, out_price = SIM_PRICES["sim-careful"]
    expected = reply.usage["input_tokens"] * in_price + reply.usage["output_tokens"] * out_price
    assert reply.cost_usd == pytest.approx(expected) and reply.cost_usd > 0


def test_an_ad_hoc_model_outside_any_design_gets_its_unpriced_reply_unless_it_requires_a_price(sim):
    loose = llm.AdHocModel(name="probe", litellm_model=UNPRICED, api_base=sim.url, timeout_s=5.0)
    assert llm.chat(loose, [{"role": "user", "content": USER}]).cost_usd is None
    strict = llm.AdHocModel(name="probe", litellm_model=UNPRICED, api_base=sim.url, timeout_s=5.0, require_price=True)
    with pytest.raises(llm.UnpricedCall):
        llm.chat(strict, [{"role": "user", "content": USER}])


def test_the_reference_harness_records_the_unpriced_call_and_pauses_instead_of_going_on(sim):
    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    attempt = AttemptSpend(
        spend,
        model="m0",
        household="hh-x",
        arm="alone",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )
    household = Household(id="hh-x", payload={"id": "hh-x", "adults": [{"employment_income": 24000}]})
    arm = Arm(name="alone", features={"tools": []})
    with pytest.raises(llm.UnpricedCall) as info:
        harness.run(spec(UNPRICED, sim.url), household, arm, None, attempt, Clock())
    cost, calls = attempt.snapshot()
    (call,) = calls
    # The call is on the record, with its own times and its tokens in the error's message ...
    assert (call["kind"], call["cost_nusd"]) == ("chat", 0)
    assert (call["start"], call["end"]) == (info.value.call_start, info.value.call_end)
    assert call["error"]["type"] == "confirmatory.engine.llm.UnpricedCall"
    assert f"{info.value.usage['input_tokens']} input" in call["error"]["message"]
    # ... the attempt ends as an operator failure, so its model pauses for a person ...
    record = {"status": "error", "error": describe_exception(info.value), "calls": calls}
    assert rules.decide(record, [], reruns_used=0, max_reruns=2).action == rules.Action.PAUSE
    # ... and the attempt did not go on to a second, uncounted call.
    assert sim.calls_of("sim-careful", "hh-x/alone/0") == 1
    assert cost == 0 and spend.total_nusd == 0
    json.dumps(record)  # what the lane writes


def test_check_reports_an_unroutable_or_unpriced_model_as_run_would(tmp_path, capsys):
    """`check` refuses what `run` would refuse about a model, keys aside (they
    may be set only on the machine that runs)."""
    from confirmatory.engine.check import check_command

    for litellm_model, expected in (
        ("opnai/gpt-4o", "litellm cannot route 'opnai/gpt-4o'"),
        ("openai/my-finetune", "litellm has no price for openai/my-finetune"),
    ):
        design = design_with(tmp_path / litellm_model.replace("/", "_"), litellm_model)
        assert check_command(design) == 3
        assert f"models[0].litellm_model: {expected}" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["", "   "])
def test_a_key_set_to_blanks_is_missing(tmp_path, monkeypatch, value):
    """litellm counts OPENAI_API_KEY="" as set; every call would then fail as a
    provider error ("Missing credentials") and be rerun, then kept."""
    monkeypatch.setenv("OPENAI_API_KEY", value)
    design = design_with(tmp_path, "openai/gpt-4o")
    with pytest.raises(Refused) as info:
        preflight(design, tmp_path / "run", workers=None)
    assert any(
        p.startswith("models[0].litellm_model: openai/gpt-4o needs OPENAI_API_KEY in the environment")
        for p in info.value.problems
    ), info.value.problems
    import os

    assert os.environ["OPENAI_API_KEY"] == value  # the environment is left as it was


def test_an_azure_deployment_is_not_refused_for_a_price_only_its_replies_can_tell(tmp_path, monkeypatch):
    """Azure's model string names a deployment ("my-prod-deployment"), which no
    price list knows; litellm prices its replies by the model they name. The
    reply check (UnpricedCall) is what holds there."""
    for name in ("AZURE_API_KEY", "AZURE_API_BASE", "AZURE_API_VERSION"):
        monkeypatch.setenv(name, "set-for-the-test-000")
    design = design_with(tmp_path, "azure/my-prod-deployment")
    loaded = preflight(design, tmp_path / "run", workers=None)
    assert loaded.design.models[0].litellm_model == "azure/my-prod-deployment"
    # config.json says so: priced from each reply, no price known before
    assert llm.price_record(loaded.design.models[0]) == {
        "source": "reply",
        "input_usd_per_mtok": None,
        "output_usd_per_mtok": None,
    }


# ---- a price the design gives ----------------------------------------------------------------------
# A model released after the pinned litellm (or a fine-tune, a private
# deployment) has no price in litellm's table; the design can pre-register
# one. It is registered with litellm, so replies are priced through the same
# response_cost path, and it must come back from the lookup as given.

# Routed to an OpenAI-compatible server, unpriced by litellm, used by no other test.
DESIGN_PRICED = "custom_openai/sim-careful"


def test_a_design_price_lets_a_model_litellm_cannot_price_run_and_is_recorded(tmp_path, keys, capsys):
    price = {"input": 3.0, "output": 15.0, "cached_input": 0.3}
    design = write_design(
        tmp_path / "design",
        households=2,
        anchors=NO_WITNESS,
        models=[
            {
                "name": "m0",
                "litellm_model": "openai/model-released-tomorrow",
                "api_base": "https://api.example.test/v1",
                "price_usd_per_mtok": price,
            }
        ],
    )
    from confirmatory.engine.check import check_command

    assert check_command(design) == 0  # `check` accepts it and shows the price
    assert (
        "price (USD per million tokens, the design's table): input 3, cached_input 0.3, output 15, reasoning 15"
        in capsys.readouterr().out
    )
    loaded = preflight(design, tmp_path / "run", workers=None)
    model = loaded.design.models[0]
    assert (model.price_usd_per_mtok.input, model.price_usd_per_mtok.output) == (3.0, 15.0)
    llm.prepare(loaded.design.models)
    assert llm.price_record(model) == {
        "source": "design",
        "input_usd_per_mtok": 3.0,
        "output_usd_per_mtok": 15.0,
        "table": {"input": 3.0, "cached_input": 0.3, "cache_write": None, "output": 15.0, "reasoning": 15.0},
    }


def test_a_design_price_replaces_the_price_litellm_has(tmp_path, keys):
    design = write_design(
        tmp_path / "design",
        households=2,
        anchors=NO_WITNESS,
        models=[
            {
                "name": "m0",
                "litellm_model": "openai/gpt-4o-2024-11-20",
                "api_base": "https://api.example.test/v1",
                "price_usd_per_mtok": {"input": 2.0, "output": 9.0, "cached_input": 0.5},
            }
        ],
    )
    loaded = preflight(design, tmp_path / "run", workers=None)
    llm.prepare(loaded.design.models)
    record = llm.price_record(loaded.design.models[0])
    assert (record["input_usd_per_mtok"], record["output_usd_per_mtok"]) == (2.0, 9.0)


def test_a_reply_is_counted_at_the_design_price_over_real_http(sim):
    model = ModelSpec(
        name="m0",
        litellm_model=DESIGN_PRICED,
        cap_usd=1.0,
        reserve_usd=0.01,
        params={"temperature": 0.0, "max_tokens": 400},
        timeout_s=5.0,
        api_base=sim.url,
        price_usd_per_mtok={"input": 0.5, "output": 2.5},
    )
    llm.prepare([model])
    reply = llm.chat(model, [{"role": "user", "content": USER}])
    expected = (reply.usage["input_tokens"] * 0.5 + reply.usage["output_tokens"] * 2.5) / 1e6
    assert reply.cost_usd == pytest.approx(expected) and reply.cost_usd > 0


def test_cached_input_is_priced_at_the_input_price_unless_the_design_gives_a_cache_price():
    from litellm.types.utils import PromptTokensDetailsWrapper, Usage

    from confirmatory.design.model import Price

    def input_cost(model: str) -> float:
        usage = Usage(
            prompt_tokens=1_000_000,
            completion_tokens=0,
            total_tokens=1_000_000,
            prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=500_000),
        )
        return llm._lib().cost_per_token(model=model, usage_object=usage)[0]

    assert (
        llm.register_prices(
            [
                llm.AdHocModel(
                    name="d", litellm_model="openai/cache-test-default", price_usd_per_mtok=Price(input=2.0, output=8.0)
                ),
                llm.AdHocModel(
                    name="g",
                    litellm_model="openai/cache-test-given",
                    price_usd_per_mtok=Price(input=2.0, output=8.0, cached_input=0.5),
                ),
            ]
        )
        == []
    )
    assert input_cost("openai/cache-test-default") == pytest.approx(2.0)  # never counted below an uncached token
    assert input_cost("openai/cache-test-given") == pytest.approx(0.5 * 0.5 + 2.0 * 0.5)


@pytest.mark.parametrize(
    "price, expected",
    [
        ({"input": 0.0, "output": 0.0}, "input and output are both 0"),
        ({"input": -1.0, "output": 2.0}, "must be >= 0"),
        ({"input": 1.0}, "output"),
        ({"input": 1.0, "output": 2.0, "cached": 0.1}, "cached"),
        ({"input": "1.0", "output": 2.0}, "input"),
    ],
)
def test_a_bad_design_price_is_refused_naming_the_key(tmp_path, keys, capsys, price, expected):
    from confirmatory.engine.check import check_command

    design = write_design(
        tmp_path / "design",
        households=2,
        anchors=NO_WITNESS,
        models=[
            {
                "name": "m0",
                "litellm_model": "openai/gpt-4o",
                "api_base": "https://api.example.test/v1",
                "price_usd_per_mtok": price,
            }
        ],
    )
    assert check_command(design) == 3
    err = capsys.readouterr().err
    assert "models" in err and "price_usd_per_mtok" in err and expected in err, err
    run_dir = tmp_path / "runs" / "r"
    assert run_command(design, run_dir, quiet=True) == 3 and not run_dir.exists()


def test_a_registered_price_that_does_not_reach_the_lookup_is_a_problem():
    # litellm resolves "openai/gpt-4o" to its own entry when asked for the
    # bare name; a price registered under a name no call requests never counts.
    from confirmatory.design.model import Price

    (problem,) = llm.register_prices(
        [llm.AdHocModel(name="x", litellm_model="not-a-provider/x", price_usd_per_mtok=Price(input=1.0, output=1.0))]
    )
    assert problem.startswith("models[0].price_usd_per_mtok: ") and "not-a-provider/x" in problem


def test_config_json_records_the_price_each_model_is_counted_at(tmp_path):
    # One model with a design price, one served by the simulator: config.json
    # (written after llm.prepare registered both) says which price and whence.
    design = write_design(
        tmp_path / "design",
        households=2,
        anchors=NO_WITNESS,
        models=[
            {
                "name": "m0",
                "litellm_model": "openai/config-price-test",
                "price_usd_per_mtok": {"input": 1.5, "output": 6.0, "cached_input": 0.75},
            },
            {"name": "m1", "litellm_model": "openai/sim-sloppy", "api_base": "simulator"},
        ],
    )
    run_dir = tmp_path / "run"
    assert run_command(design, run_dir, quiet=True) == 0
    models = json.loads((run_dir / "config.json").read_text())["models"]
    table = {"input": 1.5, "cached_input": 0.75, "cache_write": None, "output": 6.0, "reasoning": 6.0}
    assert models["m0"]["price"] == {
        "source": "design",
        "input_usd_per_mtok": 1.5,
        "output_usd_per_mtok": 6.0,
        "table": table,
    }
    in_price, out_price = SIM_PRICES["sim-sloppy"]
    assert models["m1"]["price"] == {
        "source": "simulator",
        "input_usd_per_mtok": pytest.approx(in_price * 1e6),
        "output_usd_per_mtok": pytest.approx(out_price * 1e6),
        # the simulator's whole catalogue table: what its invoice bills at
        "table": SIM_PRICE_TABLE["sim-sloppy"],
    }
    # the manifest keeps the table too
    manifest = json.loads((run_dir / "models" / "m0" / "manifest.json").read_text())
    assert manifest["price"] == {"source": "design", "table": table}


@pytest.fixture()
def litellm_prices():
    """litellm's price table as it was before the test (registration is process-wide)."""
    import copy

    lib = llm._lib()
    saved = copy.deepcopy(lib.model_cost)
    yield lib
    lib.model_cost.clear()
    lib.model_cost.update(saved)


def test_two_models_naming_one_model_string_at_two_prices_are_refused(litellm_prices):
    from confirmatory.design.model import Price

    a = llm.AdHocModel(
        name="a",
        litellm_model="openai/my-llama-twice",
        api_base="http://127.0.0.1:8001/v1",
        price_usd_per_mtok=Price(input=1.0, output=1.0),
    )
    b = llm.AdHocModel(
        name="b",
        litellm_model="openai/my-llama-twice",
        api_base="http://127.0.0.1:8002/v1",
        price_usd_per_mtok=Price(input=9.0, output=9.0),
    )
    problems = llm.register_prices([a, b])
    assert problems and problems[0].startswith(
        "models[1].price_usd_per_mtok: models[0] names the same litellm_model 'openai/my-llama-twice' at another price"
    ), problems
    with pytest.raises(ValueError, match="names the same litellm_model"):
        llm.prepare([a, b])


def test_a_design_price_that_would_change_another_models_table_price_is_refused(litellm_prices):
    # litellm files openai/gpt-4-0613's price under its table key, which the
    # bare "gpt-4-0613" shares: registering one re-prices the other.
    from confirmatory.design.model import Price

    proxied = llm.AdHocModel(
        name="proxied",
        litellm_model="openai/gpt-4-0613",
        api_base="http://127.0.0.1:4000/v1",
        price_usd_per_mtok=Price(input=100.0, output=200.0),
    )
    direct = llm.AdHocModel(name="direct", litellm_model="gpt-4-0613")
    table = llm._lookup("gpt-4-0613")
    assert table is not None and table != (100.0, 200.0)
    problems = llm.register_prices([proxied, direct])
    assert any(
        p.startswith(
            "models[1].litellm_model: registering the other models' prices changed litellm's price for gpt-4-0613"
        )
        for p in problems
    ), problems


def test_a_turn_after_an_unreported_reply_is_refused_so_the_ceiling_holds(sim):
    from confirmatory.core.errors import HarnessContractError
    from confirmatory.core.money import to_nusd

    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    attempt = AttemptSpend(
        spend,
        model="m0",
        household="hh-x",
        arm="alone",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )
    with attempt.bound():
        attempt.checkpoint()
        reply = llm.chat(spec(PRICED, sim.url), [{"role": "user", "content": USER}])
        with pytest.raises(HarnessContractError, match="left unreported"):
            attempt.checkpoint()  # the next turn would spend past what the ceiling knows of
        # reported, even under another kind: counted once, and the conversation may go on
        attempt.add_call("explain", reply.start, reply.end, cost_usd=reply.cost_usd)
        attempt.checkpoint()
    assert attempt.unreported() == (0, 0)
    assert spend.total_nusd == to_nusd(reply.cost_usd) > 0


@pytest.mark.parametrize(
    "cost",
    [
        {"cost_nusd": 1.5},
        {"cost_nusd": -1},
        {"cost_nusd": True},
        {"cost_usd": -0.01},
        {"cost_usd": float("nan")},
        {"cost_usd": "0.01"},
    ],
)
def test_a_cost_that_is_not_a_count_of_money_is_refused_before_anything_is_counted(cost):
    import time

    from confirmatory.core.errors import HarnessContractError

    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    attempt = AttemptSpend(
        spend,
        model="m0",
        household="hh-x",
        arm="alone",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )
    now = time.time()
    with pytest.raises(HarnessContractError, match="must be a non-negative"):
        attempt.add_call("chat", now, now, **cost)
    assert attempt.snapshot() == (0, []) and spend.total_nusd == 0
