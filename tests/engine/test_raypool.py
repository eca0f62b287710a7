"""The engine pool on a real local Ray cluster, and runs whose engine runs on it.

One cluster for the whole module (starting one costs seconds): 2 CPUs, no
dashboard. Every actor asks for a tenth of a CPU, so the pools of several
models fit beside each other; every wait has a timeout. Skipped when ray is
not installed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[test,ray]'")

from runhelpers import events, make_run, of, verified  # noqa: E402

from confirmatory.core.errors import BudgetStop  # noqa: E402
from confirmatory.engine.pool import PoolFailure  # noqa: E402
from confirmatory.engine.raypool import RayEnginePool, public_address  # noqa: E402
from confirmatory.engine.spend import AttemptSpend, Spend  # noqa: E402
from confirmatory.runtime.clock import Clock  # noqa: E402

FAKE = "confirmatory.testing.fakes:engine_op"
CPUS = 0.1
RAY_ENGINE = {"target": FAKE, "backend": "ray", "address": "local", "num_cpus": CPUS, "workers_per_model": 2}
TOOLS = {"tools": ["double"]}


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def an_attempt() -> AttemptSpend:
    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    return AttemptSpend(
        spend,
        model="m0",
        household="hh-000",
        arm="calculator",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )


def test_features_travel_per_call_and_an_engine_exception_arrives_as_itself(cluster):
    with RayEnginePool("confirmatory.demo.engine:serve", 2, num_cpus=CPUS) as pool:
        household = {
            "adults": [{"age": 40, "employment_income": 30_000, "self_employment_income": 0}],
            "children": [{"age": 4}],
            "housing_cost": 8_000,
            "region": "north",
        }
        traced = pool.call("explain", {"household": household}, {"tools": ["calculate"], "explain": True})
        assert "net income" in traced["trace"]
        with pytest.raises(Exception) as info:  # the same pool, another arm's features: refused
            pool.call("explain", {"household": household}, {"tools": ["calculate"]})
        assert type(info.value).__name__ == "FeatureNotOffered"  # itself, not Ray's wrapper
        assert type(info.value).__module__ == "confirmatory.demo.engine"
        assert pool.alive()
        placed = pool.placement()
        assert placed["actors"] == 2 and placed["cpus"] == pytest.approx(0.2)
        assert placed["nodes"] == [ray.get_runtime_context().get_node_id()]


def test_a_target_that_cannot_be_imported_refuses_to_start(cluster):
    with pytest.raises(PoolFailure, match="did not start"):
        RayEnginePool("confirmatory.no_such_module:serve", 1, num_cpus=CPUS, start_timeout_s=60)


@pytest.mark.slow
def test_a_killed_actor_breaks_the_pool_and_fails_the_call_in_flight(cluster):
    pool = RayEnginePool(FAKE, 2, num_cpus=CPUS)
    try:
        outcome: list[BaseException | int] = []

        def caller():
            try:
                outcome.append(pool.call("double", {"x": 1, "sleep_s": 30}, TOOLS))
            except BaseException as exc:  # captured for the assertions below
                outcome.append(exc)

        t = threading.Thread(target=caller, daemon=True)
        t.start()
        time.sleep(0.5)  # the call reaches its actor
        busy = pool._idle.queue[0]  # the idle one is the other
        victim = next(a for a in pool._all if a is not busy)
        ray.kill(victim.handle, no_restart=True)
        t.join(timeout=15)
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], PoolFailure), outcome
        assert not pool.alive()
        with pytest.raises(PoolFailure, match="broken"):
            pool.call("double", {"x": 1}, TOOLS)
    finally:
        pool.close()


def test_an_idle_actor_killed_makes_the_pool_not_alive(cluster):
    with RayEnginePool(FAKE, 2, num_cpus=CPUS) as pool:
        assert pool.call("double", {"x": 4}, TOOLS) == 8
        ray.kill(pool._all[1].handle, no_restart=True)
        deadline = time.monotonic() + 15
        while pool.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pool.alive()
        assert "engine actor 1 died" in pool._broken


@pytest.mark.slow
def test_an_ended_attempt_stops_waiting_and_its_late_result_is_discarded(cluster):
    """The deadline abandons the attempt while its engine call runs: the call
    raises BudgetStop at once; the actor is lent again only after the late
    call ended, and no later call receives its result."""
    with RayEnginePool(FAKE, 1, num_cpus=CPUS) as pool:
        attempt = an_attempt()
        outcome: list[object] = []

        def caller():
            with attempt.bound():
                try:
                    outcome.append(pool.call("double", {"x": 1, "sleep_s": 2.0}, TOOLS))
                except BaseException as exc:  # captured for the assertions below
                    outcome.append(exc)

        t = threading.Thread(target=caller, daemon=True)
        t.start()
        time.sleep(0.5)
        assert attempt.abandon() is not None
        t.join(timeout=1.0)
        assert not t.is_alive(), "the call went on waiting for an attempt that was abandoned"
        assert len(outcome) == 1 and isinstance(outcome[0], BudgetStop), outcome
        assert pool.late_calls() == 1
        # The next call waits for the actor, then gets its own answer, not the late one (2).
        assert pool.call("double", {"x": 21}, TOOLS) == 42
        assert pool.late_calls() == 0
        assert pool.alive()


def test_an_address_is_recorded_without_its_credentials():
    assert public_address("ray://user:secret@head.example:10001") == "ray://head.example:10001"
    assert public_address("ray://head.example:10001") == "ray://head.example:10001"
    assert public_address("auto") == "auto"
    assert public_address("10.0.0.5:6379") == "10.0.0.5:6379"


# -- runs whose engine is on the cluster ------------------------------------------


def reference_on_ray(directory: Path) -> Path:
    """The bundled reference design, its engine moved onto Ray: the same
    harness, calculator and households (pinned where they are), the engine's
    ``serve`` run by Ray actors instead of the factory's process pool."""
    from confirmatory.commands.demo import REFERENCE_DESIGN

    demo = REFERENCE_DESIGN.parent
    directory.mkdir(parents=True)
    rel = os.path.relpath(demo, directory)
    text = REFERENCE_DESIGN.read_text()
    for name in ("harness.py", "calculator.py", "engine.py"):
        text = text.replace(f'"{name}" = ', f'"{rel}/{name}" = ')
    text = text.replace('path = "households.jsonl"', f'path = "{rel}/households.jsonl"')
    old = 'factory = "confirmatory.demo.engine:start"'
    assert old in text
    text = text.replace(
        old, f'target = "confirmatory.demo.engine:serve"\nbackend = "ray"\naddress = "local"\nnum_cpus = {CPUS}'
    )
    design = directory / "reference-ray.toml"
    design.write_text(text)
    return design


@pytest.mark.slow
def test_the_reference_study_on_ray_completes_and_verifies(cluster, tmp_path):
    from confirmatory.anchors.witness import init_local_witness
    from confirmatory.design.load import load_design
    from confirmatory.engine import llm
    from confirmatory.engine.config import build_config
    from confirmatory.engine.run import Run
    from confirmatory.sim.faults import FaultPlan
    from confirmatory.sim.server import SimProvider

    loaded = load_design(reference_on_ray(tmp_path / "study"))
    run_dir = tmp_path / "runs" / "ref"
    init_local_witness(run_dir.parent / ".witness")
    config = build_config(loaded, argv=["confirmatory", "run"], registry_path=tmp_path / "models.json")
    sim = SimProvider(FaultPlan.from_table(loaded.design.simulator)).start()
    try:
        llm.prepare(loaded.design.models)
        result = Run(
            loaded,
            run_dir,
            install_signals=False,
            config=config,
            api_bases={m.name: sim.url for m in loaded.design.models},
        ).execute()
    finally:
        sim.stop()
    assert result.status == "completed", result
    verified(run_dir)
    backend = json.loads((run_dir / "manifest.json").read_text())["engine"]["backend"]
    assert backend["name"] == "ray" and set(backend["pools"]) == {"careful", "gemini", "sloppy", "truncates"}
    # The calculator arms' answers came through the actors' engine calls.
    tools = [json.loads(p.read_text()) for p in (run_dir / "models").rglob("calculator*/0.json")]
    assert tools and any(c["kind"] == "tool" for r in tools for c in r["calls"])


@pytest.mark.slow
def test_a_run_on_ray_completes_verifies_and_records_its_backend(cluster, tmp_path):
    from confirmatory.design.load import load_design
    from confirmatory.engine.config import build_config
    from confirmatory.engine.run import Run
    from confirmatory.testing.designs import write_design

    design = write_design(tmp_path / "design", households=4, models=2, engine=RAY_ENGINE)
    loaded = load_design(design)
    config = build_config(loaded, argv=["confirmatory", "run"], registry_path=tmp_path / "models.json")
    run = Run(loaded, tmp_path / "run", install_signals=False, config=config)
    result = run.execute()
    assert result.status == "completed", result
    verified(run.run_dir)
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    backend = manifest["engine"]["backend"]
    assert manifest["engine"]["target"] == FAKE and "factory" not in manifest["engine"]
    assert backend["name"] == "ray" and backend["ray_version"] == ray.__version__
    assert backend["nodes"] == 1 and backend["cpus"] == 2.0
    node = ray.get_runtime_context().get_node_id()
    assert backend["pools"] == {
        m: {"actors": 2, "num_cpus_per_actor": CPUS, "cpus": pytest.approx(2 * CPUS), "nodes": [node]}
        for m in ("m0", "m1")
    }
    cfg = json.loads((run.run_dir / "config.json").read_text())
    assert cfg["engine"]["backend"] == backend
    assert any("Ray" in line and "nodes" in line for line in cfg["not_pinned_down"])
    # Every tool call went through the pool: the calculator arm's answers are the engine's.
    answers = [json.loads(p.read_text())["answer"] for p in (run.run_dir / "models").rglob("calculator/0.json")]
    assert len(answers) == 8 and all(a == {"value": 12} for a in answers)  # 2 * len("hh-00k")


@pytest.mark.slow
def test_an_actor_killed_mid_run_stops_its_model_with_cause_pool(cluster, tmp_path):
    households = [{"id": f"hh-{i:03d}", "engine_s": 0.2} for i in range(8)]
    run = make_run(tmp_path, households=households, models=2, engine=RAY_ENGINE)
    run.start()
    m0 = run.models["m0"]
    deadline = time.monotonic() + 30
    while not list((run.run_dir / "models" / "m0" / "records").rglob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    ray.kill(m0.pool._all[0].handle, no_restart=True)
    result = run.wait()
    verified(run.run_dir)
    stops = of(events(run.run_dir, "m0"), "stop")
    assert [s["cause"] for s in stops] == ["pool"], stops
    assert "engine" in stops[0]["detail"]
    assert not of(events(run.run_dir, "m1"), "stop")
    assert len(of(events(run.run_dir, "m1"), "household")) == 8
    assert result.stop_cause == "pool"


@pytest.mark.slow
def test_an_engine_call_past_the_attempt_deadline_gives_the_deadline_stop(cluster, tmp_path):
    households = [{"id": "hh-000", "plan": {"calculator/0": "engine-hang"}, "engine_hang_s": 20}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=households, models=1, engine=RAY_ENGINE, rules={"attempt_deadline_s": 1.0})
    result = run.execute()
    verified(run.run_dir)
    ev = events(run.run_dir, "m0")
    assert of(ev, "trigger", cause="deadline") and of(ev, "stop", cause="deadline")
    rec = json.loads((run.run_dir / "models" / "m0" / "records" / "hh-000" / "calculator" / "0.json").read_text())
    assert rec["status"] == "deadline" and rec["error"]["type"] == "confirmatory.AttemptDeadline"
    # The lane stopped waiting for the engine at the deadline (BudgetStop from
    # the pool), not 20 s later, and was not left stuck in the call.
    assert result.abandoned_lanes == 0
    assert result.stop_cause == "deadline"
