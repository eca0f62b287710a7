"""verify and the anchors' RFC 9162 Merkle roots: real generated runs, a real git witness.

A forger who changes a log and rewrites the run's anchors.jsonl to match
(counts, heads and roots recomputed, its chain re-linked) passes every
check of the run directory alone; the witness's anchors, which it cannot
rewrite, then fail verify's root check. Runs written before anchors had
roots still verify, with their roots noted as not checked.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from confirmatory.core import merkle
from confirmatory.records.chain import dumps, log_seed
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

PLAN = Plan(households=16, anchor_every_s=120, cap_usd=0.3)
LOGS = ("models/alpha/run.jsonl", "host.jsonl")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    root = tmp_path_factory.mktemp("roots") / "run"
    generate_run(root, PLAN)
    return root


@pytest.fixture
def run(original, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(original, root)
    return root


def witness_of(run: Path, base: Path) -> Path:
    """A bare remote holding the run's anchors as they are now, and a clone of it."""
    from confirmatory.anchors.witness import publish

    remote, clone = base / "remote.git", base / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id=run.name)
    return clone


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def seed_of(root: Path, rel: str) -> str:
    manifest = "manifest.json" if not rel.startswith("models/") else "/".join(rel.split("/")[:2]) + "/manifest.json"
    return log_seed(hashlib.sha256((root / manifest).read_bytes()).hexdigest(), rel)


def relink(lines: list[bytes], seed: str, start: int) -> list[bytes]:
    out = lines[:start]
    head = hashlib.sha256(out[-1]).hexdigest() if out else seed
    for i, raw in enumerate(lines[start:], start):
        obj = json.loads(raw)
        obj["seq"], obj["prev"] = i, head
        out.append(dumps(obj))
        head = hashlib.sha256(out[-1]).hexdigest()
    return out


def edit(line: bytes) -> bytes:
    obj = json.loads(line)
    obj["forged"] = True
    return dumps(obj)


def anchored_counts(run: Path, rel: str) -> list[int]:
    return [json.loads(a)["logs"][rel]["lines"] for a in lines_of(run / "anchors.jsonl")[1:]]


def forge_anchors(run: Path, rel: str, shift_after: int | None = None, roots: bool = True) -> None:
    """Rewrite the run's anchors.jsonl to match ``rel`` as it is now: each
    entry's head (and root, unless ``roots`` is False) recomputed, counts
    past ``shift_after`` one less (a line removed), the chain re-linked."""
    log = lines_of(run / rel)
    leaves = merkle.leaf_hashes(log)
    anchors = lines_of(run / "anchors.jsonl")
    for k, raw in enumerate(anchors[1:], 1):
        obj = json.loads(raw)
        entry = obj["logs"][rel]
        n = entry["lines"] - (1 if shift_after is not None and entry["lines"] > shift_after else 0)
        entry["lines"] = n
        entry["head"] = hashlib.sha256(log[n - 1]).hexdigest() if n else seed_of(run, rel)
        if roots:
            entry["root"] = merkle.root(leaves[:n]).hex()
        obj.pop("seq"), obj.pop("prev")
        anchors[k] = dumps({**obj, "seq": k, "prev": ""})
    write_lines(run / "anchors.jsonl", relink(anchors, seed_of(run, "anchors.jsonl"), 1))


def messages(report) -> list[str]:
    return [v.message for v in report.result(8).first]


def tamper(run: Path, rel: str, how: str) -> int | None:
    """Change ``rel`` as ``how`` says; the count past which a line went missing."""
    path, log = run / rel, lines_of(run / rel)
    counts = anchored_counts(run, rel)
    if how == "edited line":  # the last line an anchor counts, not re-linked: the chain breaks after it
        i = counts[len(counts) // 2] - 1
        log[i] = edit(log[i])
        write_lines(path, log)
        return None
    i = len(log) // 2
    if how == "removed line":  # every later line's seq and prev recomputed
        write_lines(path, relink(log[:i] + log[i + 1 :], seed_of(run, rel), i))
        return i
    assert how == "re-chained log"  # a line edited, every later prev recomputed
    log[i] = edit(log[i])
    write_lines(path, relink(log, seed_of(run, rel), i))
    return None


def test_every_anchor_of_a_run_carries_the_root_of_each_logs_tree_and_verify_checks_them(run):
    for rel in LOGS:
        log = merkle.leaf_hashes(lines_of(run / rel))
        for raw in lines_of(run / "anchors.jsonl")[1:]:
            entry = json.loads(raw)["logs"][rel]
            assert entry["root"] == merkle.root(log[: entry["lines"]]).hex()
    for workers in (1, 2):  # host.jsonl in one pass, and in spans joined
        report = verify_run(run, workers=workers)
        assert report.ok, messages(report)
        assert "Merkle roots not checked" not in (report.result(8).note or "")


def test_a_run_from_before_roots_verifies_as_before_and_says_its_roots_were_not_checked(tmp_path):
    generate_run(tmp_path / "old", Plan(households=8, anchor_every_s=120, cap_usd=0.3, roots=False))
    assert "root" not in json.loads(lines_of(tmp_path / "old" / "anchors.jsonl")[1])["logs"]["run.jsonl"]
    report = verify_run(tmp_path / "old")
    assert report.ok and report.exit_status() == 0
    assert "Merkle roots not checked" in report.result(8).note


@pytest.mark.parametrize("rel", LOGS)
def test_a_changed_log_whose_heads_were_re_anchored_fails_the_root_check(run, rel):
    """The heads rewritten to the changed log, the roots left: only the roots
    still tell (with the log read in one pass and in spans)."""
    tamper(run, rel, "re-chained log")
    forge_anchors(run, rel, roots=False)
    for workers in (1, 2):
        found = messages(verify_run(run, workers=workers))
        assert any(f"{rel}: root at line count" in m for m in found), found
        assert not any("head at line count" in m for m in found), found


@pytest.mark.parametrize("how", ["edited line", "removed line", "re-chained log"])
@pytest.mark.parametrize("rel", LOGS)
def test_a_changed_log_fails_the_root_check_against_the_witnesss_anchors(run, tmp_path, rel, how):
    clone = witness_of(run, tmp_path)
    removed = tamper(run, rel, how)
    forge_anchors(run, rel, shift_after=removed)  # the run's own anchors now match the changed log
    alone = messages(verify_run(run))
    assert not any("root" in m for m in alone), alone
    report = verify_run(run, witness=clone, workers=2)
    found = messages(report)
    assert any(m.startswith("the witness's anchor line") and f"{rel}: root at line count" in m for m in found), found
    assert report.witness_problems >= 1


def test_an_anchor_whose_root_was_changed_fails_the_root_check_and_both_consistency_proofs(run):
    rel = "models/alpha/run.jsonl"
    counts = [None, *anchored_counts(run, rel)]  # by anchor line
    k = next(k for k in range(2, len(counts) - 1) if counts[k - 1] < counts[k] < counts[k + 1])
    anchors = lines_of(run / "anchors.jsonl")
    obj = json.loads(anchors[k])
    obj["logs"][rel]["root"] = merkle.root([merkle.leaf_hash(b"not this log")]).hex()
    obj.pop("seq"), obj.pop("prev")
    anchors[k] = dumps({**obj, "seq": k, "prev": ""})
    write_lines(run / "anchors.jsonl", relink(anchors, seed_of(run, "anchors.jsonl"), k))
    for workers in (1, 2):
        found = messages(verify_run(run, workers=workers))
        assert [m for m in found if "root at line count" in m] == [
            f"anchor line {k}: {rel}: root at line count {counts[k]} differs from the Merkle tree of the log's "
            "first lines (a line was changed, removed or inserted, or the root)"
        ]
        consistency = [m for m in found if "consistency proof" in m]
        assert consistency == [
            f"anchor line {k}: {rel}: its tree ({counts[k]} lines) does not extend anchor line {k - 1}'s "
            f"({counts[k - 1]} lines): their roots fail the RFC 9162 consistency proof",
            f"anchor line {k + 1}: {rel}: its tree ({counts[k + 1]} lines) does not extend anchor line {k}'s "
            f"({counts[k]} lines): their roots fail the RFC 9162 consistency proof",
        ], found


def test_a_root_that_is_not_a_sha256_in_hex_is_a_violation(run):
    anchors = lines_of(run / "anchors.jsonl")
    obj = json.loads(anchors[1])
    obj["logs"]["run.jsonl"]["root"] = obj["logs"]["run.jsonl"]["root"].upper()
    obj.pop("seq"), obj.pop("prev")
    anchors[1] = dumps({**obj, "seq": 1, "prev": ""})
    write_lines(run / "anchors.jsonl", relink(anchors, seed_of(run, "anchors.jsonl"), 1))
    found = messages(verify_run(run))
    assert any("run.jsonl: root" in m and "is not a sha256 in lower-case hex" in m for m in found), found
