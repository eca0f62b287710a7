"""Runs that meet trouble in the runner itself or in the machine: a failing disk, a clock stepping back."""

from __future__ import annotations

import errno
import json
import os
import time

import pytest
from runhelpers import events, execute, make_run, of, record, verified

FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def on_record_fsync(monkeypatch, household: str, act) -> None:
    """Call ``act()`` before the real fsync of ``household``'s record files
    (their temporary files, before the rename): a disk slow or failing there."""
    real_fsync = os.fsync

    def fsync(fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if f"/records/{household}/" in target and target.endswith(".tmp"):
            act()
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def on_log_write(monkeypatch, suffix: str, nth: int):
    """The ``nth`` write to the file whose path ends in ``suffix`` fails
    (ENOSPC, nothing written: a full disk); returns the real ``os.write``."""
    real_write = os.write
    seen = {"n": 0}

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.endswith(suffix):
            seen["n"] += 1
            if seen["n"] == nth:
                raise OSError(errno.ENOSPC, "injected: no space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return real_write


def _eio() -> None:
    raise OSError(errno.EIO, "injected I/O error")


def test_a_record_the_disk_refuses_ends_the_run_as_a_crash_and_continue_carries_it_on(tmp_path, monkeypatch):
    """The disk fails for one record file: the run stops (runner-error, the
    stop in every log), writes nothing more (no close line, no final anchor:
    docs/RUN.md "The disk"), and verify says crashed with no violation: every
    record on disk has its attempt line or belongs to a household under way.
    With the disk back, continue carries the run on to a complete run."""
    import signal as signals

    from confirmatory.cli.run import continue_command

    real_fsync = os.fsync
    on_record_fsync(monkeypatch, "hh-002", _eio)  # the disk fails for one record file
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.01} for i in range(6)]
    result, run_dir = execute(tmp_path, households=hh, models=2, **FAST)
    monkeypatch.setattr(os, "fsync", real_fsync)
    report = verified(run_dir)
    assert report.state == "crashed" and result.disk_failed and "injected I/O error" in result.disk_failed
    assert result.status == "stopped" and result.stop_cause == "runner-error"
    (stop,) = of(events(run_dir), "stop")
    assert stop["scope"] == "run" and "injected I/O error" in stop["detail"]
    assert not of(events(run_dir), "close")
    for m in ("m0", "m1"):
        ev = events(run_dir, m)
        assert of(ev, "stop", cause="runner-error") and not of(ev, "close")
        recorded = {
            p.relative_to(run_dir / "models" / m).as_posix()
            for p in (run_dir / "models" / m / "records").rglob("*.json")
        }
        unlined = {r.split("/")[1] for r in recorded - {a["record"] for a in of(ev, "attempt")}}
        assert unlined <= set(report.crash["under_way"].get(m, ())), (m, unlined, report.crash)
    saved = {s: signals.getsignal(s) for s in (signals.SIGINT, signals.SIGTERM, signals.SIGHUP)}
    try:
        assert continue_command(run_dir, reason="the disk was replaced", quiet=True) == 0
    finally:
        for s, handler in saved.items():
            signals.signal(s, handler)
    after = verified(run_dir)
    assert after.state == "complete" and "continued after a crash" in after.outcome
    # the runner error ended at the continuation: every household of both models ran
    assert "m0: 6 of 6 households ended" in after.outcome and "m1: 6 of 6 households ended" in after.outcome, (
        after.outcome
    )
    assert of(events(run_dir), "close")[0]["status"] == "completed"


def test_a_wall_clock_stepping_back_during_the_run_never_moves_run_time_backwards(tmp_path, monkeypatch):
    real_time = time.time
    start = real_time()
    offset = {"value": 0.0}

    def stepping_time():
        now = real_time()
        # 0.3 s into the run (which takes over a second) the wall clock is set back by 0.4 s.
        if now - start > 0.3:
            offset["value"] = -0.4
        return now + offset["value"]

    monkeypatch.setattr(time, "time", stepping_time)
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.06} for i in range(12)]
    result, run_dir = execute(tmp_path, households=hh, models=1, **FAST)
    monkeypatch.setattr(time, "time", real_time)
    verified(run_dir)
    assert result.status == "completed"
    samples = of(events(run_dir, log="host.jsonl"), "sample")
    # The step (less the time since the clock's last reading) was corrected and reported.
    assert max(s["clock_back_max_s"] for s in samples) > 0.2
    host_t = [e["t"] for e in events(run_dir, log="host.jsonl")]
    assert host_t == sorted(host_t)
    attempts = of(events(run_dir, "m0"), "attempt")
    assert all(a["end"] >= a["start"] for a in attempts)


def _run_with_a_step_inside_a_call(tmp_path, monkeypatch, by_s: float, sample_interval_s: float):
    """One lane, one arm, rare anchors: the wall clock steps back ``by_s``
    inside hh-000's one fake call (nothing else reads the clock meanwhile
    when samples are rare). The result, the run directory and that call."""
    real_time, real_sleep = time.time, time.sleep
    offset = {"s": 0.0}

    def sleep(seconds):
        real_sleep(seconds)
        if seconds == 0.0021 and not offset["s"]:  # the fake call of hh-000: the step lands inside it
            offset["s"] = -by_s

    monkeypatch.setattr(time, "time", lambda: real_time() + offset["s"])
    monkeypatch.setattr(time, "sleep", sleep)
    hh = [{"id": "hh-000", "latency_s": 0.0021}, {"id": "hh-001"}]
    try:
        result, run_dir = execute(
            tmp_path,
            households=hh,
            models=[{"name": "m0", "lanes": 1}],
            arms=("alone",),
            host={"sample_interval_s": sample_interval_s, "max_gap_s": 10.0},
            anchors={"interval_s": 60.0},
            **FAST,
        )
    finally:
        monkeypatch.setattr(time, "time", real_time)
        monkeypatch.setattr(time, "sleep", real_sleep)
    return result, run_dir, record(run_dir, "m0", "hh-000", "alone", 0)


def test_a_wall_clock_stepping_back_inside_a_call_begun_after_the_clocks_last_reading_verifies(tmp_path, monkeypatch):
    """The run's clock measures a step back from its own last reading; a call
    begun after that reading is set back a little further than host.jsonl
    reports, its end before its start by more than the step seen. An honest
    run so: verify allows the call its slack (it failed invariant 5 by 60 us)."""
    result, run_dir, rec = _run_with_a_step_inside_a_call(tmp_path, monkeypatch, 0.5, sample_interval_s=5.0)
    (call,) = rec["calls"]
    assert call["end"] < call["start"] - 0.4  # the step did land inside the call
    verified(run_dir)
    assert result.status == "completed"


@pytest.mark.slow
def test_a_wall_clock_stepping_back_3_s_inside_a_call_after_1_5_s_unread_verifies(tmp_path, monkeypatch):
    """The attempt's first call takes 1.5 s (nothing reads the run's clock:
    one lane, rare samples and anchors, calls that cost nothing, the start
    anchor's push done before it); the wall clock steps back 3 s inside
    its second call. host.jsonl reports a step of about 1.6 s (the clock
    measures from its last reading), the call's end is 3 s before its start.
    verify widens the call slack by the samples' monotonic gap before the
    sample that reports the step (verify.clocks.ClockDrift.unseen); before, this
    honest run failed invariant 5."""
    real_time, real_sleep = time.time, time.sleep
    state = {"s": 0.0, "n": 0}

    pushes = tmp_path / "run" / "anchor-pushes.jsonl"

    def sleep(seconds):
        if seconds == 1.5:
            # The start anchor's push ends with a clock reading: let it land
            # before the slow call's silence, not inside it (on a loaded
            # machine a git push can take a second).
            give_up = real_time() + 60
            while b'"event":"push"' not in (pushes.read_bytes() if pushes.exists() else b"") and real_time() < give_up:
                real_sleep(0.01)
        real_sleep(seconds)
        if seconds == 0.0021:  # the latency of each fake call of hh-000
            state["n"] += 1
            if state["n"] == 2:
                state["s"] = -3.0

    monkeypatch.setattr(time, "time", lambda: real_time() + state["s"])
    monkeypatch.setattr(time, "sleep", sleep)
    # Calls that cost nothing: a cost is journaled as it is reported, with a clock reading.
    hh = [
        {"id": "hh-000", "latency_s": 0.0021, "plan": {"alone/0": ["slow", "ok"]}, "slow_s": 1.5, "cost_usd": 0.0},
        {"id": "hh-001"},
    ]
    result, run_dir = execute(
        tmp_path,
        households=hh,
        models=[{"name": "m0", "lanes": 1}],
        arms=("alone",),
        host={"sample_interval_s": 5.0, "max_gap_s": 10.0},
        anchors={"interval_s": 60.0},
        **FAST,
    )
    monkeypatch.setattr(time, "time", real_time)
    monkeypatch.setattr(time, "sleep", real_sleep)
    calls = record(run_dir, "m0", "hh-000", "alone", 0)["calls"]
    assert calls[1]["end"] < calls[1]["start"] - 2.5  # the step did land inside the second call
    reported = max(e.get("clock_back_max_s", 0.0) for e in events(run_dir, log="host.jsonl"))
    assert 1.0 < reported < 2.5, f"the premise: the step reported short (as ~1.5 s), not {reported}"
    assert result.status == "completed"
    verified(run_dir)


def test_a_wall_clock_stepping_back_ten_minutes_inside_a_call_is_no_harness_error(tmp_path, monkeypatch):
    """The wall clock is set back 600 s inside the attempt's call (an NTP
    correction after a suspend, say). The harness reports the call with
    time.time(), as it must: its end is 600 s before its start and before the
    attempt opened. The runner took call times more than 300 s outside their
    attempt for a harness that reports the wrong clock, and stopped the
    model with cause harness; now it measures the tolerance from the wall
    clock the attempt would have opened at on the clock of now (the wall
    time now, less the monotonic time since it opened), so the run completes
    and verifies."""
    result, run_dir, rec = _run_with_a_step_inside_a_call(tmp_path, monkeypatch, 600.0, sample_interval_s=0.2)
    (call,) = rec["calls"]
    assert "reported_times" not in call and rec["status"] == "ok", rec  # not taken for the wrong clock
    assert call["end"] < call["start"] - 599  # the step did land inside the call
    assert result.status == "completed", result
    verified(run_dir)


def test_a_wall_clock_stepped_back_just_after_a_resume_request_verifies(tmp_path):
    """A request's t is the resume command's raw wall time; the runner's
    acceptance is dated on its own clock. The command reads a wall clock
    0.3 s ahead, which is stepped back before the run's clock reads it (the
    request is written with that reading: no race with the runner): the
    request is dated after its acceptance. An honest run (it failed
    invariant 10): verify allows it the call slack, as a call's raw times."""
    from confirmatory.engine.resume import request_resume

    hh = [{"id": "hh-000", "plan": {"m0:alone/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    run.start()
    m = run.models["m0"]
    deadline = time.monotonic() + 60
    while not (m.paused and m.waiting_resume):
        assert time.monotonic() < deadline, "m0 never paused"
        time.sleep(0.01)
    request_resume(run.run_dir, "m0", wall=time.time() + 0.3)
    result = run.wait()
    (resume,) = of(events(run.run_dir, "m0"), "resume")
    assert resume["accepted"] is True and resume["request_t"] > resume["t"]  # dated after its acceptance
    verified(run.run_dir)
    assert result.status == "completed"


def test_an_engine_pool_that_fails_to_start_stops_its_model_with_cause_pool(tmp_path):
    result, run_dir = execute(
        tmp_path, households=3, models=1, engine_factory="confirmatory.testing.fakes:broken_engine"
    )
    verified(run_dir)
    ev = events(run_dir, "m0")
    (stop,) = of(ev, "stop")
    assert stop["cause"] == "pool" and "failed to start" in stop["detail"]
    assert not of(ev, "attempt")
    assert result.status == "stopped" and result.stop_cause == "pool"


@pytest.mark.slow
def test_memory_readings_failing_longer_than_sampler_failure_s_stop_the_run_with_cause_sampler(tmp_path):
    from confirmatory.testing.hostfakes import Fail, ScriptedReaders

    readers = ScriptedReaders([0.0, 0.0, Fail()])
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(40)]
    result, run_dir = execute(
        tmp_path,
        households=hh,
        models=1,
        host_readers=readers,
        host={"sampler_failure_s": 0.5, "max_gap_s": 5.0},
        **FAST,
    )
    verified(run_dir)
    assert result.status == "stopped" and result.stop_cause == "sampler"
    (stop,) = of(events(run_dir), "stop")
    assert stop["scope"] == "run" and stop["cause"] == "sampler"
    assert of(events(run_dir, log="host.jsonl"), "sample-failed")


def test_a_sampler_thread_that_dies_stops_the_run_with_cause_sampler(tmp_path):
    from confirmatory.testing.hostfakes import Crash, ScriptedReaders

    readers = ScriptedReaders([0.0, 0.0, 0.0, Crash()])
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(40)]
    result, run_dir = execute(tmp_path, households=hh, models=1, host_readers=readers, **FAST)
    verified(run_dir)
    assert result.status == "stopped" and result.stop_cause == "sampler"


def test_a_key_echoed_in_a_provider_error_never_reaches_the_records(tmp_path, monkeypatch):
    secret = "sk-test-" + "9" * 32
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-" + "7" * 20)
    hh = [{"id": "hh-000", "plan": {"alone/0": "echo-key"}}, {"id": "hh-001"}]
    result, run_dir = execute(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    verified(run_dir)
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert secret.encode() not in data and b"tok-7777777" not in data, path
    rec = (run_dir / "models/m0/records/hh-000/alone/0.json").read_text()
    assert "[redacted:" in rec


def test_a_witness_that_is_unreachable_at_the_end_is_reported_and_push_anchor_catches_up(tmp_path):
    import sys

    from confirmatory.anchors.push import push_anchor_command
    from confirmatory.cli.run import run_command
    from confirmatory.testing.designs import write_design
    from confirmatory.verify import verify_run

    # The witness "comes back" once a flag file exists beside the design.
    flag = tmp_path / "design" / "witness-up"
    command = [sys.executable, "-c", f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 1)"]
    design = write_design(tmp_path / "design", households=3, models=1, anchors={"command": command}, **FAST)
    run_dir = tmp_path / "run"
    assert run_command(design, run_dir, quiet=True) == 6  # completed, but the witness lacks the final anchor
    report = verify_run(run_dir)
    assert report.failed() == {8}
    assert push_anchor_command(run_dir) == 6  # still unreachable: logged, not hidden
    flag.write_text("")
    assert push_anchor_command(run_dir) == 0
    verified(run_dir)
    pushes = of(events(run_dir, log="anchor-pushes.jsonl"), "push")
    assert [p["rc"] for p in pushes][-3:] == [1, 1, 0]


@pytest.mark.slow
def test_a_lane_stuck_in_a_call_that_never_returns_is_settled_and_the_run_still_ends(tmp_path):
    from confirmatory.testing import fakes

    fakes.STUCK_RELEASE.clear()
    hh = [{"id": "hh-000", "plan": {"m0:alone/0": "stuck"}}, {"id": "hh-001"}, {"id": "hh-002"}]
    run = make_run(
        tmp_path,
        households=hh,
        models=[{"name": "m0", "timeout_s": 0.2}, {"name": "m1"}],
        arms=("alone", "calculator"),
        rules={"attempt_deadline_s": 0.3},
        **FAST,
    )
    try:
        result = run.execute()
        assert result.abandoned_lanes == 1
        assert result.status == "stopped" and result.stop_cause == "deadline"
        verified(run.run_dir)
        ev = events(run.run_dir, "m0")
        stuck = [h for h in of(ev, "household") if h["household"] == "hh-000"]
        assert [h["finished"] for h in stuck] == [False]
        assert of(ev, "attempt", household="hh-000", arm="alone")[0]["class"] == "harness"
        written = (run.run_dir / "models/m0/run.jsonl").read_bytes()
    finally:
        fakes.STUCK_RELEASE.set()
        for t in run._threads:
            t.join(10)
    # The lane that woke up afterwards wrote nothing more.
    assert (run.run_dir / "models/m0/run.jsonl").read_bytes() == written


def _wall_clock_jump(monkeypatch, after_s: float, by_s: float):
    """time.time jumps by ``by_s`` once ``after_s`` of real time has passed."""
    real_time = time.time
    start = real_time()
    monkeypatch.setattr(time, "time", lambda: real_time() + (by_s if real_time() - start > after_s else 0.0))
    return real_time


@pytest.mark.slow
def test_a_wall_clock_jumping_forward_does_not_abandon_attempts_before_their_deadline(tmp_path, monkeypatch):
    """Deadlines run on the monotonic clock: a 120 s jump of the wall clock
    (NTP catching up, a suspended VM) is not 120 s of an attempt's time."""
    # attempts of 1 s: the jump lands well inside one on each lane, and the
    # main loop looks at the deadlines many times before they end (with
    # attempts of 0.1 s, a busy machine let the jumped attempts end unseen)
    real_time = _wall_clock_jump(monkeypatch, 0.8, 120.0)
    hh = [{"id": f"hh-{i:03d}", "latency_s": 1.0} for i in range(6)]
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone",), rules={"attempt_deadline_s": 30.0}, **FAST
    )
    monkeypatch.setattr(time, "time", real_time)
    verified(run_dir)
    ev = events(run_dir, "m0")
    assert not of(ev, "trigger") and result.status == "completed"
    assert any(a["end"] - a["start"] > 100 for a in of(ev, "attempt"))  # the jump did land inside an attempt


def test_a_wall_clock_stepping_back_does_not_hold_an_attempt_past_its_deadline(tmp_path, monkeypatch):
    """The run's clock stands still while the wall clock is behind it; the
    deadline must not: a hung attempt is abandoned about on time."""
    real_time = _wall_clock_jump(monkeypatch, 0.2, -60.0)
    hh = [{"id": "hh-000", "plan": {"alone/0": "hang"}}, {"id": "hh-001"}]
    began = real_time()
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone",), rules={"attempt_deadline_s": 0.5}, **FAST
    )
    took = real_time() - began
    monkeypatch.setattr(time, "time", real_time)
    verified(run_dir)
    ev = events(run_dir, "m0")
    assert of(ev, "trigger", cause="deadline") and result.stop_cause == "deadline"
    assert took < 30, f"the run took {took:.1f} s: the deadline waited for the wall clock"
    host = of(events(run_dir, log="host.jsonl"), "sample")
    assert len(host) < 2000, "the sampler must not spin while the wall clock is behind the run's clock"


def test_no_admission_decision_while_a_pass_waits_for_its_record_on_a_slow_disk(tmp_path, monkeypatch):
    """docs/RUN.md, reading 1: a decision waits while any household of the
    model has a pass whose classes are not yet decided -- from the instant the
    pass ends, not from when its record is on disk."""
    real_fsync = os.fsync
    on_record_fsync(monkeypatch, "hh-000", lambda: time.sleep(0.6))
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(16)]
    result, run_dir = execute(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    monkeypatch.setattr(os, "fsync", real_fsync)
    verified(run_dir)
    (slow,) = of(events(run_dir, "m0"), "attempt", household="hh-000")
    decisions = [d["t"] for d in of(events(run_dir, "m0", "admission.jsonl"), "decision")]
    inside = [t for t in decisions if slow["end"] < t < slow["end"] + 0.5]
    assert not inside, f"{len(inside)} decisions while hh-000's pass was unclassified"
    assert any(t > slow["end"] for t in decisions)  # the other lane did go on afterwards


@pytest.mark.slow
def test_clean_attempts_that_end_as_the_ceiling_is_crossed_keep_their_class(tmp_path):
    """At a stop a lane still waits, briefly, for the sample it asked for:
    without it a clean attempt would be judged `host` (no sample after it)."""
    from confirmatory.testing.hostfakes import ScriptedReaders

    hh = [
        {"id": "hh-000", "plan": {"alone/0": ["slow"]}, "slow_s": 1.0},
        {"id": "hh-001", "plan": {"alone/0": ["slow", "expensive"]}, "slow_s": 0.3, "expensive_usd": 5.0},
    ]
    result, run_dir = execute(
        tmp_path,
        host_readers=ScriptedReaders([0.0]),
        models=1,
        arms=("alone",),
        households=hh,
        overall_cap_usd=1.0,
        margin_usd=0.5,
        host={"sample_interval_s": 5.0, "max_gap_s": 10.0},
        **FAST,
    )
    verified(run_dir)
    assert result.status == "ceiling"
    ev = events(run_dir, "m0")
    (crossing,) = of(ev, "ceiling")
    attempts = of(ev, "attempt")
    assert {a["household"] for a in attempts} == {"hh-000", "hh-001"}
    assert any(a["end"] > crossing["t"] for a in attempts)  # one ended after the stop
    assert all(a["class"] == "ok" for a in attempts), [(a["household"], a["class"]) for a in attempts]


def test_a_run_closed_without_its_main_loop_stops_its_lanes_instead_of_waiting_for_ever(tmp_path):
    """Something raised between start() and wait(): close() must still end the
    lanes (a paused one would wait for a resume nobody reads) and leave a
    stopped, verifiable run."""
    import threading

    hh = [{"id": "hh-000", "plan": {"alone/0": "operator"}}, {"id": "hh-001", "latency_s": 0.05}]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    run.start()
    m = run.models["m0"]
    deadline = time.monotonic() + 20
    while not m.paused and time.monotonic() < deadline:
        time.sleep(0.02)
    assert m.paused
    closer = threading.Thread(target=run.close, daemon=True)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() waited for a paused lane for ever"
    stops = of(events(run.run_dir), "stop")
    assert [s["cause"] for s in stops] == ["runner-error"]


# --- the disk ------------------------------------------------------------------------------


def test_a_disk_below_the_floor_stops_the_run_while_its_end_can_still_be_written(tmp_path):
    # A floor above any disk's free space: the first look (real statvfs) stops the run.
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(40)]
    result, run_dir = execute(tmp_path, households=hh, models=1, disk_floor_bytes=1 << 62, **FAST)
    verified(run_dir)  # the stop, the close lines and the final anchor were all written
    assert result.status == "stopped" and result.stop_cause == "runner-error"
    assert "MiB free, below the" in result.stop_detail and result.write_failures == ()
    (stop,) = of(events(run_dir), "stop")
    assert stop["cause"] == "runner-error" and "the run's disk has" in stop["detail"]


def test_run_refuses_to_start_with_less_free_disk_than_the_floor(tmp_path):
    from confirmatory.engine.preflight import run_dir_problems

    (problem,) = run_dir_problems(tmp_path / "runs" / "r", disk_floor_bytes=1 << 62)
    assert problem.startswith(f"{tmp_path / 'runs' / 'r'}: its disk has ") and "MiB the run stops at" in problem
    assert run_dir_problems(tmp_path / "runs" / "r", disk_floor_bytes=0) == []


@pytest.mark.slow
def test_logs_that_can_no_longer_be_written_end_the_run_with_a_report_not_a_traceback(tmp_path):
    # Real write failures: the runner in a process whose files may not grow
    # past 40 kB (RLIMIT_FSIZE; Python ignores SIGXFSZ, so a write past it
    # fails with EFBIG). A model log fills first, mid-run.
    import subprocess
    import sys

    from confirmatory.testing.designs import write_design

    design = write_design(
        tmp_path / "design",
        households=[{"id": f"hh-{i:03d}"} for i in range(200)],
        models=2,
        anchors={"command": ["true"]},
        **FAST,
    )
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "import confirmatory.engine.run as r\n"
        "from confirmatory.cli.run import run_command\n"
        "r.DISK_FLOOR_BYTES = 0\n"  # this test is about the failure itself, not the floor that avoids it
        "resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))\n"
        "sys.exit(run_command(Path(sys.argv[1]), Path(sys.argv[2]), quiet=True))\n"
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(design), str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "THE RUN'S FILES COULD NOT BE WRITTEN" in proc.stderr
    assert "File too large" in proc.stderr and "confirmatory continue" in proc.stderr
    from confirmatory.verify import verify_run

    # ended as a crash does: the log's torn tail and its households under way are the crash's
    report = verify_run(run_dir)
    assert report.ok and report.state == "crashed", report.to_table()
    assert report.outcome.startswith("no close line")
    (stop,) = of(events(run_dir), "stop")  # run.jsonl itself stayed writable
    assert stop["cause"] == "runner-error" and "File too large" in stop["detail"]
    assert not of(events(run_dir), "close")


def _on_disk(run_dir, model):
    """What a model's logs hold, read as a reviewer would (complete lines,
    up to a torn tail): its decisions, its ended households, and the
    (household, arm) pairs of the attempt lines of those households."""
    from confirmatory.records.chain import ChainError
    from confirmatory.records.reader import iter_lines

    def read(name):
        out = []
        try:
            out.extend(line.obj for line in iter_lines(run_dir / "models" / model / name))
        except ChainError:
            pass  # the torn tail a failed write left: what came before is what was acknowledged
        return out

    run_log, admission = read("run.jsonl"), read("admission.jsonl")
    ended = {e["household"] for e in of(run_log, "household")}
    results = {(a["household"], a["arm"]) for a in of(run_log, "attempt") if a["household"] in ended}
    return len(of(admission, "decision")), len(ended), len(results)


@pytest.mark.slow
def test_after_a_failed_write_the_table_and_the_summary_count_only_what_is_on_disk(tmp_path):
    # As the audit found it: a runner whose files may not grow past 9000
    # bytes (RLIMIT_FSIZE, SIGXFSZ ignored: the write stops part-way with
    # EFBIG) fails a model's run.jsonl as a lane writes a household's lines.
    # The last table said "6/6 decided, 6 ended" and the summary counted the
    # attempt lines of the household whose household line was never written,
    # while verify counts only household lines on disk.
    import re
    import subprocess
    import sys

    from confirmatory.testing.designs import write_design

    design = write_design(
        tmp_path / "design",
        households=[{"id": f"hh-{i:03d}"} for i in range(16)],
        models=2,
        arms=("alone", "calculator", "calculator_explain"),
        anchors={"command": ["true"]},
        **FAST,
    )
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "import confirmatory.engine.run as r\n"
        "from confirmatory.cli.run import run_command\n"
        "r.DISK_FLOOR_BYTES = 0\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (9000, 9000))\n"
        "sys.exit(run_command(Path(sys.argv[1]), Path(sys.argv[2])))\n"
    )  # not quiet: the table is shown
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(design), str(run_dir)], capture_output=True, text=True, timeout=120
    )
    err = proc.stderr
    assert proc.returncode == 4 and "THE RUN'S FILES COULD NOT BE WRITTEN" in err, err[-3000:]
    last_table = err[err.rindex("run spend ") :]
    rows = {
        m: (int(d), int(n), int(e))
        for m, d, n, e in re.findall(r"^  (\S+) +households +(\d+)/(\d+) decided, +(\d+) ended \|", last_table, re.M)
    }
    summary = dict(re.findall(r"^  (\S+): (\d+) arm results", err, re.M))
    assert set(rows) == {"m0", "m1"} and set(summary) == {"m0", "m1"}, err[-3000:]
    for m in ("m0", "m1"):
        decided, ended, results = _on_disk(run_dir, m)
        assert rows[m][0] == decided and rows[m][2] == ended, (m, rows[m], (decided, ended), last_table)
        assert int(summary[m]) == results, (m, summary[m], results, err[-3000:])
    # The model whose log failed says so in the table, and that its attempts are those started.
    assert "| LOG WRITE FAILED: models/m" in last_table and "attempts, those started" in last_table, last_table
    # ... and verify's account of the households ended is the table's.
    from confirmatory.verify import verify_run

    outcome = verify_run(run_dir).outcome
    for m in ("m0", "m1"):
        assert f"{m}: {rows[m][2]} of {rows[m][1]} households ended" in outcome, (outcome, rows)


def test_the_summary_leaves_out_the_attempt_lines_of_a_household_whose_household_line_was_torn(tmp_path):
    """What a write cut off by EFBIG leaves: a run.jsonl whose last household
    has two of its attempt lines, then a torn third. The summary counts the
    arm results of the households that ended on disk and says the rest apart;
    it counted all 5 before (1 household ended, 3 arms: 3 results)."""
    from confirmatory.commands.run import result_lines

    result, run_dir = execute(
        tmp_path,
        households=2,
        models=[{"name": "m0", "lanes": 1}],
        arms=("alone", "calculator", "calculator_explain"),
        **FAST,
    )
    assert result.status == "completed"
    log = run_dir / "models" / "m0" / "run.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    kinds = [json.loads(line)["event"] for line in lines]
    second = [i for i, k in enumerate(kinds) if k == "household"][1]
    assert kinds[second - 3 : second] == ["attempt"] * 3, kinds
    log.write_bytes(b"".join(lines[: second - 1]) + lines[second - 1][:40])  # a torn third attempt line
    (line,) = result_lines(run_dir)
    assert line.startswith(
        "  m0: 3 arm results: ok 3; 2 attempt line(s) of 1 household(s) whose household line "
        "is not on disk, not counted (hh-"
    ), line
    assert "its run.jsonl was read up to byte" in line and "(TornTail)" in line, line


def test_a_decision_whose_line_the_disk_refuses_is_not_counted_as_decided(tmp_path, monkeypatch):
    """The write of the third decision's line to admission.jsonl fails (the
    disk is full: ENOSPC, nothing written): the run stops (runner-error) and
    the table counts the two decisions on disk, not three; its row names the
    failed log."""
    import io

    from confirmatory.cli.progress import Progress

    real_write = on_log_write(monkeypatch, "/models/m0/admission.jsonl", 4)  # line 0 is its open line
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.01} for i in range(6)]
    run = make_run(tmp_path, households=hh, models=[{"name": "m0", "lanes": 1}], arms=("alone",), **FAST)
    result = run.execute()
    monkeypatch.setattr(os, "write", real_write)
    assert result.status == "stopped" and result.stop_cause == "runner-error", result
    assert "injected: no space left on device" in result.stop_detail
    decided, ended, _ = _on_disk(run.run_dir, "m0")
    assert decided == 2, decided
    progress = Progress(run, stream=io.StringIO())
    row = progress.lines()[1]
    assert f"households   2/6 decided, {ended:>3} ended" in row, row
    assert "LOG WRITE FAILED: models/m0/admission.jsonl" in row, row


def test_a_model_whose_lane_end_line_the_disk_refuses_is_not_shown_done(tmp_path, monkeypatch):
    """Its one lane ran its draw through, then the write of its lane-end line
    failed (ENOSPC): in the records the lane never ended, so the table says
    the model stopped (runner-error), not done (as it did)."""
    import io

    from confirmatory.cli.progress import Progress

    # run.jsonl of one lane, one arm, two households: open, then (call-cost, attempt, household)
    # twice (the spend journal's line comes first), then lane-end
    real_write = on_log_write(monkeypatch, "/models/m0/run.jsonl", 8)
    run = make_run(tmp_path, households=2, models=[{"name": "m0", "lanes": 1}], arms=("alone",), **FAST)
    result = run.execute()
    monkeypatch.setattr(os, "write", real_write)
    assert result.status == "stopped" and result.stop_cause == "runner-error", result
    assert not of(events(run.run_dir, "m0"), "lane-end")
    assert run.models["m0"].lane_ends == ["done"]
    row = Progress(run, stream=io.StringIO()).lines()[1]
    assert "households   2/2 decided,   2 ended" in row, row
    assert "stopped (runner-error) | LOG WRITE FAILED: models/m0/run.jsonl" in row, row


def test_an_engine_factory_that_returns_no_pool_stops_its_model_with_cause_pool(tmp_path):
    result, run_dir = execute(
        tmp_path, households=3, models=1, engine_factory="confirmatory.testing.fakes:unusable_engine"
    )
    verified(run_dir)  # closed properly: stops, close lines, the final anchor
    assert result.status == "stopped" and result.stop_cause == "pool"
    (stop,) = of(events(run_dir, "m0"), "stop")
    assert stop["cause"] == "pool" and "returned function, which has no call, alive, close" in stop["detail"], stop


def test_a_deadline_record_the_disk_refuses_is_a_runner_error_with_its_spend_kept(tmp_path, monkeypatch):
    """The disk fails as the main thread writes an abandoned attempt's
    deadline record. As for a lane's lost record, its spend is logged as a
    late cost (conservation) and the run stops with cause runner-error,
    closed and anchored. (The main loop's exception handler abandoned the
    attempt a second time, the write failed again, and wait() raised: no
    close lines, no final anchor, the spend in no record.)"""
    real_fsync = os.fsync
    on_record_fsync(monkeypatch, "hh-000", _eio)
    hh = [{"id": "hh-000", "plan": {"alone/0": "hang"}}, {"id": "hh-001"}]
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone",), rules={"attempt_deadline_s": 0.5}, **FAST
    )
    monkeypatch.setattr(os, "fsync", real_fsync)
    verified(run_dir)
    assert result.status == "stopped" and result.stop_cause == "runner-error", result
    assert "injected I/O error" in result.stop_detail
    ev = events(run_dir, "m0")
    late = of(ev, "late-cost", household="hh-000", arm="alone", **{"pass": 0})
    # what it had spent by the deadline, then what it spent after: each says why it is in no record
    assert late[0]["cost_nusd"] > 0 and all("record not written" in c["reason"] for c in late), late
    assert not of(ev, "trigger")  # no trigger naming a record that does not exist
    assert not list((run_dir / "models" / "m0" / "records").rglob("*.tmp"))


@pytest.mark.slow
def test_a_lane_stuck_past_its_deadline_whose_record_the_disk_refuses_is_still_settled(tmp_path, monkeypatch):
    """The same lost deadline record, its lane stuck in a call that never
    returns: the main thread settles the lane without the record, and the
    run ends, closed and anchored."""
    from confirmatory.testing import fakes

    real_fsync = os.fsync
    on_record_fsync(monkeypatch, "hh-000", _eio)
    fakes.STUCK_RELEASE.clear()
    hh = [{"id": "hh-000", "plan": {"m0:alone/0": "stuck"}}, {"id": "hh-001"}]
    run = make_run(
        tmp_path,
        households=hh,
        models=[{"name": "m0", "timeout_s": 0.2}],
        arms=("alone",),
        rules={"attempt_deadline_s": 0.3},
        **FAST,
    )
    try:
        result = run.execute()
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert result.abandoned_lanes == 1, result
        assert result.status == "stopped" and result.stop_cause == "runner-error", result
        report = verified(run.run_dir)
        # the disk failed: nothing more written; hh-000 was under way (a continuation reruns it)
        assert report.state == "crashed" and report.crash["under_way"] == {"m0": ["hh-000"]}, report.crash
        assert not of(events(run.run_dir, "m0"), "household", household="hh-000")
    finally:
        fakes.STUCK_RELEASE.set()
        for t in run._threads:
            t.join(10)


@pytest.mark.slow
def test_the_engine_pool_of_a_model_that_has_finished_dying_does_not_stop_the_run(tmp_path):
    """m0 has ended every household (its lanes are done) while m1 runs on;
    then a worker of m0's idle pool is killed (an OOM killer picks a large
    idle process). No lane of m0 can meet the dead pool any more: the run
    still completes. (The main loop stopped m0 with cause pool after its
    lanes had ended, and the whole run ended `stopped`, exit status 4.)"""
    import signal

    hh = [{"id": f"hh-{i:03d}", "plan": {"m1:alone/0": "slow"}, "slow_s": 0.4} for i in range(6)]
    run = make_run(tmp_path, households=hh, models=2, arms=("alone",))  # real engine processes
    run.start()
    m0 = run.models["m0"]
    deadline = time.monotonic() + 60
    while len(m0.lane_ends) < m0.spec.lanes:
        assert time.monotonic() < deadline, "m0 never ended"
        time.sleep(0.01)
    assert run.models["m1"].households_done < len(hh), "m1 ended too soon for the test"
    os.kill(m0.pool._all[0].process.pid, signal.SIGKILL)
    result = run.wait()
    verified(run.run_dir)
    assert not of(events(run.run_dir, "m0"), "stop")
    assert result.status == "completed", result


def test_a_ceiling_line_the_disk_refuses_stops_the_run_as_a_runner_error_not_a_harness_failure(tmp_path, monkeypatch):
    """The ceiling's line is written under the ceiling's lock, inside the
    harness's `add_call` that crossed it (Run._on_crossing). When m0's log
    refuses that line (an I/O error), the write failure must not reach the
    harness, whose attempt would then be recorded as its own failure (class
    harness: m0 stopped for a harness fault it did not make), and must not
    cut short the crossing's other lines and halts: m1 gets its ceiling line
    and its conversation under way is ended. The run stops, cause
    runner-error, its stop line saying which log refused the line."""
    real_write = os.write

    def write(fd, data):
        if b'"event":"ceiling"' in bytes(data):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.endswith("/models/m0/run.jsonl"):
                raise OSError(errno.EIO, "injected I/O error")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    hh = [
        {
            "id": "hh-000",
            "plan": {"m1:alone/0": "hang", "m0:alone/0": ["slow", "expensive"]},
            "slow_s": 0.3,
            "expensive_usd": 2.0,
        }
    ]
    result, run_dir = execute(
        tmp_path, households=hh, models=2, arms=("alone",), overall_cap_usd=1.0, margin_usd=0.5, **FAST
    )
    monkeypatch.setattr(os, "write", real_write)
    crossing = record(run_dir, "m0", "hh-000", "alone", 0)
    assert crossing["status"] != "error" or "ChainWriteFailed" not in json.dumps(crossing["error"]), crossing
    assert not of(events(run_dir, "m0"), "trigger", cause="harness")
    assert of(events(run_dir, "m1"), "ceiling")  # the other model's line, after the one that failed
    assert record(run_dir, "m1", "hh-000", "alone", 0)["status"] == "budget_stop"  # its halt came
    assert result.status == "ceiling" and result.stop_cause == "runner-error", result  # (ceiling: it was crossed)
    (stop,) = of(events(run_dir), "stop")
    assert "the ceiling's line could not be written to models/m0/run.jsonl" in stop["detail"], stop


def test_a_signal_that_lands_while_the_main_thread_holds_the_wake_events_lock_stops_the_run(tmp_path):
    """A signal's handler runs in the main thread, between two of its
    bytecodes: also while that thread holds the lock of the event the main
    loop waits on (inside Event.wait or clear, which are Python code). A
    handler that set the event then waited for that very lock, held by its
    own thread: the run hung on Ctrl-C (or a scheduler's SIGTERM) for
    good. The handler now only notes the signal; the main loop, which wakes
    every POLL_S, stops the run. Made certain here: the main thread takes
    the lock and raises SIGINT inside it. (In a child process: the old
    handler hangs it.)"""
    import subprocess
    import sys
    from pathlib import Path

    code = f"""
import signal, sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from pathlib import Path
from runhelpers import make_run
hh = [{{"id": f"hh-{{i:03d}}", "latency_s": 0.05}} for i in range(40)]
run = make_run(Path(sys.argv[1]), households=hh, models=1, install_signals=True,
               engine_factory="confirmatory.testing.fakes:null_engine")
run.start()
with run._wake._cond:  # where Event.wait and Event.clear hold it
    signal.raise_signal(signal.SIGINT)
result = run.wait()
print(result.status, result.stop_cause)
"""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=20
        )  # (it ends in about a second)
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung: the signal handler waited for a lock its own thread held")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["stopped", "interrupt"], proc.stdout


def test_a_run_in_process_puts_the_signal_handlers_back_at_its_very_end_unless_its_caller_exits(tmp_path):
    """A library caller gets its handlers back when the Run closes; the CLI,
    which exits next, keeps the run's (a signal while it exits is only
    noted) until it restores them or ignores the signals."""
    import signal

    from confirmatory.engine.signals import INTERRUPT_SIGNALS

    before = {s: signal.getsignal(s) for s in INTERRUPT_SIGNALS}
    hh = [{"id": "hh-000"}]
    run = make_run(tmp_path / "a", households=hh, models=1, install_signals=True, **FAST)
    assert run.execute().status == "completed"
    assert {s: signal.getsignal(s) for s in INTERRUPT_SIGNALS} == before
    run = make_run(
        tmp_path / "b", households=hh, models=1, install_signals=True, restore_signals=False, **FAST
    )  # as runmain makes it for the CLI
    try:
        assert run.execute().status == "completed"
        assert all(signal.getsignal(s) == run._on_signal for s in INTERRUPT_SIGNALS)
        signal.raise_signal(signal.SIGINT)  # noted, nothing else: the run is closed
        assert run.signals_received == 1
    finally:
        run.restore_signal_handlers()
    assert {s: signal.getsignal(s) for s in INTERRUPT_SIGNALS} == before


def test_a_temporary_directory_that_cannot_take_a_pushs_output_is_a_failed_push_not_a_stopped_run(
    tmp_path, monkeypatch
):
    """The push command's output goes to a temporary file. A temporary
    directory that cannot make one (removed by a tmp cleaner, read-only,
    out of space or inodes) is a push that failed, logged and retried at the
    next anchor like any other: the run goes on (docs/ANCHORS.md). Here the
    directory is missing until the first push has failed, then it is back."""
    import sys
    import tempfile
    import threading

    gone = tmp_path / "tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))
    pushes = tmp_path / "run" / "anchor-pushes.jsonl"
    done = threading.Event()

    def bring_it_back():
        while not done.is_set():
            if pushes.exists() and b'"push"' in pushes.read_bytes():
                gone.mkdir()
                return
            time.sleep(0.01)

    helper = threading.Thread(target=bring_it_back, daemon=True)
    helper.start()
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(6)]
    try:
        result, run_dir = execute(
            tmp_path,
            households=hh,
            models=1,
            anchors={"interval_s": 0.1, "command": [sys.executable, "-c", "print('pushed')"]},
            **FAST,
        )
    finally:
        done.set()
        helper.join()
    assert (result.status, result.stop_cause) == ("completed", None), result
    assert result.final_push_rc == 0
    pushed = of(events(run_dir, log="anchor-pushes.jsonl"), "push")
    assert pushed[0]["rc"] == 127 and "its output" in pushed[0]["output"], pushed[0]
    assert pushed[-1]["rc"] == 0
    verified(run_dir)


def test_a_stop_line_a_failed_log_refuses_still_reaches_every_other_log(tmp_path, monkeypatch):
    """m0's run.jsonl fails at its first spend-journal line (EIO): the run
    stops (runner-error) and ends as a crash does. Writing the stop, m0's
    failed log refuses it; the logs after it (m1's) must still get it: a
    line of the run's end that one log refuses does not keep it from the
    others (RecordLines.append_at_end)."""
    from runhelpers import fail_first_write

    failed = fail_first_write(monkeypatch, "call-cost", "/models/m0/run.jsonl")
    result, run_dir = execute(tmp_path, households=4, models=2, **FAST)
    monkeypatch.undo()
    assert failed and result.disk_failed and result.stop_cause == "runner-error", result

    def bare(o):
        return {k: v for k, v in o.items() if k not in ("seq", "prev")}

    (stop,) = of(events(run_dir), "stop")
    assert [bare(o) for o in of(events(run_dir, "m1"), "stop", cause="runner-error")] == [bare(stop)]
    assert not of(events(run_dir, "m0"), "stop")  # its log had failed
    verified(run_dir)
