"""`confirmatory prove` and `confirmatory check-proof` as a reviewer runs them: real
processes on a generated run, a real git witness, and docs/ANCHORS.md's own
few lines of Python checking the proofs without this project."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from confirmatory.testing.rungen import Plan, generate_run

ROOT = Path(__file__).resolve().parents[2]
LOG = "models/alpha/run.jsonl"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "confirmatory", *map(str, args)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("prove") / "run"
    generate_run(root, Plan(households=16, anchor_every_s=120, cap_usd=0.3))
    return root


def anchors(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "anchors.jsonl").read_bytes().split(b"\n")[1:-1]]


def reviewer_check():
    """The verifier docs/ANCHORS.md gives a reviewer, run as written (its
    last two lines read proof.json; here the functions alone are taken)."""
    text = (ROOT / "docs" / "ANCHORS.md").read_text()
    block = re.search(r"\*\*Checking a proof without this project\.\*\*.*?```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(block.split("\np = json.load")[0], namespace)  # noqa: S102 - the documented code itself
    return lambda p: namespace["verify_inclusion"](p) if "leaf" in p else namespace["verify_consistency"](p)


@pytest.mark.slow
def test_an_inclusion_proof_of_every_line_checks_by_check_proof_and_by_the_documented_python(run, tmp_path):
    check = reviewer_check()
    last = anchors(run)[-1]
    n = last["logs"][LOG]["lines"]
    lines = (run / LOG).read_text().split("\n")[:n]
    for index in sorted({0, 1, n // 3, n - 2, n - 1}):
        done = cli("prove", run, LOG, index, "--json")
        assert done.returncode == 0, done.stderr
        proof = json.loads(done.stdout)
        assert proof["log"] == LOG and proof["leaf_index"] == index and proof["tree_size"] == n
        assert proof["root"] == last["logs"][LOG]["root"] and proof["leaf"] == lines[index]
        assert proof["anchor"] == last["seq"]
        assert check(proof)
        (tmp_path / "p.json").write_text(done.stdout)
        ok = cli("check-proof", tmp_path / "p.json", "--anchors", run / "anchors.jsonl")
        assert ok.returncode == 0 and ok.stdout.startswith(f"OK: line {index} of {LOG}"), ok.stderr
        # a changed line, a flipped bit of the path, a wrong index: each fails both verifiers
        for bad in (
            {**proof, "leaf": proof["leaf"].replace('"seq":', '"seq": ')},
            {**proof, "path": [format(int(proof["path"][0], 16) ^ 1, "064x"), *proof["path"][1:]]},
            {**proof, "leaf_index": (index + 1) % n},
        ):
            assert not check(bad)
            (tmp_path / "bad.json").write_text(json.dumps(bad))
            refused = cli("check-proof", tmp_path / "bad.json")
            assert refused.returncode == 1 and "the proof does not verify" in refused.stderr


def test_a_consistency_proof_between_two_anchors_checks_and_fails_once_altered(run, tmp_path):
    check = reviewer_check()
    seqs = [a["seq"] for a in anchors(run)]
    first, second = seqs[1], seqs[-1]
    done = cli("prove", run, "host.jsonl", "--consistency", first, second, "--json")
    assert done.returncode == 0, done.stderr
    proof = json.loads(done.stdout)
    by_seq = {a["seq"]: a for a in anchors(run)}
    assert (proof["first_size"], proof["first_root"]) == (
        by_seq[first]["logs"]["host.jsonl"]["lines"],
        by_seq[first]["logs"]["host.jsonl"]["root"],
    )
    assert (proof["second_size"], proof["second_root"]) == (
        by_seq[second]["logs"]["host.jsonl"]["lines"],
        by_seq[second]["logs"]["host.jsonl"]["root"],
    )
    assert check(proof)
    (tmp_path / "c.json").write_text(done.stdout)
    ok = cli("check-proof", tmp_path / "c.json", "--anchors", run / "anchors.jsonl")
    assert ok.returncode == 0 and f"anchors {first} and {second}" in ok.stdout, ok.stderr
    for wrong in (
        {**proof, "first_root": proof["second_root"], "second_root": proof["first_root"]},
        {**proof, "path": [*proof["path"][:-1], format(int(proof["path"][-1], 16) ^ 1 << 200, "064x")]},
    ):
        assert not check(wrong)
        (tmp_path / "w.json").write_text(json.dumps(wrong))
        assert cli("check-proof", tmp_path / "w.json").returncode == 1
    text = cli("prove", run, "host.jsonl", "--consistency", first, second)
    assert text.returncode == 0 and f"extends anchor {first}'s" in text.stdout


def test_a_proof_is_checked_against_the_witness_clones_copy_of_the_anchors(run, tmp_path):
    from confirmatory.anchors.witness import publish

    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id="r1")
    (tmp_path / "p.json").write_text(cli("prove", run, LOG, 3, "--json").stdout)
    ok = cli("check-proof", tmp_path / "p.json", "--anchors", clone / "anchors" / "r1.jsonl")
    assert ok.returncode == 0, ok.stderr
    # a proof that verifies on its own, but against a root no anchor of the witness fixes
    other = tmp_path / "other"
    generate_run(other, Plan(households=8, anchor_every_s=120, cap_usd=0.3, seed=99))
    (tmp_path / "o.json").write_text(cli("prove", other, LOG, 3, "--json").stdout)
    assert cli("check-proof", tmp_path / "o.json").returncode == 0
    refused = cli("check-proof", tmp_path / "o.json", "--anchors", clone / "anchors" / "r1.jsonl")
    assert refused.returncode == 1 and "no anchor fixes" in refused.stderr


def test_prove_refuses_a_log_changed_since_its_anchor_a_run_without_roots_and_bad_input(run, tmp_path):
    changed = tmp_path / "changed"
    shutil.copytree(run, changed)
    lines = (changed / LOG).read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":2 ')
    (changed / LOG).write_bytes(b"\n".join(lines))
    done = cli("prove", changed, LOG, 1)
    assert done.returncode == 1 and "the log changed after it was anchored" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

    old = tmp_path / "old"
    generate_run(old, Plan(households=8, anchor_every_s=120, cap_usd=0.3, roots=False))
    done = cli("prove", old, LOG, 1)
    assert done.returncode == 1 and "no Merkle root" in done.stderr

    for args, says in (
        ((run, LOG, 10**6), "INDEX 1000000"),
        ((run, "nope.jsonl", 0), "does not anchor nope.jsonl"),
        ((run, LOG, 0, "--anchor", 999), "no anchor line with seq 999"),
        ((run, LOG), "give INDEX"),
    ):
        done = cli("prove", *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1
    (tmp_path / "junk.json").write_text("{not json")
    done = cli("check-proof", tmp_path / "junk.json")
    assert done.returncode == 2 and "not JSON" in done.stderr


def test_the_help_of_each_command_ends_with_examples():
    for command in ("prove", "check-proof"):
        done = cli(command, "--help")
        assert done.returncode == 0
        assert f"Examples:\n    confirmatory {command} " in done.stdout


def test_a_proof_whose_leaf_is_a_lone_surrogate_is_refused_in_one_line_not_a_traceback(tmp_path):
    # "\ud800" is valid JSON, yet no UTF-8 line holds it: once a UnicodeEncodeError traceback
    proof = {"log": LOG, "leaf_index": 0, "tree_size": 1, "root": "0" * 64, "path": [], "leaf": "ok \ud800"}
    (tmp_path / "s.json").write_text(json.dumps(proof))
    assert '"ok \\ud800"' in (tmp_path / "s.json").read_text()
    done = cli("check-proof", tmp_path / "s.json")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("check-proof: ") and "leaf is no line a log can hold: character 3 is '\\ud800'" in (
        done.stderr
    ), done.stderr
