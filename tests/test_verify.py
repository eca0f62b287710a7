"""verify on valid runs: every plan of the generator verifies, the report and
the command say so, and verify stays independent of the runner."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from confirmatory.hostrules import attempt_host_verdict
from confirmatory.records import HostIndex
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import Status, verify_command, verify_run

PLANS = {
    "default": Plan(anchor_every_s=150, cap_usd=0.45),
    "inconclusive signature stops a model": Plan(inconclusive=("alpha", 2), households=30),
    "deadline with a late cost": Plan(deadline=("alpha", 4), harness=None),
    "ceiling crossed": Plan(ceiling_usd=0.9),
    "durable chain writer": Plan(households=6, durable=True),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_a_generated_rule_abiding_run_passes_every_invariant(tmp_path, name):
    root = generate_run(tmp_path / "run", PLANS[name])
    report = verify_run(root)
    assert report.ok, report.to_table()
    assert all(r.checked > 0 for r in report.results)
    assert report.unanchored_tail == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return generate_run(tmp_path_factory.mktemp("v") / "run", PLANS["default"])


def test_the_command_prints_a_table_and_exits_zero_only_when_all_hold(run, capsys):
    assert verify_command(run) == 0
    out = capsys.readouterr().out
    assert "ALL INVARIANTS HOLD" in out and "spend conserved" in out
    assert verify_command(run, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and len(data["invariants"]) == 11


def test_a_violation_is_reported_with_its_file_and_line(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    path = bad / "models/alpha/run.jsonl"
    data = path.read_bytes().split(b"\n")
    data[5] = data[5].replace(b'"', b"'", 1)
    path.write_bytes(b"\n".join(data))
    report = verify_run(bad)
    first = report.result(8).first[0]
    assert first.file == "models/alpha/run.jsonl" and first.line == 5
    assert verify_command(bad) == 1
    assert report.result(8).status is Status.FAIL


def test_host_index_gives_the_verdict_of_the_whole_log():
    lines = [{"event": "open", "t": 0.0}]
    t = 0.0
    for k in range(200):
        t += 10 + (k % 7) * 9  # some gaps exceed max_gap_s
        lines.append({"event": "sample", "t": t, "mem_pressure": 50.0 if k % 13 == 0 else 1.0,
                      "clock_back_max_s": 2.5 if k == 40 else 0.0})
        if k % 17 == 0:
            lines.append({"event": "evidence", "t": t + 1, "source": "guard", "line": "x"})
    index = HostIndex(lines)
    for s in range(0, int(t) + 50, 7):
        for d in (0.5, 12.0, 80.0):
            full = attempt_host_verdict(lines, s, s + d, max_gap_s=45, pressure_threshold=10)
            assert index.verdict(s, s + d, max_gap_s=45, pressure_threshold=10) == full, (s, d)


def test_verify_imports_neither_the_runner_nor_litellm_nor_psutil():
    code = ("import sys, confirmatory.verify; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('litellm', 'psutil') "
            "or m in ('confirmatory.run', 'confirmatory.lanes', 'confirmatory.anchors', 'confirmatory.host')]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_witness_that_holds_every_anchor_passes_and_one_that_diverges_fails(run, tmp_path):
    from confirmatory.witness import publish

    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id=run.name)
    assert verify_run(run, witness=clone).ok
    # a forger re-chains anchors.jsonl after changing its open line: nothing in the
    # run can tell, the witness can
    import shutil

    from confirmatory.chain import dumps, log_seed, sha256_hex

    forged = tmp_path / "copy" / run.name
    shutil.copytree(run, forged)
    objs = [json.loads(x) for x in (forged / "anchors.jsonl").read_bytes().split(b"\n")[:-1]]
    objs[0]["t"] += 1
    seed = log_seed(sha256_hex((forged / "manifest.json").read_bytes()), "anchors.jsonl")
    out, head = [], seed
    for k, o in enumerate(objs):
        line = dumps({**o, "seq": k, "prev": head})
        out.append(line + b"\n")
        head = sha256_hex(line)
    (forged / "anchors.jsonl").write_bytes(b"".join(out))
    assert verify_run(forged).ok
    report = verify_run(forged, witness=clone)
    assert report.failed() == {8}
    assert any(v.file == "witness" for v in report.result(8).first)
