"""Loading a design: defaults, households, pins, and the problems it names."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC
from pathlib import Path

import pytest
from pydantic import ValidationError
from runhelpers import DEMO, minimal_design

from confirmatory.design.load import load_design, resolve_entry
from confirmatory.design.model import CLASSES, Design, DesignError, Evidence, Fault, Host, ModelSpec


def copy_design(tmp_path: Path, module: str) -> Path:
    """The minimal design with a harness module of its own; the module's name
    gets a unique suffix (an imported module is cached under its name, and the
    loader refuses a design whose module would come from elsewhere)."""
    module = f"{module}_{uuid.uuid4().hex[:8]}"
    return minimal_design(tmp_path, module, "DESCRIBE = None\n\ndef run(*args):\n    return {'answer': 1}\n")


def harness_module(design: Path) -> str:
    return design.read_text().split('entry = "')[1].split(":")[0]


def rehash_households(design: Path, households: Path) -> None:
    text = design.read_text()
    old = text.split('sha256 = "')[1].split('"')[0]
    design.write_text(text.replace(old, hashlib.sha256(households.read_bytes()).hexdigest()))


def problems_of(path: Path, **kw) -> list[str]:
    with pytest.raises(DesignError) as info:
        load_design(path, **kw)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def test_the_bundled_minimal_design_loads_with_its_households_sorted_and_pins_verified():
    loaded = load_design(DEMO / "minimal.toml", workers=2)
    raw = (DEMO / "minimal.toml").read_bytes()
    assert loaded.raw == raw and loaded.sha256 == hashlib.sha256(raw).hexdigest()
    assert loaded.base_dir == DEMO
    assert [h.id for h in loaded.households] == ["m-01", "m-02", "m-03", "m-04", "m-05", "m-06"]
    assert loaded.households[0].payload["id"] == "m-01" and "adults" in loaded.households[0].payload
    pinned = hashlib.sha256((DEMO / "minimal_harness.py").read_bytes()).hexdigest()
    assert loaded.pins == {
        "minimal_harness.py": pinned,  # and the engine it runs
        **{f: hashlib.sha256((DEMO / f).read_bytes()).hexdigest() for f in ("engine.py", "calculator.py")},
    }
    d = loaded.design
    assert [m.name for m in d.models] == ["careful", "sloppy", "truncates"]
    assert all(m.simulated for m in d.models) and d.models[0].served_name == "sim-careful"
    assert [a.name for a in d.arms] == ["alone", "calculator", "calculator_explain"]
    assert d.simulator is not None and d.simulator.faults == ()


def test_omitted_sections_take_the_documented_defaults(tmp_path):
    design = copy_design(tmp_path, "defaults_harness")
    text = design.read_text()
    text = text[: text.index("[rules]")]  # drop rules, host, anchors, simulator
    text += '[anchors]\ncommand = ["true"]\n'  # the one key without a default (a run must push its anchors)
    text = text.replace("margin_usd = 0.5\n", "").replace("spend_before_stage_usd = 0.0\n", "")
    text = text.replace("lanes = 1\n", "").replace("timeout_s = 10.0\napi_base", "api_base")
    design.write_text(text)
    d = load_design(design).design
    assert d.study.spend_before_stage_usd == 0.0 and d.ceiling.margin_usd == 25.0
    assert d.ceiling.ceiling_usd == 28.0
    assert d.models[0].timeout_s == 120.0 and d.models[2].lanes == 2
    r = d.rules
    assert (r.max_reruns_per_arm, r.attempt_deadline_s, r.inconclusive_household_limit, r.stop_follow_s) == (
        2,
        3600,
        5,
        5,
    )
    assert r.precedence == CLASSES
    h = d.host
    assert (h.sample_interval_s, h.max_gap_s, h.sampler_failure_s, h.read_tries, h.pressure_threshold) == (
        30,
        45,
        300,
        5,
        10.0,
    )
    assert h.window is None and h.evidence == ()
    assert d.anchors.interval_s == 900 and d.anchors.command == ("true",)
    assert d.simulator is None


def test_a_loaded_design_is_frozen():
    d = load_design(DEMO / "minimal.toml").design
    with pytest.raises(ValidationError):
        d.models[0].cap_usd = 1e9  # type: ignore[misc]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("[1, 2]", "line 7: not a JSON object"),
        ("{broken", "line 7: not JSON"),
        ('{"name": "no id"}', 'line 7: "id" is missing'),
        ('{"id": null}', 'line 7: "id" must be a string slug (got None)'),
        ('{"id": "has space"}', 'line 7: "id" must be a slug'),
        ('{"id": ".."}', 'line 7: "id" must not be only dots'),
        ('{"id": "%s"}' % ("h" * 303), 'line 7: "id" must be at most 128 characters, as it becomes a path component'),
        ('{"id": "m-03"}', 'line 7: duplicate household id "m-03"'),
    ],
)
def test_a_bad_household_line_is_refused_naming_its_line(tmp_path, line, expected):
    design = copy_design(tmp_path, "households_harness")
    households = tmp_path / "minimal-households.jsonl"
    households.write_text(households.read_text() + line + "\n")
    rehash_households(design, households)
    [problem] = problems_of(design)
    assert problem.startswith(f'households.path: "minimal-households.jsonl" {expected}')


def test_a_missing_households_file_is_refused(tmp_path):
    design = copy_design(tmp_path, "nohouse_harness")
    (tmp_path / "minimal-households.jsonl").unlink()
    [problem] = problems_of(design)
    assert problem.startswith("households.path: cannot read") and "minimal-households.jsonl" in problem


def test_paths_are_relative_to_the_design_file_not_the_working_directory(tmp_path, monkeypatch):
    copy_design(tmp_path, "relative_harness")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert len(load_design(Path("..") / "design.toml").households) == 6


def test_the_harness_module_itself_must_be_pinned(tmp_path):
    design = copy_design(tmp_path, "unpinned_harness")
    module = harness_module(design)
    (tmp_path / "other.py").write_text("")
    text = design.read_text()
    design.write_text(
        text.replace(f'"{module}.py" =', '"other.py" =').replace(
            text.split(f'"{module}.py" = "')[1].split('"')[0], hashlib.sha256(b"").hexdigest()
        )
    )
    [problem] = problems_of(design)
    assert problem.startswith("harness.entry: its module is loaded from") and "does not pin" in problem


def test_an_entry_naming_no_module_is_refused(tmp_path):
    design = copy_design(tmp_path, "entry_harness")
    design.write_text(design.read_text().replace("confirmatory.demo.engine:start", "no_such_engine_mod:start"))
    assert problems_of(design) == [
        f'engine.factory: no module named "no_such_engine_mod" (looked on sys.path and in {tmp_path.resolve()})'
    ]


def test_an_unreadable_design_is_one_problem(tmp_path):
    assert problems_of(tmp_path / "absent.toml")[0].startswith("design: cannot read")


def test_resolve_entry_imports_from_the_design_directory(tmp_path):
    module = harness_module(copy_design(tmp_path, "resolvable_harness"))
    fn = resolve_entry(f"{module}:run", tmp_path)
    assert fn() == {"answer": 1}
    with pytest.raises(DesignError, match='has no attribute "nope"'):
        resolve_entry(f"{module}:nope", tmp_path)
    with pytest.raises(DesignError, match="is not callable"):
        resolve_entry(f"{module}:DESCRIBE", tmp_path)
    with pytest.raises(DesignError, match='^harness.entry: no module named "surely_not_a_module_here"'):
        resolve_entry("surely_not_a_module_here:run", tmp_path, key="harness.entry")


def spec(**kw) -> dict:
    base = {"name": "m", "litellm_model": "openai/x", "cap_usd": 1.0, "reserve_usd": 0.5}
    return {**base, **kw}


def test_a_reserve_may_equal_its_cap_but_not_exceed_it():
    assert ModelSpec(**spec(reserve_usd=1.0)).reserve_usd == 1.0
    with pytest.raises(ValidationError, match="must be <= cap_usd"):
        ModelSpec(**spec(reserve_usd=1.01))


@pytest.mark.parametrize(
    "params, words",
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"max_tokens": 10, "max_completion_tokens": 10}, "not both"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"temperature": "hot"}, "temperature must be a number"),
    ],
)
def test_decoding_params_are_checked_where_the_runner_relies_on_them(params, words):
    with pytest.raises(ValidationError, match=words):
        ModelSpec(**spec(params=params))


@pytest.mark.parametrize("name", ["a/b", "", ".", "..", "x y", "é", "a" * 129, "a" * 300])
def test_a_name_that_cannot_be_a_path_component_is_not_a_slug(name):
    with pytest.raises(ValidationError):
        ModelSpec(**spec(name=name))


def test_precedence_must_be_a_permutation_of_the_eight_classes():
    from confirmatory.design.model import Rules

    assert Rules(precedence=list(reversed(CLASSES))).precedence == tuple(reversed(CLASSES))
    with pytest.raises(ValidationError, match="exactly once"):
        Rules(precedence=list(CLASSES[:-1]))


def test_a_host_window_reads_iso_times_toml_datetimes_and_epoch_seconds():
    from datetime import datetime

    assert Host(window=["1970-01-01T00:00:10Z", 20]).window == (10.0, 20.0)
    aware = datetime(1970, 1, 1, 0, 1, tzinfo=UTC)
    assert Host(window=[0, aware]).window == (0.0, 60.0)
    with pytest.raises(ValidationError, match="needs a UTC offset"):
        Host(window=["2026-01-01T00:00:00", "2026-01-02T00:00:00Z"])


def test_evidence_needs_exactly_one_source_and_unique_names():
    assert Evidence(name="guard", path="/var/log/g").command is None
    assert Evidence(name="power", command=["pmset", "-g", "log"]).path is None
    with pytest.raises(ValidationError, match="exactly one"):
        Evidence(name="none")
    raw = json.loads(json.dumps({"host": {"evidence": [{"name": "g", "path": "a"}, {"name": "g", "path": "b"}]}}))
    from confirmatory.design.crosscheck import cross_problems

    assert cross_problems(raw) == ['host.evidence[1].name: duplicate slug "g"']


def test_a_fault_reads_pass_from_toml_and_refuses_unknown_kinds():
    assert Fault.model_validate({"kind": "hang", "pass": 1, "call": 0}).pass_ == 1
    with pytest.raises(ValidationError):
        Fault.model_validate({"kind": "meteor"})


def test_a_design_may_plan_every_fault_kind_the_simulator_serves():
    from confirmatory.design.model import FAULT_KINDS
    from confirmatory.sim.faults import FaultKind

    assert sorted(FAULT_KINDS) == sorted(k.value for k in FaultKind)
    for kind in FaultKind:
        assert Fault.model_validate({"kind": kind.value}).kind == kind.value


def test_a_design_built_directly_checks_matched_pairs_too():
    data = load_design(DEMO / "minimal.toml").design.model_dump(by_alias=True)
    data["models"][1]["matched_with"] = "ghost"
    with pytest.raises(ValidationError, match='models\\[1\\].matched_with: no model is named "ghost"'):
        Design.model_validate(data)


def test_a_design_without_an_anchor_command_is_refused(tmp_path):
    # A run whose anchors are never pushed could never pass verify.
    design = copy_design(tmp_path, "no_anchor_cmd_harness")
    text = design.read_text()
    start = text.index("[anchors]")
    end = text.index("\n[simulator]", start)
    design.write_text(text[:start] + text[end:])
    with pytest.raises(DesignError) as info:
        load_design(design)
    assert "anchors: missing" in info.value.problems


def test_a_slug_of_128_characters_is_one_and_of_129_is_refused_naming_its_length():
    ModelSpec(**spec(name="a" * 128))
    with pytest.raises(ValidationError, match="must be at most 128 characters.*got 129"):
        ModelSpec(**spec(name="a" * 129))
