"""Proofs bound to a signed checkpoint (records.binding): ``prove --json`` carries the anchor line that
fixes the proof's (size, root), its inclusion in anchors.jsonl and the study's signed, cosigned checkpoint;
``check-proof`` checks that chain and says whose word it rests on. The issue's finding: a proof whose
``tree_size`` is raised by one may verify against its own root; with its checkpoint every one is refused."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from confirmatory.core.note import NoteSigner
from confirmatory.records.proofs import ProofError, check_proof, make_consistency, make_inclusion
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.testing.synthetic_evidence import generate_evidence_run

ROOT = Path(__file__).resolve().parents[2]
LOGS = ("models/alpha/run.jsonl", "models/beta/run.jsonl", "host.jsonl", "models/gamma/admission.jsonl")


def cli(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "confirmatory", *map(str, args)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("binding") / "run"
    keys = generate_evidence_run(root, households=12)
    return root, keys


def anchor_seqs(run_dir: Path) -> list[int]:
    return [json.loads(x)["seq"] for x in (run_dir / "anchors.jsonl").read_bytes().split(b"\n")[1:-1]]


def checked(proof: dict, tmp_path: Path, **kw) -> str:
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(proof))
    return check_proof(path, None, **kw)


def refused(proof: dict, tmp_path: Path, **kw) -> str:
    with pytest.raises(ProofError) as info:
        checked(proof, tmp_path, **kw)
    return str(info.value)


def forty_proofs(run_dir: Path) -> list[dict]:
    proofs = []
    seqs = anchor_seqs(run_dir)
    for log in LOGS:
        for seq in (seqs[1], seqs[-1]):
            n = make_inclusion(run_dir, log, 0, seq)["tree_size"]
            for index in sorted({0, 1, n // 2, n - 2, n - 1}):
                proofs.append(make_inclusion(run_dir, log, index, seq))
    return proofs[:40]


def test_every_proof_with_its_tree_size_raised_by_one_is_refused_with_its_checkpoint(run, tmp_path):
    run_dir, _ = run
    proofs = forty_proofs(run_dir)
    assert len(proofs) == 40 and all("checkpoint" in p and len(p["anchor_lines"]) == 1 for p in proofs)
    alone = 0
    for proof in proofs:
        assert checked(proof, tmp_path, run_dir=run_dir).startswith(f"OK: line {proof['leaf_index']} of ")
        raised = {**proof, "tree_size": proof["tree_size"] + 1}
        # refused with its checkpoint, whether the path fails against the root or not
        with_run, with_own_key = refused(raised, tmp_path, run_dir=run_dir), refused(raised, tmp_path)
        bare = {k: v for k, v in raised.items() if k not in ("checkpoint", "anchor_lines")}
        try:
            said = checked(bare, tmp_path)
        except ProofError:
            continue
        alone += 1  # the path verifies against the root with the wrong size: only the signed anchor line tells
        assert "the proof's own word" in said and "first" not in said
        assert "the proof's size or root is not the run's" in with_run and "not the run's" in with_own_key
    assert alone > 0  # the finding itself: without a checkpoint some such proofs verify on their own


def test_check_proof_says_whose_word_the_checkpoint_rests_on(run, tmp_path):
    run_dir, keys = run
    proof = make_inclusion(run_dir, LOGS[0], 2, None)
    vkey = str(keys.signer.verifier)
    by_run = checked(proof, tmp_path, run_dir=run_dir)
    assert f"rests on the study's key {vkey} (pinned by the manifest of {run_dir})" in by_run
    assert "cosignatures of witness-0.example.org, witness-1.example.org (keys from the run's manifest)" in by_run
    assert "(given with --key)" in checked(proof, tmp_path, key=vkey)
    assert "named by the proof itself, its own word" in checked(proof, tmp_path)
    (tmp_path / "p.json").write_text(json.dumps(proof))
    done = cli("check-proof", tmp_path / "p.json", "--key", vkey, "--anchors", run_dir / "anchors.jsonl")
    assert done.returncode == 0 and "(given with --key)" in done.stdout, done.stderr
    assert f"anchor {proof['anchor']} of {run_dir / 'anchors.jsonl'} fixes" in done.stdout
    done = cli("check-proof", tmp_path / "p.json", "--key", str(NoteSigner.generate("example.org/study").verifier))
    assert done.returncode == 1 and "checkpoint is not signed by the study's key" in done.stderr, done.stderr


def test_each_link_of_the_chain_altered_is_refused(run, tmp_path):
    run_dir, keys = run
    seqs = anchor_seqs(run_dir)
    proof = make_inclusion(run_dir, LOGS[0], 3, seqs[1])
    line = proof["anchor_lines"][0]
    note = proof["checkpoint"]["note"]
    first_sig = note.split("\n\n")[1].split("\n")[0]
    raw = bytearray(base64.b64decode(first_sig.split(" ")[2]))
    raw[-1] ^= 1
    bad_sig = note.replace(first_sig, f"{first_sig.rsplit(' ', 1)[0]} {base64.b64encode(bytes(raw)).decode()}")
    other_anchor = make_inclusion(run_dir, LOGS[0], 3, seqs[2])["anchor_lines"][0]
    other_run = tmp_path / "other"
    generate_evidence_run(other_run, households=12, seed=7)
    foreign = make_inclusion(other_run, LOGS[0], 3, None)["checkpoint"]
    flipped = [format(int(line["path"][0], 16) ^ 1, "064x"), *line["path"][1:]]
    for bad, says in (
        ({"checkpoint": {**proof["checkpoint"], "note": bad_sig}}, "does not verify with the study's key"),
        ({"anchor_lines": [{**line, "path": flipped}]}, "is not line"),
        ({"anchor_lines": [{**line, "line": line["line"].replace('"final":false', '"final":true')}]}, "is not line"),
        ({"anchor_lines": [other_anchor]}, "the proof's size or root is not the run's"),  # another anchor's line
        ({"checkpoint": foreign}, "is not line"),  # another run's checkpoint, signed by its own key
        ({"anchor_lines": []}, "not a binding"),
    ):
        assert says in refused({**proof, **bad}, tmp_path), says
    assert "does not verify with the study's key" in refused(
        {**proof, "checkpoint": foreign}, tmp_path, run_dir=run_dir
    )
    cosigned_only = note.replace(first_sig + "\n", "")  # the witnesses' lines, without the study's
    unsigned = {**proof, "checkpoint": {**proof["checkpoint"], "note": cosigned_only}}
    assert "not signed by the study's key" in refused(unsigned, tmp_path, run_dir=run_dir)


def test_a_consistency_proof_is_bound_by_both_its_anchor_lines(run, tmp_path):
    run_dir, _ = run
    seqs = anchor_seqs(run_dir)
    proof = make_consistency(run_dir, "host.jsonl", seqs[0], seqs[-2])
    assert [x["seq"] for x in proof["anchor_lines"]] == [seqs[0], seqs[-2]]
    assert proof["checkpoint"]["anchor"] == seqs[-1]  # the last checkpoint, at or after both
    assert "holds the anchor lines that fix those sizes and roots" in checked(proof, tmp_path, run_dir=run_dir)
    for key in ("first_size", "second_size"):
        assert refused({**proof, key: proof[key] + 1}, tmp_path, run_dir=run_dir)


def test_without_checkpoints_the_size_and_root_are_the_proofs_own_word(tmp_path):
    plain = generate_run(tmp_path / "plain", Plan(households=4, anchor_every_s=120, cap_usd=0.3))
    proof = make_inclusion(plain, LOGS[0], 1, None)
    assert "checkpoint" not in proof and "anchor_lines" not in proof
    said = checked(proof, tmp_path)
    assert "the size and the root are the proof's own word" in said and "first" not in said
    assert "--key or --run" in refused(proof, tmp_path, key="k")
    done = cli("prove", plain, LOGS[0], 1)
    assert done.returncode == 0 and "no signed checkpoint at or after it" in done.stdout


def test_prove_refuses_an_anchors_file_changed_after_it_was_signed(run, tmp_path):
    run_dir, _ = run
    changed = tmp_path / "changed"
    shutil.copytree(run_dir, changed)
    lines = (changed / "anchors.jsonl").read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"final":false', b'"final":false ')
    (changed / "anchors.jsonl").write_bytes(b"\n".join(lines))
    done = cli("prove", changed, LOGS[0], 0, "--anchor", anchor_seqs(run_dir)[-1])
    assert done.returncode == 1 and "the file changed after it was signed" in done.stderr, done.stderr
