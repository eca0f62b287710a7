"""`confirmatory check`: every bad design is refused naming its key; a good one prints its plan."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from runhelpers import DEMO, minimal_design

from confirmatory.cli.main import main

HARNESS_SRC = "def run(model, household, arm, pool, spend, clock):\n    return {'answer': None}\n"


def make_design(tmp_path: Path, module: str = "plan_harness") -> Path:
    # A name of its own: an imported module is cached under its name, and the
    # loader refuses a design whose harness module would come from elsewhere.
    return minimal_design(tmp_path, f"{module}_{uuid.uuid4().hex[:8]}", HARNESS_SRC)


def harness_file(design: Path) -> Path:
    return design.parent / (design.read_text().split('entry = "')[1].split(":")[0] + ".py")


def edit(design: Path, old: str, new: str, count: int = 1) -> None:
    text = design.read_text()
    assert old in text, f"the planted fault did not apply: {old!r}"
    design.write_text(text.replace(old, new, count))


def check(*args: str):
    return CliRunner().invoke(main, ["check", *args])


def test_a_good_design_prints_its_plan_and_exits_zero(tmp_path):
    design = make_design(tmp_path)
    result = check(str(design))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "study: minimal-calculator (seed 20260101)" in out
    assert f"design sha256: {hashlib.sha256(design.read_bytes()).hexdigest()}" in out
    assert "households: 6" in out
    assert "arms: 3: alone, calculator, calculator_explain" in out
    assert "attempts in pass 0: 3 models x 6 households x 3 arms = 54" in out
    assert (
        "reruns: a lane waits 0.25 s before pass 1, 0.5 s before pass 2 (rerun_wait_s = 0.25, doubled each pass)" in out
    )
    assert "careful: openai/sim-careful via simulated provider; cap $0.500000, reserve $0.020000, lanes 2" in out
    assert "most it can spend: $0.500000, if no household costs more than its reserve $0.020000" in out
    assert "up to 2 (one per lane) can be under way when admission stops" in out
    assert "ceiling: overall cap $3.000000 + margin $0.500000 = $3.500000" in out
    assert "evidence: the git witness only (no [anchors.signer]: nothing signed, stamped or cosigned)" in out


def test_the_plan_counts_households_a_tight_cap_cannot_cover(tmp_path):
    design = make_design(tmp_path)
    edit(design, "cap_usd = 0.5\nreserve_usd = 0.02\nlanes = 1", "cap_usd = 0.05\nreserve_usd = 0.02\nlanes = 1")
    result = check(str(design))
    assert result.exit_code == 0, result.output
    assert "truncates: openai/sim-truncates" in result.output
    assert "at $0.020000 a household, the cap covers 2 of 6 households" in result.output


def test_the_plan_warns_when_caps_exceed_the_ceiling(tmp_path):
    design = make_design(tmp_path)
    edit(design, "overall_cap_usd = 3.0", "overall_cap_usd = 0.5")
    result = check(str(design))
    assert result.exit_code == 0
    assert "add up to more than the ceiling" in result.output


def test_the_plan_notes_a_reserve_larger_than_the_room_under_the_ceiling(tmp_path):
    design = make_design(tmp_path)
    edit(design, "spend_before_stage_usd = 0.0", "spend_before_stage_usd = 3.49")
    result = check(str(design))
    assert result.exit_code == 0, result.output
    assert (
        "note: careful's reserve $0.020000 is more than the room left under the ceiling ($0.010000);"
        " its first household may cross the ceiling, which ends the run"
    ) in result.output


def test_the_plan_notes_a_call_timeout_that_reaches_the_attempt_deadline(tmp_path):
    design = make_design(tmp_path)
    edit(design, "attempt_deadline_s = 60", "attempt_deadline_s = 3")
    result = check(str(design))
    assert result.exit_code == 0, result.output
    assert (
        "note: careful's call timeout 10 s is not below the attempt deadline 3 s; one slow call can reach"
        " the deadline, which stops the model"
    ) in result.output


# planted fault: old text -> new text, the key and words the refusal must name (, how many to replace)
BAD_DESIGNS = {
    "negative cap": (
        "cap_usd = 0.5\nreserve_usd = 0.02\nlanes = 1",
        "cap_usd = -1.0\nreserve_usd = 0.02\nlanes = 1",
        "models[2].cap_usd: must be >= 0",
    ),
    "reserve above cap": (
        "cap_usd = 0.5\nreserve_usd = 0.02\nlanes = 1",
        "cap_usd = 0.5\nreserve_usd = 0.9\nlanes = 1",
        "models[2].reserve_usd: must be <= cap_usd",
    ),
    "zero lanes": ("lanes = 1", "lanes = 0", "models[2].lanes: must be >= 1"),
    "misspelt precedence": ("precedence =", "precedenc =", "rules.precedenc: unknown key"),
    "precedence not a permutation": ('"inconclusive", "ok"]', '"ok", "ok"]', "rules.precedence: must list each"),
    "duplicate model slug": ('name = "sloppy"', 'name = "careful"', 'models[1].name: duplicate slug "careful"'),
    "model slug with a slash": ('name = "sloppy"', 'name = "slo/ppy"', "models[1].name: must be a slug"),
    "arm without a name": ('name = "calculator"\n', "", "arms[1].name: missing"),
    "missing study seed": ("seed = 20260101\n", "", "study.seed: missing"),
    "seed as a string": ("seed = 20260101", 'seed = "20260101"', "study.seed: must be an integer"),
    "matched_with naming nobody": (
        'matched_with = "careful"',
        'matched_with = "nobody"',
        'models[1].matched_with: no model is named "nobody"',
    ),
    "unknown top-level table": ("[anchors]", "[anchor]", "anchor: unknown key"),
    "timeout of zero": ("timeout_s = 10.0\napi_base", "timeout_s = 0\napi_base", "models[0].timeout_s: must be > 0"),
    "no models": ("[[models]]", "[[old_models]]", "models: missing", -1),
    "workers below one": ("workers_per_model = 2", "workers_per_model = 0", "engine.workers_per_model: must be >= 1"),
    "entry without a callable": (":run", "", "harness.entry: must be"),
    "households hash of the wrong shape": ('sha256 = "df47', 'sha256 = "XX47', "households.sha256: must be 64"),
    "max_gap shorter than the interval": (
        "max_gap_s = 5",
        "max_gap_s = 0.5",
        "host.max_gap_s: must be >= sample_interval_s",
    ),
    "pressure above 100": (
        "pressure_threshold = 10.0",
        "pressure_threshold = 120.0",
        "host.pressure_threshold: must be <= 100",
    ),
    "unknown fault kind": (
        "[simulator]\nseed = 0",
        '[simulator]\nseed = 0\n[[simulator.faults]]\nkind = "explode"',
        "simulator.faults[0].kind: must be one of",
    ),
    "fault rate above one": (
        "[simulator]\nseed = 0",
        '[simulator]\nseed = 0\n[[simulator.faults]]\nkind = "auth"\nrate = 1.5',
        "simulator.faults[0].rate: must be <= 1",
    ),
    "evidence with both path and command": (
        "[anchors]",
        '[[host.evidence]]\nname = "guard"\npath = "g.log"\ncommand = ["cat"]\n\n[anchors]',
        "host.evidence[0]: give exactly one of path or command",
    ),
    "window end before start": (
        "read_tries = 5",
        'read_tries = 5\nwindow = ["2026-02-01T00:00:00Z", "2026-01-01T00:00:00Z"]',
        "host.window: end must come after start",
    ),
    "infinite overall cap": (
        "overall_cap_usd = 3.0",
        "overall_cap_usd = inf",
        "ceiling.overall_cap_usd: must be a finite",
    ),
    "api_base that is not a URL": ('api_base = "simulator"', 'api_base = "localhost:9"', "models[0].api_base: must be"),
    "not TOML": ("[study]", "[study", "design: not valid TOML"),
}


@pytest.mark.parametrize("name", sorted(BAD_DESIGNS))
def test_check_refuses_a_bad_design_naming_the_key(tmp_path, name):
    old, new, expected, *count = BAD_DESIGNS[name]
    design = make_design(tmp_path)
    assert check(str(design)).exit_code == 0  # the same design without the planted fault passes
    edit(design, old, new, *count)
    result = check(str(design))
    assert result.exit_code == 3, result.output
    assert f"{design}: {expected}" in result.output


def test_check_lists_every_problem_at_once(tmp_path):
    design = make_design(tmp_path)
    edit(design, "lanes = 1", "lanes = 0")
    edit(design, "precedence =", "precedenc =")
    edit(design, 'name = "sloppy"', 'name = "careful"')
    result = check(str(design))
    assert result.exit_code == 3
    for key in ("models[2].lanes", "rules.precedenc", "models[1].name", "models[1].matched_with"):
        assert key in result.output
    assert "refused (4 problems)" in result.output


def test_a_drifted_pin_is_refused_naming_the_file_and_both_hashes(tmp_path):
    design = make_design(tmp_path)
    harness = harness_file(design)
    expected = hashlib.sha256(harness.read_bytes()).hexdigest()
    harness.write_text(HARNESS_SRC + "# an edit after the design was frozen\n")
    actual = hashlib.sha256(harness.read_bytes()).hexdigest()
    result = check(str(design))
    assert result.exit_code == 3
    line = next(x for x in result.output.splitlines() if "harness.pins" in x)
    assert harness.name in line and f"expected sha256 {expected}" in line and f"actual {actual}" in line


def test_a_missing_pinned_file_is_refused(tmp_path):
    design = make_design(tmp_path)
    harness = harness_file(design)
    harness.unlink()
    result = check(str(design))
    assert result.exit_code == 3
    assert f'harness.pins["{harness.name}"]: pinned file' in result.output and "not found" in result.output


def test_workers_that_differ_from_the_design_are_refused_naming_both(tmp_path):
    design = make_design(tmp_path)
    assert check(str(design), "--workers", "2").exit_code == 0
    result = check(str(design), "--workers", "4")
    assert result.exit_code == 3
    assert "engine.workers_per_model: the design says 2, --workers says 4" in result.output


def test_a_household_file_that_changed_is_refused_naming_both_hashes(tmp_path):
    design = make_design(tmp_path)
    households = tmp_path / "minimal-households.jsonl"
    expected = hashlib.sha256(households.read_bytes()).hexdigest()
    households.write_text(households.read_text().replace('"m-06"', '"m-07"'))
    actual = hashlib.sha256(households.read_bytes()).hexdigest()
    result = check(str(design))
    assert result.exit_code == 3
    assert (
        f'households.sha256: "minimal-households.jsonl" has sha256 {actual}, the design expects {expected}'
        in result.output
    )


def test_the_console_command_refuses_a_bad_design_in_a_real_process(tmp_path):
    design = make_design(tmp_path)
    edit(design, "lanes = 1", "lanes = 0")
    code = (
        "import sys; from confirmatory.cli.main import main\n"
        "try:\n    main()\nfinally:\n    print('litellm loaded:', 'litellm' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "check", str(design)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    assert f"{design}: models[2].lanes: must be >= 1 (got 0)" in done.stderr
    assert "litellm loaded: False" in done.stderr  # check stays light


def test_the_module_entry_point_prints_the_plan_of_the_bundled_minimal_design():
    done = subprocess.run(
        [sys.executable, "-m", "confirmatory.cli.main", "check", str(DEMO / "minimal.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "attempts in pass 0: 3 models x 6 households x 3 arms = 54" in done.stdout


def test_a_design_path_that_is_a_directory_is_refused_by_the_check_command(tmp_path, capsys):
    # (The click command still answers with a usage error first: cli.py's dir_okay=False.)
    from confirmatory.engine.check import check_command

    folder = tmp_path / "design.toml"
    folder.mkdir()
    assert check_command(folder) == 3
    assert f"{folder}: design: cannot read {folder}: Is a directory" in capsys.readouterr().err


def test_the_plan_states_the_runs_worst_case_from_lanes_and_the_costliest_call(tmp_path):
    """The ceiling plus, per lane, the costliest call: the simulator's context
    window and twice max_tokens at its dearest price of each side
    (docs/DESIGN-FILE.md)."""
    from confirmatory.core.simulated import SIM_MAX_INPUT_TOKENS, SIM_PRICE_TABLE

    design = make_design(tmp_path)
    out = check(str(design)).output
    text = design.read_text()
    # every model of the minimal design: its lanes, its max_tokens (if any)
    import tomllib

    models = tomllib.loads(text)["models"]
    total = 3_500_000_000
    for m in models:
        # the dearest kind of each side (a prompt written to a cache costs more than plain input)
        table = SIM_PRICE_TABLE[m["litellm_model"].split("/")[-1]]
        pin = max(table["input"], table["cached_input"], table["cache_write"]) / 1e6
        pout = max(table["output"], table["reasoning"]) / 1e6
        asked = m.get("params", {}).get("max_tokens")
        out_tokens = 2 * asked if asked else 4096
        call = -(-round((pin * SIM_MAX_INPUT_TOKENS + pout * out_tokens) * 1e9) // 1000) * 1000
        assert f"costliest single call: ${call / 1e9:.6f}: a prompt of 16,384 tokens" in out, out
        total += m.get("lanes", 2) * call
    assert f"= ${total / 1e9:.6f} in all (spend before this stage, $0.000000, included)" in out, out
    assert "at most one on each of its" in out
