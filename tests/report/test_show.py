"""`confirmatory show`: its figures equal verify's (the report's `figures`
and state) on every kind of run: the demo, a paused-then-resumed run, a
ceiling run, a harness-stopped run and a crashed one (SIGKILL)."""

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
from moneycheck import money_agrees
from runhelpers import in_background, make_run

from confirmatory.core.money import format_usd
from confirmatory.engine.resume import request_resume
from confirmatory.report.show import read_run, render, show_command
from confirmatory.testing.designs import write_design
from confirmatory.verify import verify_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def same_as_verify(run_dir: Path) -> dict:
    """show's figures and state, each asserted equal to verify's; show's dict."""
    info = read_run(run_dir)
    report = verify_run(run_dir)
    assert report.ok, report.to_table(shown=10)
    assert info["state"] == report.state, (info["state_detail"], report.state_line())
    fig = report.figures
    for name, m in fig["models"].items():
        mine = info["models"][name]
        assert {k: mine[k] for k in m} == m, (name, mine, m)
    assert set(info["models"]) == set(fig["models"])
    assert info["close_status"] == fig["close_status"]
    assert info["stop_causes"] == fig["stop_causes"]
    money_agrees(run_dir, report)  # and the page's money, part by part
    text = render(info)  # and what a person reads says the same
    assert f"state: {report.state} " in text
    for name, m in fig["models"].items():
        assert f"  {name}: {m['households_ended']} of " in text
    return info


def finished(run, meanwhile=lambda: None):
    helper = in_background(meanwhile)
    result = run.wait()
    helper.join(10)
    run.close()
    return result


@pytest.mark.slow
def test_show_on_the_demo_run_says_what_verify_says(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "demo", "--out", str(tmp_path / "run")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    info = same_as_verify(tmp_path / "run")
    assert info["state"] == "complete" and info["study"] == "reference-calculator"
    assert info["models"]["careful"]["reruns_by_class"] == {"provider": 2}
    assert info["last_push"]["rc"] == 0 and info["final_anchor"]
    # a folder of runs: one line each, and JSON for machines
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "show", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert json.loads(out.stdout) == json.loads(json.dumps(info))


def test_show_on_a_paused_then_resumed_run(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, **FAST)
    run.start()

    def operator():
        while not run.models["m0"].paused:
            time.sleep(0.02)
        request_resume(run.run_dir, "m0")

    assert finished(run, operator).status == "completed"
    info = same_as_verify(run.run_dir)
    m = info["models"]["m0"]
    assert len(m["pauses"]) == 1 and [r["accepted"] for r in m["resumes"]] == [True]
    assert m["reruns_by_class"] == {"operator": 1}
    assert "    paused at " in render(info) and "resume at " in render(info)


def test_show_on_a_ceiling_run(tmp_path):
    hh = [{"id": f"hh-{i:03d}"} for i in range(12)]
    run = make_run(tmp_path, households=hh, models=2, overall_cap_usd=0.005, margin_usd=0.0, **FAST)
    run.start()
    assert finished(run).status == "ceiling"
    info = same_as_verify(run.run_dir)
    assert info["close_status"] == "ceiling" and info["ceiling_crossed"] is not None
    assert info["spend_total_nusd"] > info["ceiling_nusd"]
    assert "ceiling crossed at " in render(info)


def test_show_on_a_harness_stopped_run(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/0": "harness"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=2, arms=("alone",), **FAST)
    run.start()
    finished(run)
    info = same_as_verify(run.run_dir)
    stops = [s["cause"] for m in info["models"].values() for s in m["stops"]]
    assert "harness" in stops, info
    assert "stopped at " in render(info) and "KeyError" in render(info)


@pytest.mark.slow
def test_show_on_a_crashed_run_and_on_a_folder_of_runs(tmp_path, capsys):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(30)]
    design = write_design(tmp_path / "design", households=hh, models=2, anchors={"interval_s": 0.3}, **FAST)
    runs = tmp_path / "runs"
    proc = procserver.popen(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(runs / "a"), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        log = runs / "a" / "models" / "m0" / "run.jsonl"
        while not (log.exists() and log.read_bytes().count(b'"event":"household"') >= 3):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    info = same_as_verify(runs / "a")
    assert info["state"] == "crashed" and info["close_status"] is None
    assert "confirmatory continue" in info["state_detail"]
    assert show_command(runs) == 0
    ((name, state, models, households, _spend, verified),) = aligned(capsys.readouterr().out)
    assert (name, state, models, verified) == ("a", "crashed", "m0, m1", "not checked"), households


def test_show_refuses_a_directory_that_holds_no_run(tmp_path, capsys):
    assert show_command(tmp_path) == 1
    assert "is not a run directory, nor a folder holding any" in capsys.readouterr().err


def test_show_leaves_out_a_household_whose_attempt_lines_are_on_disk_but_not_its_household_line(tmp_path, monkeypatch):
    """A household's attempt lines are written, then the write of its
    household line fails (the disk): the run ends as a crash does, and that
    household is under way. show counts its results no more than verify
    does (a household ends with its household line, not its attempt lines)."""
    from runhelpers import execute, fail_first_write

    failed = fail_first_write(monkeypatch, "household", "/models/m0/run.jsonl")
    result, run_dir = execute(tmp_path, households=4, models=1, **FAST)
    monkeypatch.undo()
    assert failed and result.disk_failed
    lines = [json.loads(x) for x in (run_dir / "models" / "m0" / "run.jsonl").read_text().splitlines()]
    lined = {o["household"] for o in lines if o["event"] == "attempt"}
    ended = {o["household"] for o in lines if o["event"] == "household"}
    assert lined - ended, "no household with attempt lines and no household line"
    info = same_as_verify(run_dir)
    assert info["state"] == "crashed"


def columns(text: str) -> list[list[tuple[int, int, str]]]:
    """Each row of a table as its cells (start, end, text): cells are parted by two spaces or more."""
    import re

    return [[(m.start(), m.end(), m[0]) for m in re.finditer(r"\S+(?: \S+)*", row)] for row in text.splitlines()]


def aligned(text: str) -> list[list[str]]:
    """Assert the table's rows line up under its header (text left, counts and money right); the cells."""
    rows = columns(text.split("\n\n")[0])
    header = rows[0]
    assert [c[2] for c in header] == ["run", "state", "models", "households", "spend", "verified"]
    for row in rows[1:]:
        assert len(row) == len(header), row
        for cell, head in zip(row, header):
            if head[2] in ("households", "spend"):
                assert cell[1] == head[1], (head[2], row)
            else:
                assert cell[0] == head[0], (head[2], row)
    return [[c[2] for c in row] for row in rows[1:]]


def test_show_of_a_folder_is_an_aligned_table_that_says_it_did_not_verify_and_with_verify_marks_a_failure(
    tmp_path, capsys
):
    from confirmatory.testing.rungen import Plan, generate_run

    runs = tmp_path / "runs"
    generate_run(runs / "a-long-run-name", Plan(households=6, harness=None))
    generate_run(runs / "b", Plan(households=3, harness=None, ceiling_usd=0.9))
    shutil.copytree(runs / "a-long-run-name", runs / "c-tampered")
    log = runs / "c-tampered" / "models" / "alpha" / "run.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    k = next(i for i, x in enumerate(lines) if '"event":"attempt"' in x and '"cost_nusd":0,' not in x)
    lines[k] = lines[k].replace('"cost_nusd":', '"cost_nusd":1', 1)
    log.write_text("".join(lines))

    assert show_command(runs) == 0
    out = capsys.readouterr().out
    cells = aligned(out)
    assert [c[0] for c in cells] == ["a-long-run-name", "b", "c-tampered"]
    assert {c[5] for c in cells} == {"not checked"}
    assert "show reads the records, it does not check them" in out
    assert show_command(runs, verify=True) == 0
    out = capsys.readouterr().out
    cells = aligned(out)
    assert cells[0][5] == "holds" and cells[2][5].startswith("FAILS ")
    assert "it does not check them" not in out and "FAILS: verify finds violations" in out
    report = verify_run(runs / "c-tampered")
    assert cells[2][5] == "FAILS " + ",".join(map(str, sorted(report.failed())))
    # one run: the same word, before its figures
    assert show_command(runs / "c-tampered", verify=True) == 0
    assert "verified: VERIFY FAILS (invariants " in capsys.readouterr().out.splitlines()[2]
    assert show_command(runs / "c-tampered", as_json=True, verify=True) == 0
    assert json.loads(capsys.readouterr().out)["verified"]["ok"] is False


@pytest.mark.slow
def test_show_of_a_folder_marks_a_continued_run_a_ceiling_run_and_a_tampered_one(
    crashed_run, ceiling_run, tampered_run, tmp_path, capsys
):
    runs = tmp_path / "runs"
    shutil.copytree(crashed_run, runs / "continued")
    shutil.copytree(crashed_run, runs / "crashed")
    shutil.copytree(ceiling_run, runs / "over")
    shutil.copytree(tampered_run[0], runs / "tampered")
    done = subprocess.run(
        [sys.executable, "-m", "confirmatory", "continue", str(runs / "continued"), "--reason", "a reboot"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert show_command(runs, verify=True) == 0
    out = capsys.readouterr().out
    cells = {c[0]: c for c in aligned(out)}
    assert cells["continued"][1] == "complete, continued" and cells["continued"][5] == "holds"
    assert cells["crashed"][1] == "crashed" and cells["crashed"][5] == "holds so far (crashed)"
    assert cells["over"][1] == "complete, ceiling"
    assert cells["tampered"][1] == "complete, stopped" and cells["tampered"][5].startswith("FAILS ")
    assert "continued: the runner died and the run was carried on" in out
    for name, c in cells.items():
        info = read_run(runs / name)
        ended = sum(m["households_ended"] for m in info["models"].values())
        draw = sum(m["draw"] for m in info["models"].values())
        assert c[3] == f"{ended}/{draw}" and ended <= draw, name
        assert c[4].startswith(format_usd(verify_run(runs / name).figures["spend_total_nusd"]) + " of "), name
    text = render(read_run(runs / "continued"))
    assert "the runner died at " in text and "continued at " in text and ": a reboot" in text


def test_show_says_what_proves_each_anchor_as_logged(tmp_path):
    from confirmatory.testing.synthetic_evidence import generate_evidence_run

    keys = generate_evidence_run(tmp_path / "run", refused=frozenset({(2, 1)}))
    info = read_run(tmp_path / "run")
    rows = info["anchor_evidence"]
    assert [a["seq"] for a in rows] == [1, 2, 3] and rows[-1]["final"]
    names = [c.name for c in keys.cosigners]
    assert [[c["name"] for c in a["evidence"]["cosignatures"]] for a in rows] == [names, names[:1], names]
    assert all(a["evidence"]["git"] and a["evidence"]["signature"] for a in rows)
    assert info["evidence"]["verifier_key"] == str(keys.signer.verifier)
    text = render(info)
    assert "what proves each anchor (as logged; confirmatory verify checks every signature and stamp):" in text
    assert f"  anchor 2: git push ok; signed by the study; cosigned by {names[0]} at 2027-01-15 " in text
    assert "  anchor 3 (final): git push ok; signed by the study; cosigned by" in text
    # a run whose design names no evidence says so
    from confirmatory.testing.rungen import Plan, generate_run

    plain = generate_run(tmp_path / "plain", Plan(households=2, anchor_every_s=120, cap_usd=0.3))
    assert "evidence: the git witness only" in render(read_run(plain))
    assert read_run(plain)["anchor_evidence"][0]["evidence"] == {
        "git": True,
        "signature": False,
        "cosignatures": [],
        "stamps": [],
    }


@pytest.mark.slow
def test_shows_evidence_of_a_run_through_a_local_tsa_and_witness_is_verifys(tmp_path):
    from confirmatory.design.load import load_design
    from confirmatory.engine.run import Run
    from confirmatory.testing.evidence import local_evidence
    from confirmatory.testing.tsa import openssl_missing

    if openssl_missing():
        pytest.skip(openssl_missing())
    with local_evidence(tmp_path / "ev", origin="example.org/study/show", tsas=1, witnesses=2) as ev:
        design = write_design(tmp_path / "design", households=4, anchors=ev.anchors(interval_s=0.3))
        assert Run(load_design(design), tmp_path / "run").execute().status == "completed"
    report = verify_run(tmp_path / "run")
    assert report.ok
    shown = read_run(tmp_path / "run")["anchor_evidence"]
    assert [a["seq"] for a in shown] == [a["seq"] for a in report.anchors]
    for mine, checked in zip(shown, report.anchors):
        e, v = mine["evidence"], checked["evidence"]
        assert (e["git"], e["signature"]) == (v["git"], v["signature"])
        assert [(c["name"], c["time"]) for c in e["cosignatures"]] == [
            (c["name"], c["time"]) for c in v["cosignatures"]
        ]
        assert [(s["tsa"], s["gen_time"], s["file"]) for s in e["stamps"]] == [
            (s["tsa"], s["gen_time"], s["file"]) for s in v["stamps"]
        ]
    assert len(shown[-1]["evidence"]["cosignatures"]) == 2 and len(shown[-1]["evidence"]["stamps"]) == 1
