"""The simulated provider, driven through litellm over real loopback HTTP.

Checks each API shape the harness uses, the sim models' policy, the fault
plan's selection, cost accounting against the server's own token counters,
and that the sim itself never imports litellm.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from confirmatory.cli.main import main
from confirmatory.core.money import to_nusd
from confirmatory.engine import llm
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider
from confirmatory.sim.behaviour import Conversation, decide, household_from, rule_of_thumb

ROOT = Path(__file__).resolve().parents[2]
HOUSEHOLD = {"adults": [{"age": 40, "employment_income": 30000}], "children": 1, "rental_income": 2000}
USER = f"Household:\n```json\n{json.dumps(HOUSEHOLD)}\n```\nWhat is its annual net income?"
CALCULATE = {
    "type": "function",
    "function": {
        "name": "calculate",
        "parameters": {"type": "object", "properties": {"household": {"type": "object"}}},
    },
}
RESPONSES_CALCULATE = {"type": "function", "name": "calculate", "parameters": CALCULATE["function"]["parameters"]}


def model_spec(name: str, litellm_model: str, api_base: str | None) -> llm.AdHocModel:
    return llm.AdHocModel(
        name=name, litellm_model=litellm_model, api_base=api_base, timeout_s=5.0, params={"temperature": 0.0, "seed": 7}
    )


@pytest.fixture(scope="module")
def sim():
    with SimProvider(None, seed=11) as provider:
        yield provider


def model(sim: SimProvider, served: str = "sim-careful") -> llm.AdHocModel:
    spec = model_spec(name=served, litellm_model=f"openai/{served}", api_base=sim.url)
    llm.prepare([spec], SIM_PRICES)
    return spec


def header(attempt: str) -> dict[str, str]:
    return {"X-Confirmatory-Attempt": attempt}


def test_chat_with_tools_calls_calculate_then_reports_the_tool_result(sim):
    spec = model(sim)
    messages = [{"role": "user", "content": USER}]
    first = llm.chat(spec, messages, tools=[CALCULATE], extra_headers=header("h1/calculator/0"))
    assert first.finish_reason == "tool_calls" and first.content is None
    (call,) = first.tool_calls
    assert call["name"] == "calculate"
    assert json.loads(call["arguments"]) == {"household": HOUSEHOLD}
    assert first.cost_usd and first.cost_usd > 0
    assert first.usage["input_tokens"] > 0 and first.start <= first.end

    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": "calculate", "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"net_income": 27123.5})},
    ]
    second = llm.chat(spec, messages, tools=[CALCULATE], extra_headers=header("h1/calculator/0"))
    assert second.finish_reason == "stop" and not second.tool_calls
    assert second.content == 'Answer: {"net_income": 27123.5}'
    assert second.cost_usd and second.cost_usd > 0


def test_chat_with_a_json_response_format_answers_bare_json_by_rule_of_thumb(sim):
    spec = model(sim)
    reply = llm.chat(spec, [{"role": "user", "content": USER}], response_format={"type": "json_object"})
    assert json.loads(reply.content) == {"net_income": 0.75 * 32000}
    assert reply.finish_reason == "stop"
    assert reply.cost_usd and reply.cost_usd > 0


def test_responses_api_calls_the_tool_then_answers_with_its_result(sim):
    spec = model(sim)
    items: list[dict[str, Any]] = [{"role": "user", "content": USER}]
    first = llm.responses(spec, items, tools=[RESPONSES_CALCULATE], extra_headers=header("h1/calculator/1"))
    (call,) = first.tool_calls
    assert first.kind == "responses" and first.finish_reason == "tool_calls"
    assert json.loads(call["arguments"])["household"] == HOUSEHOLD
    items += [
        {"type": "function_call", "call_id": call["id"], "name": call["name"], "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["id"], "output": json.dumps({"net_income": 100.0})},
    ]
    second = llm.responses(spec, items, tools=[RESPONSES_CALCULATE], text_format={"type": "json_object"})
    assert json.loads(second.content) == {"net_income": 100.0}
    assert second.finish_reason == "stop"
    assert second.cost_usd and second.cost_usd > 0
    assert second.usage["output_tokens"] > 0


def test_models_endpoint_lists_the_catalogues_models(sim):
    with urllib.request.urlopen(f"{sim.url}/models", timeout=5) as resp:
        ids = [m["id"] for m in json.load(resp)["data"]]
    assert ids == ["sim-careful", "sim-sloppy", "sim-truncates", "sim-reasoner", "sim-claude", "sim-gemini"]


def test_summed_call_costs_equal_the_servers_token_counts_times_the_prices():
    with SimProvider(None, seed=5) as fresh:
        specs = [model(fresh, served) for served in SIM_PRICES]
        total_nusd = 0
        for i in range(12):
            spec = specs[i % len(specs)]
            reply = llm.chat(
                spec,
                [{"role": "user", "content": USER + " " * i}],
                tools=[CALCULATE] if i % 2 else None,
                extra_headers=header(f"h{i}/a/0"),
            )
            total_nusd += to_nusd(reply.cost_usd)
        expected = 0
        for served, counts in fresh.usage().items():
            in_price, out_price = SIM_PRICES[served]
            expected += counts["prompt_tokens"] * to_nusd(in_price) + counts["completion_tokens"] * to_nusd(out_price)
        assert sum(c["calls"] for c in fresh.usage().values()) == 12
    assert total_nusd == expected > 0


def test_sim_truncates_stops_at_the_length_limit_first_and_finishes_when_the_request_is_resent(sim):
    spec = model(sim, "sim-truncates")
    truncated_attempts = 0
    for i in range(12):
        attempt = f"t{i}/alone/0"
        messages = [{"role": "user", "content": USER}]
        first = llm.chat(spec, messages, extra_headers=header(attempt))
        if first.finish_reason == "length":
            truncated_attempts += 1
            again = llm.chat(spec, messages, max_tokens=4096, extra_headers=header(attempt))
            assert again.finish_reason == "stop"
    assert 0 < truncated_attempts < 12


def test_sim_sloppy_is_sometimes_wrong_or_unparseable_but_deterministic():
    def answers(seed: int) -> list[str]:
        conv = Conversation(texts=(("user", USER),), tool_names=(), tool_results=(), json_mode=True)
        return [
            decide(conv, model="sim-sloppy", seed=seed, attempt=f"h{i}/alone/0", call=0, first_try=True).content
            for i in range(60)
        ]

    right = json.dumps({"net_income": rule_of_thumb(HOUSEHOLD)})
    got = answers(3)
    assert got == answers(3)
    assert right in got and any(a != right for a in got)
    assert any(not a.startswith("{") for a in got)


def test_household_is_found_in_a_fence_a_whole_message_or_inline_text():
    assert household_from(USER) == HOUSEHOLD
    assert household_from(json.dumps(HOUSEHOLD)) == HOUSEHOLD
    assert household_from(f"Household:\n{json.dumps(HOUSEHOLD)}\nWhat?") == HOUSEHOLD
    assert household_from("no household here") == {}


def test_a_fault_applies_only_where_every_selector_matches():
    plan = FaultPlan.from_table(
        {
            "seed": 1,
            "faults": [
                {
                    "kind": "rate_limit",
                    "model": "openai/sim-careful",
                    "household": "h1",
                    "arm": "a",
                    "pass": 0,
                    "call": 1,
                },
            ],
        }
    )
    assert plan.fault_for("sim-careful", "h1/a/0", 1).kind == "rate_limit"
    assert plan.fault_for("sim-careful", "h1/a/0", 0) is None
    assert plan.fault_for("sim-careful", "h1/a/1", 1) is None
    assert plan.fault_for("sim-careful", "h2/a/0", 1) is None
    assert plan.fault_for("sim-sloppy", "h1/a/0", 1) is None


def test_a_fault_rate_is_a_seeded_draw_that_hits_about_that_share_of_calls():
    plan = FaultPlan.from_table({"seed": 9, "faults": [{"kind": "server_error", "rate": 0.3}]})
    hits = [plan.fault_for("sim-careful", f"h{i}/a/0", 0) is not None for i in range(2000)]
    assert hits == [plan.fault_for("sim-careful", f"h{i}/a/0", 0) is not None for i in range(2000)]
    assert 0.25 < sum(hits) / len(hits) < 0.35


def test_a_fault_plan_refuses_an_unknown_kind_naming_the_entry():
    with pytest.raises(ValueError, match=r"simulator.faults\[0\].kind"):
        FaultPlan.from_table({"faults": [{"kind": "meteor"}]})


def test_a_fault_plan_reads_the_design_modules_pydantic_table_too():
    design = pytest.importorskip("confirmatory.design.model")
    table = design.Simulator.model_validate(
        {"seed": 4, "hang_s": 2.0, "faults": [{"kind": "hang", "pass": 1, "call": 0, "hang_s": 0.5}]}
    )
    plan = FaultPlan.from_table(table)
    assert plan.seed == 4 and plan.hang_s == 2.0
    (fault,) = plan.faults
    assert (fault.kind, fault.pass_, fault.call) == ("hang", 1, 0)
    assert plan.hang_seconds(fault) == 0.5


def test_the_sim_package_never_imports_litellm():
    code = "import sys, confirmatory.sim, confirmatory.sim.server; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, ignored",
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "ctrl-c-started-with-sigint-ignored", "sigterm"],
)
def test_the_sim_provider_command_prints_its_url_serves_and_stops_on_ctrl_c(sig, ignored):
    # Started with SIGINT ignored, as a shell starts a background job (and so
    # a CI script run with &): Python then never raises KeyboardInterrupt,
    # and the simulator used to serve on. SIGUSR1 makes the child print every
    # thread's stack (faulthandler), so a failure shows where it was.
    code = (
        "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
        "from confirmatory.sim.server import serve_command; sys.exit(serve_command(0, None))"
    )
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        with urllib.request.urlopen(f"{url}/models", timeout=5) as resp:
            assert resp.status == 200
        # It bills as the in-process simulator does, and serves the invoice.
        gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        request = urllib.request.Request(
            f"{url}/models/sim-gemini:generateContent",
            data=json.dumps(gemini).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            meta = json.load(resp)["usageMetadata"]
        with urllib.request.urlopen(url.removesuffix("/v1") + "/_sim/invoice", timeout=5) as resp:
            invoice = json.load(resp)
        assert invoice["sim-gemini"]["calls"] == 1
        assert invoice["sim-gemini"]["tokens"]["reasoning"] == meta["thoughtsTokenCount"] > 0
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the simulator did not stop within 10 s of {sig!r}; its threads:\n{err}")
        assert rc == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_sim_provider_command_says_in_one_line_that_its_port_is_in_use():
    # It used to end in a traceback ("OSError: [Errno 98] Address already in use"), exit 1.
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), "sim-provider", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert proc.returncode == 3, proc.stderr  # as for a design whose [simulator] table it refuses
    assert proc.stdout == ""
    assert proc.stderr == f"sim-provider: cannot listen on 127.0.0.1 port {port}: Address already in use\n"


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_the_sim_provider_command_refuses_a_port_out_of_range_as_a_usage_error(port):
    # 99999 used to end in a traceback ("OverflowError: bind(): port must be 0-65535."), exit 1.
    result = CliRunner().invoke(main, ["sim-provider", "--port", port])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert f"Invalid value for '--port': {port} is not in the range 0<=x<=65535." in result.output


def test_prepare_prices_a_simulator_model_with_the_sims_own_prices_by_default():
    spec = model_spec(name="truncates", litellm_model="openai/sim-truncates", api_base="simulator")
    llm.prepare([spec])
    prompt_usd, completion_usd = llm._lib().cost_per_token(
        model="openai/sim-truncates", prompt_tokens=1000, completion_tokens=1000
    )
    assert (prompt_usd, completion_usd) == pytest.approx(
        (1000 * SIM_PRICES["sim-truncates"][0], 1000 * SIM_PRICES["sim-truncates"][1])
    )


def test_a_call_refuses_the_unresolved_simulator_marker():
    spec = model_spec(name="careful", litellm_model="openai/sim-careful", api_base="simulator")
    with pytest.raises(ValueError, match="simulator"):
        llm.chat(spec, [{"role": "user", "content": USER}])


def test_the_fault_plan_is_read_from_a_design_files_simulator_table(tmp_path):
    from confirmatory.sim.server import plan_from_design

    design = tmp_path / "design.toml"
    design.write_text(
        '[study]\nid = "x"\n\n[simulator]\nseed = 8\nhang_s = 1.0\n'
        '[[simulator.faults]]\nkind = "auth"\nmodel = "sim-sloppy"\npass = 0\nrate = 0.5\n'
    )
    plan = plan_from_design(design)
    assert plan.seed == 8 and plan.hang_s == 1.0
    (fault,) = plan.faults
    assert (fault.kind, fault.model, fault.pass_, fault.rate) == ("auth", "sim-sloppy", 0, 0.5)


def test_sixteen_threads_of_calls_each_get_an_answer_and_spend_matches_the_token_counts():
    from concurrent.futures import ThreadPoolExecutor

    with SimProvider(None, seed=21) as fresh:
        specs = [model(fresh, served) for served in SIM_PRICES]

        def one(i: int) -> int:
            reply = llm.chat(
                specs[i % 3],
                [{"role": "user", "content": USER}],
                tools=[CALCULATE] if i % 2 else None,
                extra_headers=header(f"h{i}/a/0"),
            )
            assert reply.content or reply.tool_calls
            return to_nusd(reply.cost_usd)

        with ThreadPoolExecutor(16) as pool:
            total = sum(pool.map(one, range(160)))
        usage = fresh.usage()
    expected = sum(
        c["prompt_tokens"] * to_nusd(SIM_PRICES[m][0]) + c["completion_tokens"] * to_nusd(SIM_PRICES[m][1])
        for m, c in usage.items()
    )
    assert sum(c["calls"] for c in usage.values()) == 160
    assert total == expected


def test_the_responses_api_refuses_a_seed_and_llm_never_sends_one(sim):
    """The real Responses API takes no seed (400 "Unknown parameter"); a
    design's seed goes to chat calls only, and llm.responses leaves it out."""
    import urllib.error
    import urllib.request

    body = {"model": "sim-careful", "input": [{"role": "user", "content": USER}], "seed": 7}
    request = urllib.request.Request(
        f"{sim.url}/responses", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400 and "Unknown parameter: 'seed'" in refused.value.read().decode()
    seeded = model(sim)
    assert seeded.params["seed"] == 7
    reply = llm.responses(seeded, [{"role": "user", "content": USER}], text_format={"type": "json_object"})
    assert json.loads(reply.content) == {"net_income": 0.75 * 32000}
    chat = llm.chat(seeded, [{"role": "user", "content": USER}], response_format={"type": "json_object"})
    assert json.loads(chat.content) == {"net_income": 0.75 * 32000}


@pytest.mark.parametrize(
    "text, said",
    [
        (
            "[simulator\nseed = 7\n",
            "not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 11)",
        ),
        ("[simulator]\nseed = [1]\n", "simulator.seed: [1] is not a number"),
        ("[simulator]\nfaults = 5\n", "simulator.faults: 5 is not a list of tables ([[simulator.faults]])"),
        ('[[simulator.faults]]\nkind = "hang"\npass = "a"\n', "simulator.faults[0].pass: 'a' is not a number"),
    ],
    ids=["a TOML syntax error", "a seed that is a list", "faults that are a number", "a pass that is a word"],
)
def test_the_sim_provider_command_names_the_design_file_and_its_problem_in_one_line(tmp_path, text, said):
    # A syntax error said "sim-provider: Expected ']' ... (at line 1, column 11)": no file; a seed
    # given as a list, or faults as a number, ended in a TypeError traceback (exit 1); a pass given
    # as a word said "invalid literal for int() with base 10: 'a'": neither file nor key.
    design = tmp_path / "bad.toml"
    design.write_text(text)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), "sim-provider", "--design", str(design)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr  # as for the port it cannot listen on
    assert proc.stdout == ""
    assert proc.stderr == f"sim-provider: {design}: {said}\n"
