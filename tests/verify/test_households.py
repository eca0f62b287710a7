"""`verify --households FILE`: the study's households file against the run.

A run's records alone cannot say which households the study had: a draw
that leaves some out, alike in every model, is the seeded shuffle of its own
households and passes every other check. With the households file (pinned
by sha256 in design.toml), verify checks that it is the pinned file and that
every model's draw is its households in their seeded order (invariant 11).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from test_violations import pristine, reseal, run  # noqa: F401 - the generated run's fixtures

from confirmatory.core.streams import arm_orders, draw_order
from confirmatory.records.chain import dumps
from confirmatory.verify import verify_run

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "confirmatory_run.py"


def draw(root, model="alpha"):
    return json.loads((root / f"models/{model}/manifest.json").read_bytes())["draw"]


def households_file(path, ids):
    path.write_text("".join(json.dumps({"id": h, "income": 1000 + k}) + "\n" for k, h in enumerate(ids)))
    return path


def pin(root, path):
    """design.toml pins ``path`` (its sha256), the run manifest the new design; re-chained."""
    text = (root / "design.toml").read_text()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    text, n = re.subn(r'(\[households\]\npath = "[^"]*"\nsha256 = )"[^"]*"', rf'\1"{digest}"', text)
    assert n == 1
    (root / "design.toml").write_text(text)
    man = json.loads((root / "manifest.json").read_bytes())
    man["design_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (root / "manifest.json").write_bytes(dumps(man) + b"\n")
    reseal(root)


def test_the_households_file_of_the_run_passes_and_the_report_says_so(run, tmp_path):
    f = households_file(tmp_path / "households.jsonl", sorted(draw(run)))
    pin(run, f)
    report = verify_run(run, workers=1, households=f)
    assert report.ok, report.to_table()
    assert report.households_line() == (
        f"households: every model's draw is {f}'s {len(draw(run))} households, in their seeded order"
    )
    assert json.loads(report.to_json())["households"] == {
        "checked": True,
        "file": str(f),
        "count": len(draw(run)),
        "problems": 0,
    }
    assert report.households_line() in report.to_table()


def test_without_the_file_the_report_says_the_households_were_not_checked(run):
    report = verify_run(run, workers=1)
    assert report.ok
    assert report.households_line().startswith("households: not checked (verify --households FILE")
    assert json.loads(report.to_json())["households"] == {
        "checked": False,
        "file": None,
        "count": None,
        "problems": None,
    }


def test_a_study_whose_draws_all_left_out_households_fails_invariant_11(run, tmp_path):
    # Every model's draw made again without two households, the file pinned
    # as the study registered it: each draw is still its own seeded shuffle,
    # so only the file can tell (without it, this run passes).
    ids = sorted(draw(run))
    dropped = set(draw(run)[-2:])
    f = households_file(tmp_path / "households.jsonl", ids)
    pin(run, f)
    for model in ("alpha", "beta", "gamma"):
        path = run / f"models/{model}/manifest.json"
        mf = json.loads(path.read_bytes())
        arms = sorted(next(iter(mf["arm_orders"].values())))
        mf["draw"] = draw_order(mf["seed"], [h for h in ids if h not in dropped])
        mf["arm_orders"] = arm_orders(mf["seed"], model, mf["draw"], arms)
        path.write_bytes(dumps(mf) + b"\n")
    reseal(run)
    assert 11 not in verify_run(run, workers=1).failed()  # the records alone cannot tell
    report = verify_run(run, workers=1, households=f)
    assert 11 in report.failed(), report.to_table()
    messages = [(v.file, v.message) for v in report.result(11).first]
    for model in ("alpha", "beta", "gamma"):
        assert (
            f"models/{model}/manifest.json",
            f"draw is not the seeded shuffle of {f}'s {len(ids)} households (2 of its households missing, 0 not in it)",
        ) in messages
    assert report.households_problems == 3
    assert report.households_line() == f"households: {f}: 3 problem(s), listed under invariant 11"


def test_a_households_file_other_than_the_pinned_one_fails_invariant_11(run, tmp_path):
    ids = sorted(draw(run))
    pinned = households_file(tmp_path / "households.jsonl", ids)
    pin(run, pinned)
    other = households_file(tmp_path / "other.jsonl", ids[:-1])
    report = verify_run(run, workers=1, households=other)
    messages = [v.message for v in report.result(11).first]
    digest = hashlib.sha256(other.read_bytes()).hexdigest()
    assert any(f"has sha256 {digest}, the design expects" in m for m in messages), messages
    assert any("draw is not the seeded shuffle" in m and "1 not in it" in m for m in messages), messages


def test_an_unreadable_households_file_is_a_violation_not_a_traceback(run, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n")
    report = verify_run(run, workers=1, households=bad)
    assert 11 in report.failed()
    assert any("not JSON" in v.message for v in report.result(11).first), report.to_table()


def test_the_verify_command_takes_the_households_file(run, tmp_path):
    f = households_file(tmp_path / "households.jsonl", sorted(draw(run)))
    pin(run, f)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "verify", str(run), "--households", str(f)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"households: every model's draw is {f}'s" in out.stdout
    wrong = households_file(tmp_path / "wrong.jsonl", sorted(draw(run))[1:])
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "verify", str(run), "--households", str(wrong)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1 and "VERIFY FAILED: 11" in out.stdout, out.stdout
