"""The plan's worst case holds on real runs: designs that cross the ceiling,
run against the simulated provider through litellm, never spend more than the
bound `confirmatory check` printed for them (docs/DESIGN-FILE.md "The plan")."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from confirmatory.anchors.witness import init_local_witness
from confirmatory.engine.check import check_command

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "confirmatory" / "demo"
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
SIM = ("sim-careful", "sim-sloppy", "sim-truncates")
ARMS = (
    '[[arms]]\nname = "alone"\nfeatures = { tools = [] }\n',
    '[[arms]]\nname = "calculator"\nfeatures = { tools = ["calculate"] }\n',
    '[[arms]]\nname = "calculator_explain"\nfeatures = { tools = ["calculate"], explain = true }\n',
)


def write_sim_design(
    directory: Path, *, households: int, arms: int, models: list[dict], ceiling_usd: float, before_usd: float
) -> Path:
    """The reference study cut down: its harness, engine and households (the
    first few), no planted faults, the given models, a small ceiling."""
    directory.mkdir(parents=True)
    rows = (DEMO / "households.jsonl").read_text().splitlines(keepends=True)[:households]
    (directory / "households.jsonl").write_text("".join(rows))
    # the pins name the package's own files, relative to the design (as the harness is loaded from there)
    pins = "".join(
        f"{json.dumps(os.path.relpath(DEMO / name, directory.resolve()))} = "
        f'"{hashlib.sha256((DEMO / name).read_bytes()).hexdigest()}"\n'
        for name in ("harness.py", "calculator.py", "engine.py")
    )
    clone = init_local_witness(directory / "witness")
    parts = [
        f'[study]\nid = "bound"\nseed = 7\nspend_before_stage_usd = {before_usd}\n',
        f"[ceiling]\noverall_cap_usd = {ceiling_usd}\nmargin_usd = 0.0\n",
        '[harness]\nentry = "confirmatory.demo.harness:run"\n',
        f"[harness.pins]\n{pins}\n",
        '[engine]\nfactory = "confirmatory.demo.engine:start"\nworkers_per_model = 1\n',
        '[households]\npath = "households.jsonl"\n'
        f'sha256 = "{hashlib.sha256((directory / "households.jsonl").read_bytes()).hexdigest()}"\n',
        *ARMS[:arms],
    ]
    for k, m in enumerate(models):
        parts.append(
            f'[[models]]\nname = "m{k}"\nlitellm_model = "{m.get("model") or "openai/" + m["sim"]}"\ncap_usd = 10.0\n'
            f"reserve_usd = 0.001\nlanes = {m['lanes']}\n"
            f"params = {{ temperature = 0.0, max_tokens = {m['max_tokens']} }}\n"
            'timeout_s = 5.0\napi_base = "simulator"\n'
        )
    parts += [
        "[rules]\nmax_reruns_per_arm = 1\nattempt_deadline_s = 30\nrerun_wait_s = 0\n",
        "[host]\nsample_interval_s = 0.5\nmax_gap_s = 2\n",
        f'[anchors]\ninterval_s = 5\ncommand = ["{{python}}", "-m", "confirmatory.anchors.witness", '
        f'"--clone", {json.dumps(str(clone))}]\n',
        "[simulator]\nseed = 11\n",
    ]
    path = directory / "design.toml"
    path.write_text("\n".join(parts))
    return path


def printed_bound(design: Path) -> int:
    out, err = io.StringIO(), io.StringIO()
    assert check_command(design, out=out, err=err) == 0, err.getvalue()
    found = re.search(r"so the run spends at most .* = \$(\d+)\.(\d{6}) in all", out.getvalue())
    assert found, out.getvalue()
    return int(found[1]) * 10**9 + int(found[2]) * 1000


@st.composite
def crossing_designs(draw):
    n_models = draw(st.integers(1, 3))
    return {
        "households": draw(st.integers(2, 4)),
        "arms": draw(st.integers(1, 3)),
        "models": [
            {
                "sim": draw(st.sampled_from(SIM)),
                "lanes": draw(st.integers(1, 3)),
                "max_tokens": draw(st.sampled_from([8, 64, 512])),
            }
            for _ in range(n_models)
        ],
        # a call costs $0.0001 to $0.003, a household of one arm about $0.0004 at the least
        # (4 households of sim-careful, one arm, came to $0.00177): these cross within the first two
        "ceiling_usd": draw(st.sampled_from([0.0002, 0.0004, 0.0006])),
        "before_usd": draw(st.sampled_from([0.0, 0.0001])),  # below every ceiling drawn
    }


@pytest.mark.slow
# each example is a real run (seconds): a few, and a failure reported as found, not shrunk
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(crossing_designs())
def test_a_run_that_crosses_the_ceiling_never_spends_more_than_the_bound_check_printed(spec):
    with tempfile.TemporaryDirectory() as tmp:
        design = write_sim_design(Path(tmp) / "design", **spec)
        bound = printed_bound(design)
        run_dir = Path(tmp) / "run"
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
            capture_output=True,
            text=True,
            timeout=240,
        )
        lines = [json.loads(ln) for ln in (run_dir / "run.jsonl").read_text().splitlines()]
        (close,) = [o for o in lines if o.get("event") == "close"]
        ceiling = [o for o in lines if o.get("event") == "ceiling"]
        assert done.returncode == 5 and ceiling, done.stderr  # it crossed: the case the bound is about
        assert close["spend_total_nusd"] > ceiling[0]["ceiling_nusd"]
        assert close["spend_total_nusd"] <= bound, (close["spend_total_nusd"], bound)


@pytest.mark.slow
@pytest.mark.parametrize("litellm_model", ["anthropic/sim-claude", "gemini/sim-gemini"])
def test_a_ceiling_run_on_the_anthropic_and_gemini_shapes_stops_within_the_bound_check_printed(tmp_path, litellm_model):
    """Anthropic's cache writes (dearer than its input) and Gemini's thoughts
    (billed as output) are counted by the bound as by the spend."""
    spec = {
        "households": 4,
        "arms": 2,
        "models": [{"model": litellm_model, "lanes": 2, "max_tokens": 512}],
        "ceiling_usd": 0.002,
        "before_usd": 0.0,
    }
    design = write_sim_design(tmp_path / "design", **spec)
    bound = printed_bound(design)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [json.loads(ln) for ln in (run_dir / "run.jsonl").read_text().splitlines()]
    (close,) = [o for o in lines if o.get("event") == "close"]
    ceiling = [o for o in lines if o.get("event") == "ceiling"]
    assert done.returncode == 5 and ceiling, done.stderr
    assert ceiling[0]["ceiling_nusd"] < close["spend_total_nusd"] <= bound, (close["spend_total_nusd"], bound)
    # the simulator's price the bound states is the dearest of each side (a cache write for Anthropic)
    out = io.StringIO()
    check_command(design, out=out, err=io.StringIO())
    dearest = "$3.75 / $15" if litellm_model.startswith("anthropic/") else "$1.25 / $10"
    assert f"the simulator's price, {dearest} per million input / output tokens" in out.getvalue()
