"""Property: whatever mix of failures is planted in whatever small design, the verifier finds no violation."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runhelpers import make_run, verified

from confirmatory.engine.resume import request_resume

KINDS = [
    "ok",
    "ok",
    "ok",
    "provider",
    "unavailable",
    "timeout",
    "model",
    "truncated",
    "operator",
    "forbidden",
    "harness",
    "inconclusive",
    "expensive",
    "hang",
]
ARMS = ["alone", "calculator", "explain"]


@st.composite
def designs(draw):
    n_models = draw(st.integers(1, 3))
    n_households = draw(st.integers(1, 6))
    arms = ARMS[: draw(st.integers(1, 3))]
    households = []
    for i in range(n_households):
        plan = {}
        for arm in arms:
            for p in range(3):
                kind = draw(st.sampled_from(KINDS))
                if kind != "ok":
                    key = f"{arm}/{p}" if draw(st.booleans()) else f"m{draw(st.integers(0, n_models - 1))}:{arm}/{p}"
                    plan[key] = kind
        households.append({"id": f"hh-{i:03d}", "plan": plan, "latency_s": draw(st.sampled_from([0.0, 0.005]))})
    models = [
        {
            "name": f"m{k}",
            "lanes": draw(st.integers(1, 2)),
            "cap_usd": draw(st.sampled_from([0.004, 0.01, 10.0])),
            "reserve_usd": draw(st.sampled_from([0.001, 0.003])),
        }
        for k in range(n_models)
    ]
    return {
        "households": households,
        "models": models,
        "arms": tuple(arms),
        "overall_cap_usd": draw(st.sampled_from([5.0, 100.0])),
        "margin_usd": 1.0,
        "rules": {
            "max_reruns_per_arm": draw(st.integers(0, 2)),
            "attempt_deadline_s": 0.3,
            "inconclusive_household_limit": draw(st.integers(0, 2)),
        },
        "engine_factory": "confirmatory.testing.fakes:null_engine",
    }


def _operator(run, done: threading.Event) -> None:
    """A person who resumes any paused model a moment after its pause."""
    answered = set()
    while not done.is_set():
        for name, m in run.models.items():
            # Only a pause that holds a lane back needs a person: a pause
            # with no rerun left ends with the run.
            if m.paused and m.waiting_resume and (name, m.pause_t) not in answered:
                answered.add((name, m.pause_t))
                request_resume(run.run_dir, name)
        done.wait(0.02)


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_the_verifier_finds_no_violation_in_any_run_with_planted_failures(design):
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), **design)
        run.start()
        done = threading.Event()
        person = threading.Thread(target=_operator, args=(run, done), daemon=True)
        person.start()
        try:
            result = run.wait()
        finally:
            done.set()
            person.join()
        assert result.status in ("completed", "stopped", "ceiling")
        verified(run.run_dir)
