"""A run's state, as verify says it: complete, running or crashed.

Real runner processes killed with SIGKILL at points chosen from their own
progress on disk: each crashed run verifies with no violation, exit 3 and
state "crashed", what only the crash explains under "crash"; a run killed
after its close line points at push-anchor, which completes it. Torn tails
(a last line cut short) are the crash's; a log cut shorter than an anchor
counted, or damaged before its last line, is still a violation.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confirmatory.records.chain import sha256_hex
from confirmatory.testing.designs import write_design
from confirmatory.verify import verify_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def _lines(path: Path) -> list[bytes]:
    try:
        return path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return []


def _model_logs(run_dir: Path, name: str) -> list[Path]:
    return sorted((run_dir / "models").glob(f"*/{name}"))


def _past_last_anchor(run_dir: Path) -> bool:
    """Whether some model log holds two lines past what the last anchor counts."""
    try:
        last = json.loads(_lines(run_dir / "anchors.jsonl")[-1])["logs"]
    except (IndexError, ValueError, KeyError):
        return False
    return any(
        len(_lines(p)) >= last.get(p.relative_to(run_dir).as_posix(), {}).get("lines", 0) + 2
        for p in _model_logs(run_dir, "run.jsonl")
    )


# Points in a run's life, each a predicate on what is on disk.
POINTS = {
    "run directory made": lambda d: d.is_dir(),
    "run manifest written": lambda d: (d / "manifest.json").exists(),
    "first model log open": lambda d: any(_model_logs(d, "run.jsonl")),
    "first decision": lambda d: any(len(_lines(p)) >= 2 for p in _model_logs(d, "admission.jsonl")),
    "first record": lambda d: any((d / "models").glob("*/records/*/*/*.json")),
    "first attempt line": lambda d: any(b'"event":"attempt"' in p.read_bytes() for p in _model_logs(d, "run.jsonl")),
    "first household ended": lambda d: any(
        b'"event":"household"' in p.read_bytes() for p in _model_logs(d, "run.jsonl")
    ),
    "first anchor": lambda d: len(_lines(d / "anchors.jsonl")) >= 2,
    "first anchor pushed": lambda d: len(_lines(d / "anchor-pushes.jsonl")) >= 2,
    "a third of the households ended": lambda d: (
        sum(p.read_bytes().count(b'"event":"household"') for p in _model_logs(d, "run.jsonl")) >= 10
    ),
    "a lane ended": lambda d: any(b'"event":"lane-end"' in p.read_bytes() for p in _model_logs(d, "run.jsonl")),
    "a third ended, lines past the second anchor": lambda d: (
        POINTS["a third of the households ended"](d) and len(_lines(d / "anchors.jsonl")) >= 3 and _past_last_anchor(d)
    ),
    "final anchor": lambda d: (
        b'"final":true' in (d / "anchors.jsonl").read_bytes() if (d / "anchors.jsonl").exists() else False
    ),
    "close line": lambda d: (
        b'"event":"close"' in (d / "run.jsonl").read_bytes() if (d / "run.jsonl").exists() else False
    ),
}


def start(tmp_path: Path, households: int = 30, latency_s: float = 0.02) -> tuple[subprocess.Popen, Path]:
    hh = [{"id": f"hh-{i:03d}", "latency_s": latency_s} for i in range(households)]
    design = write_design(tmp_path / "design", households=hh, models=2, anchors={"interval_s": 0.3}, **FAST)
    run_dir = tmp_path / "run"
    proc = procserver.popen(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, run_dir


def kill_at(tmp_path: Path, point: str) -> tuple[Path, bool]:
    """Run, SIGKILL the runner as soon as ``point`` holds; whether the run had ended by itself first."""
    proc, run_dir = start(tmp_path)
    deadline = time.monotonic() + 120
    try:
        while not POINTS[point](run_dir):
            if proc.poll() is not None:
                return run_dir, True
            assert time.monotonic() < deadline, f"{point} never came"
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return run_dir, False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def verify_cli(run_dir: Path, *extra: str) -> tuple[int, dict]:
    done = procserver.run(
        [sys.executable, str(SCRIPT), "verify", str(run_dir), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def violations(report: dict) -> list[str]:
    return [
        f"{v['invariant']} {v['file']}:{v['line']}: {v['message']}" for r in report["invariants"] for v in r["first"]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
def test_a_run_killed_at_any_point_verifies_as_crashed_with_no_violation(tmp_path, point):
    run_dir, ended = kill_at(tmp_path, point)
    assert not ended, f"the run ended before {point}"
    rc, report = verify_cli(run_dir)
    assert violations(report) == []
    if report["state"] == "complete":  # the kill came after the final push
        assert point in ("close line", "final anchor") and rc == 0
        return
    assert (rc, report["state"]) == (3, "crashed"), report
    crash = report["crash"]
    assert set(crash) == {
        "stage",
        "manifest",
        "final_anchor",
        "last_durable_t",
        "under_way",
        "torn_tails",
        "unanchored_tail",
        "explained",
    }
    if point == "run directory made" and not (run_dir / "manifest.json").exists():
        assert crash["manifest"] is False
        return
    assert crash["manifest"] is True
    assert isinstance(crash["last_durable_t"], float)
    if point in ("close line", "final anchor"):
        assert crash["stage"] == "closed"  # only the final anchor, or its push, is missing
        assert crash["final_anchor"] is (point == "final anchor") or point == "close line"
    else:
        assert crash["stage"] == "under way"
        assert any(e["message"].startswith("no close line") for e in crash["explained"])
    table = procserver.run(
        [sys.executable, str(SCRIPT), "verify", str(run_dir)], capture_output=True, text=True, timeout=120
    ).stdout
    assert table.splitlines()[0].startswith("state: crashed")
    assert "NO VIOLATION, BUT THE RUN IS NOT COMPLETE (crashed)" in table


@pytest.mark.slow
def test_a_run_killed_after_its_close_line_is_finished_by_push_anchor(tmp_path):
    # The kill lands between the final anchor and its push, or after the push.
    for attempt in range(5):
        run_dir, ended = kill_at(tmp_path / f"try{attempt}", "final anchor")
        rc, report = verify_cli(run_dir)
        if report["state"] == "crashed":
            break
    else:
        pytest.skip("each kill came after the final push (the run was complete)")
    assert rc == 3 and report["crash"]["stage"] == "closed" and report["crash"]["final_anchor"] is True
    table = procserver.run(
        [sys.executable, str(SCRIPT), "verify", str(run_dir)], capture_output=True, text=True, timeout=120
    ).stdout
    assert f"carry it on with: confirmatory push-anchor {run_dir}" in table.splitlines()[0]
    pushed = procserver.run(
        [sys.executable, str(SCRIPT), "push-anchor", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert pushed.returncode == 0, pushed.stderr
    rc, report = verify_cli(run_dir)
    assert (rc, report["state"], report["crash"]) == (0, "complete", None)


def test_a_run_closed_and_cut_short_before_its_first_push_had_run_is_crashed_not_failed(tmp_path):
    # A short run can write its close line and final anchor before its first
    # push returns (a loaded machine, a slow witness): killed then, its
    # anchor-pushes.jsonl holds its open line only.
    from confirmatory.testing.rungen import Plan, generate_run

    run_dir = generate_run(tmp_path / "run", Plan(households=3))
    pushes = run_dir / "anchor-pushes.jsonl"
    pushes.write_bytes(_lines(pushes)[0])
    report = verify_run(run_dir)
    assert report.ok and report.state == "crashed", report.to_table()
    assert report.crash["stage"] == "closed" and report.crash["final_anchor"] is True
    assert "no anchor was pushed before the run was cut short" in report.to_table()


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """One run killed mid-run (households under way, lines past its last anchor)."""
    tmp = tmp_path_factory.mktemp("crashed")
    run_dir, ended = kill_at(tmp, "a third ended, lines past the second anchor")
    assert not ended
    report = verify_run(run_dir)
    assert report.ok and report.state == "crashed", report.to_table()
    return run_dir


def copy_of(crashed: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(crashed, target)
    return target


def unanchored_log(run_dir: Path) -> tuple[str, int]:
    """A log with lines past the last anchor, and how many lines its last anchor counts."""
    anchors = [json.loads(line) for line in _lines(run_dir / "anchors.jsonl")[1:]]
    last = anchors[-1]["logs"] if anchors else {}
    for rel in sorted(p.relative_to(run_dir).as_posix() for p in _model_logs(run_dir, "run.jsonl")):
        counted = last.get(rel, {}).get("lines", 0)
        if len(_lines(run_dir / rel)) > counted + 1:
            return rel, counted
    raise AssertionError("the crashed run was killed with two lines past the last anchor in a model log")


def latest_log(run_dir: Path) -> str:
    """The log holding the run's last durable line (the greatest t): the one
    line a crash can have cut short, since every later write would be after it."""
    latest = {}
    for path in sorted(run_dir.rglob("*.jsonl")):
        lines = _lines(path)
        if len(lines) > 1:
            last = json.loads(lines[-1])
            latest[path.relative_to(run_dir).as_posix()] = last.get("t", last.get("end"))
    return max(latest, key=latest.get)


def test_the_json_report_has_exactly_one_of_the_three_states(crashed, tmp_path):
    report = json.loads(verify_run(crashed).to_json())
    assert report["state"] == "crashed" and report["under_way"] is None
    assert report["crash"]["under_way"], "the run was killed with households under way"
    for model, households in report["crash"]["under_way"].items():
        ended = {
            json.loads(line).get("household")
            for line in _lines(crashed / "models" / model / "run.jsonl")
            if b'"event":"household"' in line
        }
        admitted = {
            json.loads(line).get("household")
            for line in _lines(crashed / "models" / model / "admission.jsonl")
            if b'"admit":true' in line
        }
        # under way: admitted, and no household line
        assert households and set(households) <= admitted - ended, (model, households)


def test_a_torn_last_line_is_the_crashs_with_its_offset_length_and_hash(crashed, tmp_path):
    run_dir = copy_of(crashed, tmp_path)
    rel = latest_log(run_dir)
    path = run_dir / rel
    data = path.read_bytes()
    cut = len(data) - 7  # inside the last line
    path.write_bytes(data[:cut])
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    rc_report = verify_run(run_dir)
    assert rc_report.ok, rc_report.to_table()
    assert rc_report.exit_status() == 3
    assert rc_report.crash["torn_tails"] == [
        {
            "log": rel,
            "offset": start,
            "length": cut - start,
            "sha256": sha256_hex(data[start:cut]),
            "reason": rc_report.crash["torn_tails"][0]["reason"],
        }
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_log_cut_at_any_byte_of_its_last_line_verifies_as_crashed(crashed, tmp_path_factory, data):
    run_dir = copy_of(crashed, tmp_path_factory.mktemp("cut"))
    rel = latest_log(run_dir)
    path = run_dir / rel
    whole = path.read_bytes()
    start = whole.rstrip(b"\n").rfind(b"\n") + 1
    cut = data.draw(st.integers(min_value=start, max_value=len(whole) - 1), label="cut")
    path.write_bytes(whole[:cut])
    report = verify_run(run_dir)
    assert report.ok, report.to_table()
    assert report.state == "crashed"
    torn = report.crash["torn_tails"]
    assert torn == (
        []
        if cut == start
        else [
            {
                "log": rel,
                "offset": start,
                "length": cut - start,
                "sha256": sha256_hex(whole[start:cut]),
                "reason": torn[0]["reason"],
            }
        ]
    )


def test_a_log_cut_shorter_than_its_last_anchor_counted_is_a_violation(crashed, tmp_path):
    run_dir = copy_of(crashed, tmp_path)
    anchors = [json.loads(line) for line in _lines(run_dir / "anchors.jsonl")[1:]]
    rel = next(r for r, e in anchors[-1]["logs"].items() if e["lines"] >= 3 and r.startswith("models/"))
    lines = _lines(run_dir / rel)
    (run_dir / rel).write_bytes(b"".join(lines[: anchors[-1]["logs"][rel]["lines"] - 1]))
    report = verify_run(run_dir)
    assert not report.ok and 8 in report.failed()
    assert report.exit_status() == 1


def test_a_line_damaged_before_the_last_one_is_tampering_not_a_torn_tail(crashed, tmp_path):
    run_dir = copy_of(crashed, tmp_path)
    rel, _ = unanchored_log(run_dir)
    lines = _lines(run_dir / rel)
    lines[-2] = lines[-2][:10] + b"X" + lines[-2][11:]
    (run_dir / rel).write_bytes(b"".join(lines))
    report = verify_run(run_dir)
    assert not report.ok and report.exit_status() == 1
    assert report.crash["torn_tails"] == []


def test_a_household_never_ended_that_its_lane_decided_past_is_still_a_violation(crashed, tmp_path):
    # Drop one household line of a finished household (and re-chain the log):
    # its lane went on to the next, so the crash does not explain it.
    from confirmatory.records.chain import dumps, log_seed

    run_dir = copy_of(crashed, tmp_path)
    model_dir = sorted((run_dir / "models").iterdir())[0]
    rel = f"models/{model_dir.name}/run.jsonl"
    objs = [json.loads(line) for line in _lines(run_dir / rel)]
    first_end = next(i for i, o in enumerate(objs) if o.get("event") == "household")
    del objs[first_end]
    seed = log_seed(sha256_hex((model_dir / "manifest.json").read_bytes()), rel)
    out, prev = [], seed
    for seq, o in enumerate(objs):
        o = {**o, "seq": seq, "prev": prev}
        line = dumps(o)
        out.append(line + b"\n")
        prev = sha256_hex(line)
    (run_dir / rel).write_bytes(b"".join(out))
    for anchor_file in ("anchors.jsonl",):  # the anchors no longer match: drop them but the open line
        (run_dir / anchor_file).write_bytes(_lines(run_dir / anchor_file)[0])
    report = verify_run(run_dir)
    assert 4 in report.failed(), report.to_table()
    assert any("never ended" in v.message for v in report.result(4).first)
