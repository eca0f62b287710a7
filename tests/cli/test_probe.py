"""``probe-seed`` against the simulated provider, recording into a temp registry."""

from __future__ import annotations

import json

import pytest

from confirmatory.commands.probe import ProbeResult, probe_seed_command, record
from confirmatory.sim import FaultPlan, SimProvider

REGISTRY = {
    "openai/sim-careful": {"base_model": "sim", "serving_precision": "fp32", "seed_reproducible": None},
    "openai/other": {"base_model": "other"},
}


@pytest.fixture()
def registry(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps(REGISTRY, indent=2))
    return path


def test_a_deterministic_sim_model_is_recorded_as_seed_reproducible_keeping_other_entries(registry, capsys):
    with SimProvider(None, seed=2) as sim:
        assert probe_seed_command("openai/sim-careful", api_base=sim.url, registry=registry) == 0
        assert sim.usage()["sim-careful"]["calls"] == 2
    data = json.loads(registry.read_text())
    entry = data["openai/sim-careful"]
    assert entry["seed_reproducible"] is True
    assert entry["seed_probe"]["matched"] is True and entry["seed_probe"]["t"] > 0
    assert entry["base_model"] == "sim" and entry["serving_precision"] == "fp32"
    assert data["openai/other"] == {"base_model": "other"}
    assert "reproducible" in capsys.readouterr().out
    assert not list(registry.parent.glob(".*.tmp"))  # the atomic write left no temp file behind


def test_the_simulator_marker_starts_a_simulator_for_the_probe_and_creates_the_registry(tmp_path):
    path = tmp_path / "new" / "models.json"
    assert probe_seed_command("openai/sim-careful", api_base="simulator", registry=path) == 0
    assert json.loads(path.read_text())["openai/sim-careful"]["seed_reproducible"] is True


def test_a_mismatch_is_recorded_as_not_reproducible_inside_a_models_table(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": {"openai/x": {"note": "kept"}}}))
    record(path, "openai/x", ProbeResult(matched=False, t=1.5, first="a", second="b"))
    entry = json.loads(path.read_text())["models"]["openai/x"]
    assert entry == {"note": "kept", "seed_reproducible": False, "seed_probe": {"t": 1.5, "matched": False}}


def test_a_failed_probe_call_records_nothing_and_exits_1(registry):
    plan = FaultPlan.from_table({"faults": [{"kind": "server_error"}]})
    with SimProvider(plan) as sim:
        assert probe_seed_command("openai/sim-careful", api_base=sim.url, registry=registry) == 1
    assert json.loads(registry.read_text()) == REGISTRY


@pytest.mark.parametrize("text", ["[1, 2]", "{broken", '{"models": {}}'])
def test_a_registry_the_outcome_cannot_be_written_into_is_refused_before_any_request(tmp_path, capsys, text):
    # The probe sent its two paid requests, then record() raised: a
    # traceback, and nothing recorded.
    path = tmp_path / "models.json"
    path.write_text(text)
    with SimProvider(None, seed=2) as sim:
        assert probe_seed_command("openai/sim-careful", api_base=sim.url, registry=path) == 3
        assert sim.usage().get("sim-careful", {}).get("calls", 0) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"probe-seed: the registry {path}: ") and err.endswith("; nothing was sent\n")
    assert err.count("\n") == 1
    assert path.read_text() == text
