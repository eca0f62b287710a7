"""A run through the in-process fake provider writes the records a run through the HTTP simulator writes.

The bundled reference study (its harness, calculator and engine pool, its
fault plan: a 429, a 500 and a 503, a hang past the timeout, a malformed
body, a billed null reply, a truncation that survives, a bad answer), with
its second model on the Anthropic shape and its third on Gemini's, run by
``Run`` twice: once with its models' calls going over loopback HTTP to the
simulated provider, once to ``FakeProvider`` in this process. Every record
file is the same but for the times and lanes it carries, and so are the
attempt lines' decisions and costs and the close line's total; both verify.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from runhelpers import events, of, verified

from confirmatory.anchors.witness import init_local_witness
from confirmatory.commands.demo import REFERENCE_DESIGN
from confirmatory.design.load import load_design
from confirmatory.engine import llm
from confirmatory.engine.run import Run
from confirmatory.sim.faults import FaultPlan
from confirmatory.sim.server import SimProvider
from confirmatory.testing.fakeprovider import FakeProvider

DEMO = REFERENCE_DESIGN.parent
MODELS = ("careful", "sloppy", "truncates")
TIMES = frozenset({"start", "end", "lane"})  # what a record says of when and where it ran


def shaped_design(directory: Path) -> Path:
    """reference.toml with `sloppy` on the Anthropic shape and `truncates` on Gemini's."""
    directory.mkdir(parents=True)
    text = REFERENCE_DESIGN.read_text()
    for name in ("harness.py", "calculator.py", "engine.py", "households.jsonl"):
        rel = os.path.relpath(DEMO / name, directory)
        text = text.replace(f'"{name}"', f'"{rel}"')
    text = text.replace('litellm_model = "openai/sim-sloppy"', 'litellm_model = "anthropic/sim-sloppy"')
    text = text.replace('litellm_model = "openai/sim-truncates"', 'litellm_model = "gemini/sim-truncates"')
    # the Messages API takes no seed
    sloppy = text.index('name = "sloppy"')
    seeded = text.index("params = { temperature = 0.0, max_tokens = 512, seed = 7 }", sloppy)
    text = text[:seeded] + text[seeded:].replace(", seed = 7 }", " }", 1)
    path = directory / "design.toml"
    path.write_text(text)
    return path


def run_through(provider: Any, design: Path, run_dir: Path) -> tuple[Path, tuple[str, str]]:
    """The run directory and the provider's API base and root (what an error message may name)."""
    loaded = load_design(design)
    init_local_witness(run_dir.parent / ".witness")
    llm.prepare(loaded.design.models)
    with provider:
        bases = (provider.url, provider.root)
        run = Run(
            loaded, run_dir, install_signals=False, api_bases={m.name: provider.url for m in loaded.design.models}
        )
        run.start()
        result = run.wait()
        run.close()
    assert result.status == "completed", result
    verified(run_dir)
    return run_dir, bases


def untimed(obj: Any, bases: tuple[str, ...]) -> Any:
    if isinstance(obj, dict):
        return {k: untimed(v, bases) for k, v in obj.items() if k not in TIMES}
    if isinstance(obj, list):
        return [untimed(v, bases) for v in obj]
    if isinstance(obj, str):
        for base in bases:
            obj = obj.replace(base, "<api base>")
        # litellm's timeout message says how long the call took, measured
        return re.sub(r"time taken=[0-9.]+ seconds", "time taken=<s> seconds", obj)
    return obj


def records(run_dir: Path, bases: tuple[str, ...]) -> dict[str, Any]:
    return {
        p.relative_to(run_dir).as_posix(): untimed(json.loads(p.read_bytes()), bases)
        for p in sorted((run_dir / "models").glob("*/records/**/*.json"))
    }


def decisions(run_dir: Path) -> list[tuple]:
    return sorted(
        (m, a["household"], a["arm"], a["pass"], a["class"], a["action"], a["cost_nusd"])
        for m in MODELS
        for a in of(events(run_dir, m), "attempt")
    )


@pytest.mark.slow
def test_a_run_through_the_fake_provider_writes_the_records_of_a_run_through_the_http_simulator(tmp_path):
    design = shaped_design(tmp_path / "design")
    plan = FaultPlan.from_table(load_design(design).design.simulator)
    over_http, sim_bases = run_through(SimProvider(plan), design, tmp_path / "http" / "run")
    in_process, fake_bases = run_through(FakeProvider(plan), design, tmp_path / "fake" / "run")
    got, want = records(in_process, fake_bases), records(over_http, sim_bases)
    assert sorted(got) == sorted(want) and len(got) > 36
    assert {k: (got[k], want[k]) for k in want if got[k] != want[k]} == {}
    assert decisions(in_process) == decisions(over_http)
    shapes = {c.get("billing_shape") for r in got.values() for c in r["calls"]}
    assert {"chat", "responses", "anthropic", "gemini"} <= shapes
    classes = {d[4] for d in decisions(in_process)}
    assert {"ok", "provider", "model"} <= classes
    (close_http,) = of(events(over_http), "close")
    (close_fake,) = of(events(in_process), "close")
    assert close_fake["spend_total_nusd"] == close_http["spend_total_nusd"] > 0
