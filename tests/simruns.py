"""Runs of the reference harness on the simulated provider, with the invoice to hold them against.

``sim_design`` cuts the reference study down to the given models and arms
(its harness, engine and first households, pinned), with planted faults;
``run_on_sim`` runs it in-process against a ``SimProvider`` and returns the
result and the simulator's invoice (``GET /_sim/invoice``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confirmatory.anchors.witness import init_local_witness
from confirmatory.design.load import load_design
from confirmatory.engine import llm
from confirmatory.engine.run import Run
from confirmatory.sim.faults import FaultPlan
from confirmatory.sim.server import SimProvider

DEMO = Path(__file__).resolve().parents[1] / "confirmatory" / "demo"
ARMS = {
    "alone": "features = { tools = [] }",
    "calculator": 'features = { tools = ["calculate"] }',
    "calculator_explain": 'features = { tools = ["calculate"], explain = true }',
}
# Replies billed though nothing of them reached the harness, and failures
# billed nothing: each attempt is rerun, and only what was billed counts.
FAULTS = [
    {"kind": "null_choices", "household": "hh-001", "pass": 0, "call": 0},
    {"kind": "empty_choices", "household": "hh-002", "pass": 0, "call": 0},
    {"kind": "rate_limit", "household": "hh-003", "pass": 0, "call": 0},
    {"kind": "truncate", "household": "hh-004", "pass": 0, "call": 0},
]


def sim_design(
    directory: Path,
    models: list[tuple[str, str]],
    arms: list[str],
    households: int = 5,
    faults: list[dict[str, Any]] | None = None,
) -> Path:
    """The reference study cut down: its harness, engine and first households,
    the given (name, litellm_model) models on the simulator, the planted faults."""
    directory.mkdir(parents=True)
    rows = (DEMO / "households.jsonl").read_text().splitlines(keepends=True)[:households]
    (directory / "households.jsonl").write_text("".join(rows))
    pins = "".join(
        f"{json.dumps(os.path.relpath(DEMO / name, directory.resolve()))} = "
        f'"{hashlib.sha256((DEMO / name).read_bytes()).hexdigest()}"\n'
        for name in ("harness.py", "calculator.py", "engine.py")
    )
    clone = init_local_witness(directory / "witness")
    parts = [
        '[study]\nid = "invoice"\nseed = 7\nspend_before_stage_usd = 0.0\n',
        "[ceiling]\noverall_cap_usd = 5.0\nmargin_usd = 0.5\n",
        '[harness]\nentry = "confirmatory.demo.harness:run"\n',
        f"[harness.pins]\n{pins}",
        '[engine]\nfactory = "confirmatory.demo.engine:start"\nworkers_per_model = 1\n',
        '[households]\npath = "households.jsonl"\n'
        f'sha256 = "{hashlib.sha256((directory / "households.jsonl").read_bytes()).hexdigest()}"\n',
        *(f'[[arms]]\nname = "{a}"\n{ARMS[a]}\n' for a in arms),
        *(
            f'[[models]]\nname = "{name}"\nlitellm_model = "{model}"\ncap_usd = 1.0\nreserve_usd = 0.02\n'
            'lanes = 2\nparams = { temperature = 0.0, max_tokens = 512 }\ntimeout_s = 10.0\napi_base = "simulator"\n'
            for name, model in models
        ),
        "[rules]\nmax_reruns_per_arm = 2\nattempt_deadline_s = 60\nrerun_wait_s = 0\n",
        "[host]\nsample_interval_s = 0.5\nmax_gap_s = 5\n",
        f'[anchors]\ninterval_s = 5\ncommand = ["{{python}}", "-m", "confirmatory.anchors.witness", '
        f'"--clone", {json.dumps(str(clone))}]\n',
        "[simulator]\nseed = 11\n",
        *(
            "[[simulator.faults]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fault.items())
            for fault in (FAULTS if faults is None else faults)
        ),
    ]
    path = directory / "design.toml"
    path.write_text("\n".join(parts))
    return path


def run_on_sim(design: Path, run_dir: Path, after_prepare: Callable[[], None] | None = None) -> tuple[Any, dict]:
    """Run ``design`` in-process against a simulator the test reads the invoice of;
    ``after_prepare`` runs once the runner has frozen its prices, before any call."""
    loaded = load_design(design)
    with SimProvider(FaultPlan.from_table(loaded.design.simulator)) as sim:
        llm.prepare(loaded.design.models)
        if after_prepare is not None:
            after_prepare()
        run = Run(loaded, run_dir, install_signals=False, api_bases={m.name: sim.url for m in loaded.design.models})
        try:
            result = run.execute()
        finally:
            run.close()
        return result, sim.invoice()
