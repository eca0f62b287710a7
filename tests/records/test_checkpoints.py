"""``confirmatory checkpoint``: an anchor's signed checkpoint read back from the run's records, as a
reviewer runs it (a real process), on a synthetic run whose stamps come from a local RFC 3161 TSA
(a real process on 127.0.0.1) and whose cosignatures are by real witness keys."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from confirmatory.core import merkle
from confirmatory.core.checkpoint import open_checkpoint
from confirmatory.core.cosignature import CosignatureVerifier, verify_cosignature
from confirmatory.core.note import NoteSigner, NoteVerifier, parse_note
from confirmatory.records.checkpoints import read_evidence, signed_checkpoint
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.testing.synthetic_evidence import generate_evidence_run
from confirmatory.testing.tsa import openssl_missing, start_tsa

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing()))


def cli(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "confirmatory", *map(str, args)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("checkpoint")
    with start_tsa(tmp / "tsa") as tsa:
        keys = generate_evidence_run(tmp / "run", tsas=(tsa,), refused=frozenset({(2, 1)}))
    return tmp / "run", keys


def anchors_lines(run_dir: Path) -> list[bytes]:
    return (run_dir / "anchors.jsonl").read_bytes().split(b"\n")[:-1]


def test_checkpoint_prints_the_last_anchors_note_signed_by_the_study_and_cosigned_by_each_witness(run):
    run_dir, keys = run
    done = cli("checkpoint", run_dir)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = anchors_lines(run_dir)
    known = [keys.signer.verifier, *(c.verifier for c in keys.cosigners)]
    checkpoint, opened = open_checkpoint(done.stdout, known)
    # the head of anchors.jsonl: its every line, the RFC 9162 root computed here from the file itself
    assert checkpoint.origin == "example.org/synthetic" and checkpoint.size == len(lines)
    assert checkpoint.root == merkle.root(merkle.leaf_hashes(lines))
    assert [s.name for s in opened.verified] == ["example.org/study", *(c.name for c in keys.cosigners)]
    assert done.stdout.startswith(checkpoint.body() + "\n— example.org/study ")


def test_checkpoint_json_gives_its_fields_each_cosignature_and_each_stamp_read_from_the_tsr(run):
    run_dir, keys = run
    done = cli("checkpoint", run_dir, "--anchor", 2, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    lines = anchors_lines(run_dir)
    assert info["anchor"] == 2 and info["tree_size"] == 3 and json.loads(lines[2])["seq"] == 2
    assert base64.b64decode(info["root"]) == merkle.root(merkle.leaf_hashes(lines[:3]))
    assert info["body"] == f"example.org/synthetic\n3\n{info['root']}\n"
    assert info["verifier_key"] == str(keys.signer.verifier) and info["signature_verified"] is True
    # witness 1 refused anchor 2: its one cosignature is witness 0's, and the note holds it
    [cos] = info["cosignatures"]
    assert (cos["witness"], cos["name"], cos["key"]) == (0, keys.cosigners[0].name, str(keys.cosigners[0].verifier))
    sig = parse_note(info["note"]).signatures[1]
    assert verify_cosignature(CosignatureVerifier.parse(cos["key"]), info["body"], sig).timestamp == cos["time"]
    assert open_checkpoint(info["note"], [NoteVerifier.parse(info["verifier_key"])])[0].size == 3
    [stamp] = info["stamps"]
    assert stamp["file"] == "evidence/stamps/2.0.tsr" and stamp["verified"] is True
    assert stamp["tsa"] == "CN=Local TSA" and stamp["gen_time"] == stamp["logged_gen_time"]
    assert stamp["gen_time"].endswith("Z")


def test_a_forged_cosignature_and_another_anchors_stamp_are_shown_as_not_verifying(run, tmp_path):
    run_dir, _ = run
    bad = tmp_path / "run"
    shutil.copytree(run_dir, bad)
    pushes = bad / "anchor-pushes.jsonl"
    objs = [json.loads(x) for x in pushes.read_bytes().split(b"\n")[:-1]]
    last = max(o.get("anchor_seq", 0) for o in objs)
    cos = next(o for o in objs if o["event"] == "cosignature" and o["anchor_seq"] == last and o["witness"] == 1)
    raw = bytearray(base64.b64decode(cos["line"].split(" ")[2]))
    raw[-1] ^= 1  # one bit of the signature
    forged = f"{cos['line'].rsplit(' ', 1)[0]} {base64.b64encode(bytes(raw)).decode()}"
    pushes.write_text(pushes.read_text().replace(cos["line"], forged))
    shutil.copyfile(bad / "evidence/stamps/1.0.tsr", bad / f"evidence/stamps/{last}.0.tsr")  # another checkpoint's
    info = signed_checkpoint(bad)
    assert [c["verified"] for c in info["cosignatures"]] == [True, False]
    assert info["stamps"][0]["verified"] is False and "a stamp of another message" in info["stamps"][0]["error"]
    done = cli("checkpoint", bad)
    assert done.returncode == 0
    assert "the cosignature by witness-1.example.org does not verify" in done.stderr
    assert f"the stamp evidence/stamps/{last}.0.tsr (a stamp of another message" in done.stderr
    # the study's signature: another key's is not the manifest's
    man = json.loads((bad / "manifest.json").read_text())
    man["evidence"]["verifier_key"] = str(NoteSigner.generate("example.org/study").verifier)
    (bad / "manifest.json").write_text(json.dumps(man))
    assert signed_checkpoint(bad)["signature_verified"] is False


def test_refusals_a_run_without_checkpoints_an_anchor_out_of_range_an_anchor_without_its_line(run, tmp_path):
    run_dir, _ = run
    plain = generate_run(tmp_path / "plain", Plan(households=2, anchor_every_s=120, cap_usd=0.3))
    done = cli("checkpoint", plain)
    assert done.returncode == 1 and "the run has no signed checkpoints" in done.stderr and not done.stdout
    done = cli("checkpoint", run_dir, "--anchor", 99)
    assert done.returncode == 2 and "no anchor line with seq 99 (its anchors: 1 to" in done.stderr
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut)
    pushes = cut / "anchor-pushes.jsonl"
    last = read_evidence(cut).anchors[-1].seq
    kept = [x for x in pushes.read_bytes().split(b"\n")[:-1] if json.loads(x).get("anchor_seq") != last]
    pushes.write_bytes(b"".join(x + b"\n" for x in kept))  # the runner died before the last anchor's lines
    done = cli("checkpoint", cut, "--anchor", last)
    assert done.returncode == 1 and f"anchor {last} has no checkpoint line" in done.stderr
    done = cli("checkpoint", cut, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["anchor"] == last - 1
    assert f"the last anchor ({last}) has no checkpoint line; showing anchor {last - 1}'s" in done.stderr
