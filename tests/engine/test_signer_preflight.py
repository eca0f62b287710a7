"""Preflight refuses a study key that is missing, open to others, or not the pinned one (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from confirmatory.design.load import load_design
from confirmatory.design.model import DesignError
from confirmatory.engine.preflight import signer_problems
from confirmatory.records.keyfile import make_key_file
from confirmatory.testing.designs import write_design

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "confirmatory_run.py"


def _design(tmp_path: Path, key: Path, vkey: str) -> Path:
    return write_design(
        tmp_path / "design",
        households=2,
        anchors={"command": ["true"], "signer": {"key_file": str(key), "verifier_key": vkey}},
    )


@pytest.mark.slow
def test_a_key_that_is_not_the_pinned_one_is_refused_by_run_before_the_run_directory_is_made(tmp_path):
    pinned = make_key_file(tmp_path / "keys" / "pinned.key", "example.org/study")
    make_key_file(tmp_path / "keys" / "other.key", "example.org/study")
    design = _design(tmp_path, tmp_path / "keys" / "other.key", pinned)
    problems = signer_problems(load_design(design))
    assert len(problems) == 1 and problems[0].startswith("anchors.signer.verifier_key: the key in ")
    assert f"not the pinned {pinned}" in problems[0]
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "anchors.signer.verifier_key" in done.stderr, done.stderr
    assert not run_dir.exists()
    secret = (tmp_path / "keys" / "other.key").read_text().strip()
    assert secret not in done.stderr + done.stdout


def test_a_key_file_open_to_others_or_missing_is_refused_naming_the_field(tmp_path):
    key = tmp_path / "keys" / "study.key"
    vkey = make_key_file(key, "example.org/study")
    loaded = load_design(_design(tmp_path, key, vkey))
    assert signer_problems(loaded) == []
    os.chmod(key, 0o644)
    (problem,) = signer_problems(loaded)
    assert problem.startswith("anchors.signer.key_file:") and "mode 0644" in problem
    key.unlink()
    (problem,) = signer_problems(loaded)
    assert problem.startswith("anchors.signer.key_file:") and "not found" in problem


def test_a_bad_evidence_table_names_its_field(tmp_path):
    key = tmp_path / "k.key"
    vkey = make_key_file(key, "example.org/study")
    wkey = make_key_file(tmp_path / "w.key", "witness.example", cosigner=True)
    cases = {
        "anchors.origin: the origin 'a b' holds a space": {"origin": "a b"},
        "anchors.signer.verifier_key:": {"signer": {"key_file": "k", "verifier_key": "nope"}},
        "anchors.witnesses: needs [anchors.signer]": {
            "witnesses": [{"url": "http://127.0.0.1:1", "verifier_key": wkey}]
        },
        "anchors.cosignatures_required: must be <= the number of witnesses, 0 (got 1)": {
            "signer": {"key_file": str(key), "verifier_key": vkey},
            "cosignatures_required": 1,
        },
        "anchors.timestamps_required: must be <= the number of time-stamping authorities, 0 (got 2)": {
            "signer": {"key_file": str(key), "verifier_key": vkey},
            "timestamps_required": 2,
        },
    }
    for expected, anchors in cases.items():
        design = write_design(tmp_path / "d", households=2, anchors={"command": ["true"], **anchors})
        with pytest.raises(DesignError) as info:
            load_design(design)
        assert any(p.startswith(expected) for p in info.value.problems), (expected, info.value.problems)


def test_a_tsa_certificate_that_drifted_from_its_pin_is_refused_naming_the_pin(tmp_path):
    key = tmp_path / "k.key"
    vkey = make_key_file(key, "example.org/study")
    (tmp_path / "tsa.pem").write_text("certificate\n")
    (tmp_path / "ca.pem").write_text("ca\n")
    tsa = {
        "url": "http://127.0.0.1:1/",
        "certificate": str(tmp_path / "tsa.pem"),
        "certificate_sha256": "0" * 64,
        "ca": str(tmp_path / "ca.pem"),
        "ca_sha256": __import__("hashlib").sha256(b"ca\n").hexdigest(),
    }
    design = write_design(
        tmp_path / "d",
        households=2,
        anchors={"command": ["true"], "signer": {"key_file": str(key), "verifier_key": vkey}, "timestamps": [tsa]},
    )
    with pytest.raises(DesignError) as info:
        load_design(design)
    assert [p for p in info.value.problems if "anchors.timestamps" in p] == [
        f"anchors.timestamps[0].certificate_sha256: {tmp_path / 'tsa.pem'} has drifted: expected sha256 {'0' * 64}, "
        f"actual {__import__('hashlib').sha256(b'certificate' + bytes([10])).hexdigest()}"
    ]


def test_check_says_what_will_prove_each_anchor_and_how_many_must_at_the_end(tmp_path):
    from hashlib import sha256

    from confirmatory.engine.check import render_plan

    key = tmp_path / "k.key"
    vkey = make_key_file(key, "example.org/study")
    wkeys = [make_key_file(tmp_path / f"w{i}.key", f"witness{i}.example", cosigner=True) for i in range(3)]
    tsas = []
    for i in range(2):
        for name in ("tsa", "ca"):
            (tmp_path / f"{name}{i}.pem").write_text(f"{name} {i}\n")
        tsas.append(
            {
                "url": f"http://127.0.0.1:{9000 + i}/",
                "certificate": str(tmp_path / f"tsa{i}.pem"),
                "certificate_sha256": sha256(f"tsa {i}\n".encode()).hexdigest(),
                "ca": str(tmp_path / f"ca{i}.pem"),
                "ca_sha256": sha256(f"ca {i}\n".encode()).hexdigest(),
            }
        )
    anchors = {
        "command": ["true"],
        "origin": "example.org/study/plan",
        "signer": {"key_file": str(key), "verifier_key": vkey},
        "timestamps": tsas,
        "timestamps_required": 1,
        "witnesses": [{"url": f"http://127.0.0.1:{9100 + i}", "verifier_key": w} for i, w in enumerate(wkeys)],
    }
    plan = render_plan(load_design(write_design(tmp_path / "d", households=2, anchors=anchors)))
    assert (
        "evidence: checkpoints signed by example.org/study (origin 'example.org/study/plan'); "
        "2 TSA(s), 1 must stamp the final anchor; 3 witness(es), 3 must cosign the final checkpoint\n"
    ) in plan
