"""`confirmatory continue`: a crashed run carried on in its own directory.

Real runner processes (the script, the bundled simulator's engine fakes, a
real git witness) killed with SIGKILL at points chosen from their own
progress on disk; each is then continued by the real command. Each time:
verify says crashed (exit 3) before, the continuation completes, verify
says complete with every invariant holding (exit 0) after and lists the
continuation, and every line acknowledged before the kill is still there,
byte for byte (a torn tail moved aside, whole, into its kept file).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import procserver
import pytest

from confirmatory.records.chain import sha256_hex

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verify"))
import test_states as states  # noqa: E402 - the kill harness and its points

SCRIPT = states.SCRIPT


EXTRA_POINTS = {
    "first call journaled": lambda d: any(
        b'"event":"call-cost"' in p.read_bytes() for p in states._model_logs(d, "run.jsonl")
    ),
    "second household ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(d, "run.jsonl")) >= 2
    ),
    "a quarter of the households ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(d, "run.jsonl")) >= 15
    ),
    "half the households ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(d, "run.jsonl")) >= 30
    ),
    "two thirds ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(d, "run.jsonl")) >= 40
    ),
    # an anchor written mid-run whose push has not yet been logged
    "a push under way": lambda d: (
        len(states._lines(d / "anchors.jsonl")) >= 3
        and len(states._lines(d / "anchor-pushes.jsonl")) < len(states._lines(d / "anchors.jsonl"))
    ),
    "every household ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(d, "run.jsonl")) >= 60
    ),
    "every lane ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"lane-end"') for p in states._model_logs(d, "run.jsonl")) >= 4
    ),
}
POINTS = {**states.POINTS, **EXTRA_POINTS}
for name, check in EXTRA_POINTS.items():
    states.POINTS[name] = check


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every log's complete lines (what was acknowledged), and its torn tail."""
    out = {}
    for path in sorted(run_dir.rglob("*.jsonl")):
        out[path.relative_to(run_dir).as_posix()] = path.read_bytes()
    return out


def continue_cli(run_dir: Path, reason: str = "the machine was rebooted") -> subprocess.CompletedProcess:
    return procserver.run(
        [sys.executable, str(SCRIPT), "continue", str(run_dir), "--reason", reason, "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_kept(before: dict[str, bytes], run_dir: Path) -> None:
    """Every acknowledged line is there byte for byte; a torn tail is in its kept file, whole."""
    for rel, data in before.items():
        now = (run_dir / rel).read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        assert now.startswith(complete), f"{rel}: an acknowledged line changed or went missing"
        tail = data[len(complete) :]
        if tail:
            kept = sorted(run_dir.glob(rel + ".torn-*"))
            assert kept and kept[0].read_bytes() == tail, f"{rel}: its torn tail was not kept whole"
            conts = [
                json.loads(x)
                for x in (run_dir / "run.jsonl").read_bytes().splitlines()
                if b'"event":"continuation"' in x
            ]
            named = [t for c in conts for t in c["torn_tails"] if t["log"] == rel]
            assert named and named[0]["sha256"] == sha256_hex(tail) and named[0]["length"] == len(tail)


def continued_ok(run_dir: Path, continuations: int = 1) -> dict:
    rc, report = states.verify_cli(run_dir)
    assert states.violations(report) == [], states.violations(report)
    assert (rc, report["state"]) == (0, "complete"), report
    assert report["outcome"].count("continued after a crash") == continuations, report["outcome"]
    # show says the same as verify of a continued run, and says it was continued
    from confirmatory.report.show import read_run, render

    info = read_run(run_dir)
    for name, m in report["figures"]["models"].items():
        assert {k: info["models"][name][k] for k in m} == m, (name, info["models"][name], m)
    assert render(info).count("the runner died at") == continuations
    return report


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
def test_a_run_killed_at_any_point_is_continued_to_a_complete_run_that_verifies(tmp_path, point):
    run_dir, ended = states.kill_at(tmp_path, point)
    assert not ended, f"the run ended before {point}"
    before = snapshot(run_dir)
    rc, report = states.verify_cli(run_dir)
    assert states.violations(report) == []
    if report["state"] == "complete":  # killed after its final push: nothing to carry on
        assert rc == 0 and continue_cli(run_dir).returncode == 3
        return
    assert (rc, report["state"]) == (3, "crashed")
    done = continue_cli(run_dir)
    if not (run_dir / "manifest.json").exists():
        # nothing was started (no run manifest: start anew)
        assert done.returncode == 3 and "nothing written" in done.stderr, done.stderr
        assert snapshot(run_dir) == before
        return
    if report["crash"]["stage"] == "closed":
        # nothing is left to run: continue writes the final anchor the runner
        # died before (if it did) and pushes it
        assert done.returncode == 0, done.stderr
        assert_kept(before, run_dir)
        rc, report = states.verify_cli(run_dir)
        assert (rc, report["state"], states.violations(report)) == (0, "complete", [])
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert_kept(before, run_dir)
    continued_ok(run_dir)


@pytest.mark.slow
def test_a_continuation_killed_in_its_turn_is_continued_again(tmp_path):
    run_dir, _ = states.kill_at(tmp_path, "a third of the households ended")
    first = snapshot(run_dir)
    proc = procserver.popen(
        [sys.executable, str(SCRIPT), "continue", str(run_dir), "--reason", "first", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # killed once the continuation has run some households of its own
    before = sum(d.count(b'"event":"household"') for r, d in first.items() if r.endswith("run.jsonl"))
    _kill_when(
        proc,
        lambda: (
            sum(p.read_bytes().count(b'"event":"household"') for p in states._model_logs(run_dir, "run.jsonl"))
            >= before + 14
        ),
        "households of the continuation's own",
    )
    second = snapshot(run_dir)
    rc, report = states.verify_cli(run_dir)
    assert states.violations(report) == [] and (rc, report["state"]) == (3, "crashed")
    done = continue_cli(run_dir, "second")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_kept(first, run_dir)
    assert_kept(second, run_dir)
    continued_ok(run_dir, continuations=2)


@pytest.mark.slow
def test_continue_refuses_a_complete_run_a_running_one_and_a_damaged_one_writing_nothing(tmp_path):
    run_dir, _ = states.kill_at(tmp_path, "a third of the households ended")
    # damaged: an acknowledged line (not the last) edited
    log = run_dir / "models" / "m0" / "admission.jsonl"
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"admit":true', b'"admit":false')
    log.write_bytes(b"".join(lines))
    before = snapshot(run_dir)
    done = continue_cli(run_dir)
    assert done.returncode == 3 and "violation" in done.stderr and "nothing written" in done.stderr
    assert snapshot(run_dir) == before
    log.write_bytes(data)
    assert continue_cli(run_dir).returncode == 0
    done = continue_cli(run_dir)  # now complete
    assert done.returncode == 3 and "complete" in done.stderr and "nothing to carry on" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["first byte", "middle", "last byte"])
def test_a_torn_last_line_is_moved_aside_whole_and_the_run_carried_on(tmp_path, cut):
    run_dir, _ = states.kill_at(tmp_path, "a third of the households ended")
    log = run_dir / "models" / "m1" / "run.jsonl"
    data = log.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    n = len(data) - 1 - start  # the last line's bytes without its newline
    keep = {"first byte": 1, "middle": n // 2, "last byte": n}[cut]
    # a line whose write the kill cut short (never acknowledged): a prefix of one like the last
    log.write_bytes(data + data[start : start + keep])
    before = snapshot(run_dir)
    rc, report = states.verify_cli(run_dir)
    assert (rc, report["state"]) == (3, "crashed") and report["crash"]["torn_tails"], report
    done = continue_cli(run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_kept(before, run_dir)
    continued_ok(run_dir)


def _start(tmp_path: Path, households: list[dict], **design) -> tuple[subprocess.Popen, Path]:
    from confirmatory.testing.designs import write_design

    path = write_design(
        tmp_path / "design",
        households=households,
        models=2,
        anchors={"interval_s": 0.3},
        engine_factory="confirmatory.testing.fakes:null_engine",
        **design,
    )
    run_dir = tmp_path / "run"
    proc = procserver.popen(
        [sys.executable, str(SCRIPT), "run", str(path), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, run_dir


def _kill_when(proc: subprocess.Popen, holds, what: str) -> None:
    deadline = time.monotonic() + 120
    try:
        while not holds():
            assert proc.poll() is None, f"the run ended before {what}: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"{what} never came"
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _events(path: Path, event: str) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().splitlines() if f'"event":"{event}"'.encode() in x]


@pytest.mark.slow
def test_the_cost_of_calls_in_flight_at_the_kill_is_counted_by_the_continuation(tmp_path):
    """An attempt that made a call (journaled) and was killed before its
    record: its cost is in no record, yet the ceiling counted it. The
    continuation adds it (lost_nusd), so the continued total is the true one."""
    hh = [{"id": f"hh-{i:03d}", "cost_usd": 0.25, "plan": {"alone/0": ["ok", "slow"]}, "slow_s": 3.0} for i in range(4)]
    proc, run_dir = _start(tmp_path, hh)
    log = run_dir / "models" / "m0" / "run.jsonl"
    _kill_when(proc, lambda: log.exists() and b'"event":"call-cost"' in log.read_bytes(), "a journaled call")
    assert not any((run_dir / "models" / "m0" / "records").glob("*/alone/*.json")), "the attempt ended first"
    # before continue: the money shown is the journal's (its calls in flight counted), alike everywhere
    from moneycheck import money_agrees

    crashed = money_agrees(run_dir)
    journaled = sum(
        c["cost_nusd"] for m in ("m0", "m1") for c in _events(run_dir / "models" / m / "run.jsonl", "call-cost")
    )
    assert crashed["spend_total_nusd"] == journaled and crashed["spend"]["in_flight_nusd"] >= 250_000_000
    done = continue_cli(run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    cont = _events(log, "continuation")[0]
    # each attempt killed in flight had journaled its first call (0.25 USD): both lanes may have
    assert cont["lost"] and cont["lost_nusd"] == 250_000_000 * len(cont["lost"]), cont
    report = continued_ok(run_dir)
    close = _events(run_dir / "run.jsonl", "close")[0]
    attempts = sum(
        a["cost_nusd"] for m in ("m0", "m1") for a in _events(run_dir / "models" / m / "run.jsonl", "attempt")
    )
    lost = sum(
        c["lost_nusd"] for m in ("m0", "m1") for c in _events(run_dir / "models" / m / "run.jsonl", "continuation")
    )
    assert close["spend_total_nusd"] == attempts + lost and lost >= 250_000_000, report["outcome"]
    # after it: the total is the attempts' plus the lost costs, each shown, alike everywhere
    fig = money_agrees(run_dir)
    assert fig["spend_total_nusd"] == close["spend_total_nusd"] and fig["spend"]["lost_nusd"] == lost
    # the lost costs count against the cap: from the continuation on, the
    # admission decisions' finished spend holds them (the households the
    # crash cut short spent them), and verify's replay says the same
    ended = [h for h in _events(log, "household") if h["t"] < cont["t"]]
    after = [d for d in _events(run_dir / "models" / "m0" / "admission.jsonl", "decision") if d["t"] > cont["t"]]
    assert after and after[0]["finished_nusd"] == sum(h["spend_nusd"] for h in ended) + cont["lost_nusd"]


@pytest.mark.slow
def test_a_model_paused_at_the_kill_stays_paused_until_a_fresh_resume(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(8)]
    hh[0]["plan"] = {"m0:alone/0": "operator"}
    proc, run_dir = _start(tmp_path, hh)
    log = run_dir / "models" / "m0" / "run.jsonl"
    _kill_when(proc, lambda: log.exists() and b'"event":"pause"' in log.read_bytes(), "the pause")
    pause_t = _events(log, "pause")[0]["t"]
    cont = procserver.popen(
        [sys.executable, str(SCRIPT), "continue", str(run_dir), "--reason", "reboot", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        m1 = run_dir / "models" / "m1" / "run.jsonl"
        deadline = time.monotonic() + 120
        while len(_events(m1, "lane-end")) < 2:  # the other model runs to its end meanwhile
            assert cont.poll() is None and time.monotonic() < deadline, cont.stderr.read()[-2000:]
            time.sleep(0.05)
        time.sleep(0.5)
        started = [a for a in _events(log, "attempt") if a["start"] > pause_t]
        assert started == [], "an attempt of the paused model started before any resume"
        assert cont.poll() is None, "the continuation ended while its model was paused"
        # resumed; its household runs again whole, where the fault plan pauses it once more
        from confirmatory.engine.resume import model_state

        deadline = time.monotonic() + 120
        resumed: set[float | None] = set()  # each pause is resumed once: the runner may not have read the request yet
        while cont.poll() is None:
            assert time.monotonic() < deadline, "the continuation did not end"
            state, since = model_state(run_dir, "m0")
            if state == "paused" and since not in resumed:
                resumed.add(since)
                done = procserver.run(
                    [sys.executable, str(SCRIPT), "resume", str(run_dir), "--model", "m0"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert done.returncode == 0, done.stderr
            time.sleep(0.2)
        assert cont.returncode == 0, cont.stderr.read()[-2000:]
    finally:
        if cont.poll() is None:
            cont.kill()
            cont.wait()
    resumes = _events(log, "resume")
    assert resumes and all(r["accepted"] for r in resumes) and resumes[0]["request_t"] > pause_t
    continued_ok(run_dir)


@pytest.mark.slow
def test_the_continuation_clock_starts_above_every_recorded_time_when_the_wall_clock_is_behind(tmp_path, monkeypatch):
    """After a reboot the wall clock may read an hour earlier than the crashed
    runner's last line. The continuation's times still follow every time
    recorded (Clock.start_above): in-process, with time.time an hour behind."""
    import signal as signals

    from confirmatory.cli.run import continue_command

    run_dir, _ = states.kill_at(tmp_path, "a third of the households ended")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
    saved = {s: signals.getsignal(s) for s in (signals.SIGINT, signals.SIGTERM, signals.SIGHUP)}
    try:
        code = continue_command(run_dir, reason="the clock was set back", quiet=True)
    finally:
        for s, handler in saved.items():
            signals.signal(s, handler)
        monkeypatch.setattr(time, "time", real)
    assert code == 0
    (cont,) = _events(run_dir / "run.jsonl", "continuation")
    close = _events(run_dir / "run.jsonl", "close")[0]
    # the clock ran on above the crash, nudged up past every time it had given
    assert cont["crash_t"] < cont["t"] < close["t"] < cont["crash_t"] + 60
    continued_ok(run_dir)


@pytest.fixture(scope="module")
def crashed_once(tmp_path_factory):
    """One run killed a third of the way in, for the torn-tail cases to copy."""
    run_dir, _ = states.kill_at(tmp_path_factory.mktemp("torn"), "a third of the households ended")
    return run_dir


@pytest.mark.slow
def test_a_torn_tail_cut_at_any_byte_of_a_line_is_reported_moved_aside_whole_and_the_log_kept(
    crashed_once, tmp_path_factory
):
    """Every byte offset inside a line (Hypothesis picks the log, the line it
    imitates and the cut): verify reports a torn tail with its offset, length
    and sha256, and continue's first step moves exactly those bytes into the
    kept file and leaves the log as it was acknowledged, after which verify
    finds the run crashed with no torn tail and no violation. (The whole
    continuation on top of a torn tail: the test above.)"""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from confirmatory.commands.continue_run import prepare
    from confirmatory.design.load import load_design
    from confirmatory.verify import verify_run

    logs = ["models/m0/run.jsonl", "models/m1/admission.jsonl", "run.jsonl", "host.jsonl", "resume.jsonl"]
    design = load_design(crashed_once.parent / "design" / "design.toml")

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(rel=st.sampled_from(logs), data=st.data())
    def check(rel, data):
        copy = tmp_path_factory.mktemp("copy") / "run"
        shutil.copytree(crashed_once, copy)
        path = copy / rel
        acknowledged = path.read_bytes()
        last = acknowledged.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        cut = data.draw(st.integers(1, len(last)), label="cut")  # 1 .. the whole line without its newline
        path.write_bytes(acknowledged + last[:cut])
        report = verify_run(copy, workers=1)
        assert report.state == "crashed" and report.ok, report.to_table()
        torn = [t for t in report.crash["torn_tails"] if t["log"] == rel]
        assert torn == [
            {
                "log": rel,
                "offset": len(acknowledged),
                "length": cut,
                "sha256": sha256_hex(last[:cut]),
                "reason": torn[0]["reason"],
            }
        ]
        plan = prepare(copy, design, report, "torn")
        assert path.read_bytes() == acknowledged
        assert (copy / f"{rel}.torn-1").read_bytes() == last[:cut]
        assert plan["torn"] == [
            {
                "log": rel,
                "offset": len(acknowledged),
                "length": cut,
                "sha256": sha256_hex(last[:cut]),
                "kept": f"{rel}.torn-1",
            }
        ]
        after = verify_run(copy, workers=1)
        assert after.state == "crashed" and after.ok and after.crash["torn_tails"] == []
        shutil.rmtree(copy.parent)

    check()
