"""The engine pool: real worker processes, features per call, death detected."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from confirmatory.engine.pool import PoolFailure, ProcessEnginePool, resolve_target

ENGINE = "confirmatory.demo.engine:serve"
HOUSEHOLD = {
    "adults": [{"age": 40, "employment_income": 30_000, "self_employment_income": 0}],
    "children": [{"age": 4}],
    "housing_cost": 8_000,
    "region": "north",
}


@pytest.fixture
def pool():
    p = ProcessEnginePool(ENGINE, workers=2)
    yield p
    p.close()


def test_features_travel_with_each_call_not_with_the_pool(pool):
    offered = {"tools": ["calculate"], "explain": True}
    plain = {"tools": ["calculate"]}
    traced = pool.call("explain", {"household": HOUSEHOLD}, offered)
    assert "net income" in traced["trace"]
    # The same pool, the same op, another arm's features: refused.
    with pytest.raises(Exception) as info:
        pool.call("explain", {"household": HOUSEHOLD}, plain)
    assert type(info.value).__name__ == "FeatureNotOffered"
    # And an arm with no tools cannot calculate, while one with the tool can.
    with pytest.raises(Exception, match="does not offer the calculate tool"):
        pool.call("calculate", {"household": HOUSEHOLD}, {"tools": []})
    assert pool.call("calculate", {"household": HOUSEHOLD}, plain)["net_income"] == traced["net_income"]
    assert pool.alive()


def test_an_engine_exception_arrives_as_itself_and_leaves_the_pool_usable(pool):
    from confirmatory.demo.calculator import InvalidHousehold

    with pytest.raises(InvalidHousehold):
        pool.call("calculate", {"household": {"adults": "none"}}, {"tools": ["calculate"]})
    assert pool.alive()
    assert pool.call("calculate", {"household": HOUSEHOLD}, {"tools": ["calculate"]})["net_income"] > 0


def test_killing_a_worker_makes_the_pool_not_alive_and_the_next_call_fail_promptly(pool):
    assert pool.alive()
    victim = pool._all[1].process
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=5)
    assert not pool.alive()
    t0 = time.monotonic()
    with pytest.raises(PoolFailure):
        pool.call("calculate", {"household": HOUSEHOLD}, {"tools": ["calculate"]})
    assert time.monotonic() - t0 < 2.0


def test_a_worker_killed_in_the_middle_of_a_call_fails_that_call(tmp_path):
    with ProcessEnginePool("tests.engine.test_pool:sleepy_engine", workers=1) as p:
        errors: list[BaseException] = []

        def caller():
            try:
                p.call("sleep", 30, {})
            except BaseException as exc:  # captured for the assertion below
                errors.append(exc)

        t = threading.Thread(target=caller)
        t.start()
        time.sleep(0.3)  # let the call reach the worker
        os.kill(p._all[0].process.pid, signal.SIGKILL)
        t.join(timeout=5)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], PoolFailure)
        assert not p.alive()


def test_close_is_idempotent_and_later_calls_raise_pool_failure():
    p = ProcessEnginePool(ENGINE, workers=2)
    procs = [w.process for w in p._all]
    p.close()
    p.close()
    assert not p.alive()
    assert all(not proc.is_alive() for proc in procs)
    with pytest.raises(PoolFailure):
        p.call("calculate", {"household": HOUSEHOLD}, {"tools": ["calculate"]})


def test_two_threads_share_one_pool_and_each_gets_its_own_answers(pool):
    results: dict[int, list[float]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def lane(k: int) -> None:
        try:
            for i in range(25):
                hh = dict(HOUSEHOLD, adults=[dict(HOUSEHOLD["adults"][0], employment_income=10_000 * (k + 1) + i)])
                results[k].append(pool.call("calculate", {"household": hh}, {"tools": ["calculate"]})["net_income"])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=lane, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures
    assert len(results[0]) == len(results[1]) == 25
    # Each lane's answers are its own: lane 1's incomes are all higher.
    assert max(results[0]) < min(results[1])


def test_a_target_that_cannot_be_imported_refuses_to_start():
    with pytest.raises(PoolFailure, match="did not start"):
        ProcessEnginePool("confirmatory.no_such_module:serve", workers=1)
    with pytest.raises(ValueError):
        resolve_target("no-colon")


def sleepy_engine(op, payload, features):
    """An engine whose call takes a while, so a test can kill it mid-call."""
    time.sleep(payload)
    return op


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_workers_outlive_the_interrupts_that_reach_the_whole_process_group(pool, signum):
    """Ctrl-C and a closed terminal signal every process of the job; the runner
    stops the run (cause interrupt) and closes the pool itself."""
    for worker in pool._all:
        os.kill(worker.process.pid, signum)
    time.sleep(0.3)
    assert pool.alive()
    assert pool.call("calculate", {"household": HOUSEHOLD}, {"tools": ["calculate"]})["net_income"] > 0


def test_a_design_naming_a_target_runs_it_in_the_runners_process_pool(tmp_path):
    """[engine] target instead of a factory: the runner starts the pool on the
    design's backend (processes by default) and records it."""
    import json

    from runhelpers import execute, verified

    engine = {"target": "confirmatory.testing.fakes:engine_op", "workers_per_model": 1}
    result, run_dir = execute(tmp_path, households=3, models=1, engine=engine)
    assert result.status == "completed", result
    verified(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["engine"] == {
        "target": "confirmatory.testing.fakes:engine_op",
        "workers_per_model": 1,
        "backend": {"name": "processes"},
    }
    answers = [json.loads(p.read_text())["answer"] for p in run_dir.rglob("calculator/0.json")]
    assert answers == [{"value": 12}] * 3  # the engine doubled len("hh-00k") in a worker process
