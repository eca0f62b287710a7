"""Tampering with a valid run: every edit fails verify, except a chain-valid
rewrite or truncation after the final anchor, which is an unanchored tail.

One generated run (3 models, hundreds of lines, several anchors) is edited in
place and restored after each case. Every log gets every operation; lines are
sampled (both ends, the anchored boundaries, and evenly between) to keep the
suite fast.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from confirmatory.records.chain import dumps, log_seed
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import Status, verify_run

PLAN = Plan(households=16, anchor_every_s=120, cap_usd=0.3)
LOGS = ["run.jsonl", "host.jsonl", "resume.jsonl", "anchors.jsonl", "anchor-pushes.jsonl"] + [
    f"models/{m}/{n}" for m in PLAN.models for n in ("run.jsonl", "admission.jsonl")
]
OPS = ["flip", "delete", "duplicate", "swap", "truncate", "rewrite"]
SAMPLE = 10
# anchor-pushes.jsonl reports what the anchor command said; nothing in the run
# (nor the witness, which holds anchors.jsonl) fixes its lines, so a re-chained
# rewrite that keeps every push's anchor_seq and rc cannot be told apart. What
# verify relies on - the final push returned 0 - is tested on its own below.
UNVERIFIABLE = {("anchor-pushes.jsonl", "rewrite")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tamper") / "run"
    generate_run(root, PLAN)
    assert verify_run(root).ok
    return root


@contextmanager
def edited(path: Path, data: bytes):
    original = path.read_bytes()
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(original)


def split(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


def join(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def relink(lines: list[bytes], seed: str, start: int) -> list[bytes]:
    """Recompute seq and prev from ``start`` on, so the chain links again."""
    out = lines[:start]
    head = hashlib.sha256(out[-1]).hexdigest() if out else seed
    for i, raw in enumerate(lines[start:], start):
        obj = json.loads(raw)
        obj["seq"], obj["prev"] = i, head
        line = dumps(obj)
        out.append(line)
        head = hashlib.sha256(line).hexdigest()
    return out


def seed_of(root: Path, rel: str) -> str:
    manifest = "manifest.json" if not rel.startswith("models/") else "/".join(rel.split("/")[:2]) + "/manifest.json"
    return log_seed(hashlib.sha256((root / manifest).read_bytes()).hexdigest(), rel)


def mutate(op: str, lines: list[bytes], i: int, seed: str) -> list[bytes] | None:
    lines = list(lines)
    if op == "flip":
        b = bytearray(lines[i])
        b[len(b) // 2] ^= 0x01
        lines[i] = bytes(b)
    elif op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap":
        if i + 1 >= len(lines):
            return None
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif op == "truncate":
        lines = lines[:i]
    elif op == "rewrite":
        obj = json.loads(lines[i])
        obj["t"] = obj.get("t", 0) + 0.25
        obj["tampered"] = True
        lines[i] = dumps(obj)
        lines = relink(lines, seed, i)
    return lines


def positions(n: int) -> list[int]:
    if n <= SAMPLE:
        return list(range(n))
    step = (n - 1) / (SAMPLE - 1)
    return sorted({round(k * step) for k in range(SAMPLE)} | {1, n - 2})


@pytest.mark.slow
@pytest.mark.parametrize("log", LOGS)
def test_every_operation_on_every_sampled_line_of_a_log_fails_verify(run, log, witness):
    path = run / log
    lines = split(path.read_bytes())
    seed = seed_of(run, log)
    passed = []
    for op in OPS:
        for i in positions(len(lines)):
            changed = mutate(op, lines, i, seed)
            if changed is None:
                continue
            with edited(path, join(changed)):
                # anchors.jsonl and anchor-pushes.jsonl are anchored by nothing in
                # the run: their last line and chain-valid rewrites need the witness.
                use_witness = log in ("anchors.jsonl", "anchor-pushes.jsonl")
                report = verify_run(run, witness=witness if use_witness else None)
            # A log cut short (its last lines gone) looks like a run cut short
            # by a crash: it may then verify with no violation, but never as
            # complete (exit 3, "crashed"): no such edit is accepted.
            looks_cut_short = op == "truncate" or op == "delete" and i == len(lines) - 1
            accepted = report.exit_status() == 0 if looks_cut_short else report.ok
            if accepted and (log, op) not in UNVERIFIABLE:
                passed.append(f"{op}@{i}")
    assert passed == [], f"{log}: undetected edits {passed}"


@pytest.fixture(scope="module")
def witness(run, tmp_path_factory):
    """A bare remote holding the run's anchors, and a clone of it."""
    from confirmatory.anchors.witness import publish

    base = tmp_path_factory.mktemp("witness")
    remote, clone = base / "remote.git", base / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id=run.name)
    return clone


def test_a_chain_valid_line_appended_after_the_final_anchor_is_an_unanchored_tail(run):
    for log in ("run.jsonl", "models/alpha/run.jsonl", "host.jsonl"):
        path = run / log
        lines = split(path.read_bytes())
        extra = json.loads(lines[-1])
        extra["t"] = extra.get("t", 0) + 1
        with edited(path, join(relink(lines + [dumps(extra)], seed_of(run, log), len(lines)))):
            report = verify_run(run)
        assert not report.ok
        assert report.unanchored_tail == 1
        assert report.result(8).status is Status.UNANCHORED
        assert "unanchored tail: 1 lines" in report.to_table()


def test_a_rewrite_of_the_unanchored_tail_is_still_only_an_unanchored_tail(run):
    path = run / "host.jsonl"
    lines = split(path.read_bytes())
    tail = [json.loads(lines[-1]) for _ in range(3)]
    for k, obj in enumerate(tail):
        obj["t"] = obj["t"] + 30 * (k + 1)
    grown = relink(lines + [dumps(o) for o in tail], seed_of(run, "host.jsonl"), len(lines))
    rewritten = mutate("rewrite", grown, len(lines) + 1, seed_of(run, "host.jsonl"))
    for variant in (grown, rewritten, grown[:-1]):
        with edited(path, join(variant)):
            report = verify_run(run)
        assert report.result(8).status is Status.UNANCHORED and report.failed() == {8}


def manifest_edits():
    yield "manifest.json", lambda o: o.update(run_id="other")
    yield "manifest.json", lambda o: o["rules"].update(max_reruns_per_arm=3)
    yield "models/alpha/manifest.json", lambda o: o.update(cap_nusd=o["cap_nusd"] + 1)
    yield "models/beta/manifest.json", lambda o: o["draw"].reverse()


@pytest.mark.parametrize("rel,edit", list(manifest_edits()))
def test_an_edited_manifest_fails_verify(run, rel, edit):
    path = run / rel
    obj = json.loads(path.read_bytes())
    edit(obj)
    with edited(path, dumps(obj) + b"\n"):
        assert not verify_run(run).ok


def test_edited_deleted_or_extra_record_files_fail_invariant_1(run):
    records = sorted((run / "models/alpha/records").rglob("*.json"))
    target = records[len(records) // 2]
    obj = json.loads(target.read_bytes())
    obj["answer"] = {"net_income": -1}
    with edited(target, dumps(obj) + b"\n"):
        assert 1 in verify_run(run).failed()
    data = target.read_bytes()
    target.unlink()
    try:
        assert 1 in verify_run(run).failed()
    finally:
        target.write_bytes(data)
    extra = target.with_name("9.json")
    shutil.copy(target, extra)
    try:
        assert 1 in verify_run(run).failed()
    finally:
        extra.unlink()


def test_edited_design_copy_fails_invariant_11(run):
    path = run / "design.toml"
    with edited(path, path.read_bytes().replace(b"workers_per_model = 2", b"workers_per_model = 3")):
        assert 11 in verify_run(run).failed()


def anchor_edits():
    def count(o, root):
        o["logs"]["host.jsonl"]["lines"] -= 1

    def head(o, root):
        o["logs"]["models/gamma/admission.jsonl"]["head"] = "0" * 64

    def manifest(o, root):
        o["manifests"]["manifest.json"] = "0" * 64

    def drop_log(o, root):
        del o["logs"]["resume.jsonl"]

    def not_final(o, root):
        o["final"] = False

    # heads and counts verify keeps compactly (logs.Fixed): a head that is
    # the true one in capitals, one that is not a string, a count past 64 bits
    def head_in_capitals(o, root):
        entry = o["logs"]["models/alpha/run.jsonl"]
        entry["head"] = entry["head"].upper()

    def head_not_a_string(o, root):
        o["logs"]["run.jsonl"]["head"] = 7

    def count_past_64_bits(o, root):
        o["logs"]["host.jsonl"]["lines"] = 1 << 70

    # a manifest the run does not have, with its true hash (it used to be
    # read and so passed), and one that cannot be read to its end
    def other_file_as_manifest(o, root):
        o["manifests"]["design.toml"] = hashlib.sha256((root / "design.toml").read_bytes()).hexdigest()

    def endless_file_as_manifest(o, root):
        o["manifests"]["/dev/zero"] = "0" * 64

    return [
        count,
        head,
        manifest,
        drop_log,
        not_final,
        head_in_capitals,
        head_not_a_string,
        count_past_64_bits,
        other_file_as_manifest,
        endless_file_as_manifest,
    ]


@pytest.mark.parametrize("edit", anchor_edits(), ids=lambda e: e.__name__)
@pytest.mark.parametrize("which", ["first", "final"])
def test_an_edited_and_relinked_anchor_fails_invariant_8(run, edit, which):
    path = run / "anchors.jsonl"
    lines = split(path.read_bytes())
    i = 1 if which == "first" else len(lines) - 1
    obj = json.loads(lines[i])
    if edit.__name__ == "not_final" and which == "first":
        obj["final"] = True  # a final anchor before the last
    else:
        edit(obj, run)
    lines[i] = dumps(obj)
    with edited(path, join(relink(lines, seed_of(run, "anchors.jsonl"), i))):
        assert 8 in verify_run(run).failed()


def test_deleted_or_reordered_anchors_fail_invariant_8(run):
    path = run / "anchors.jsonl"
    lines = split(path.read_bytes())
    seed = seed_of(run, "anchors.jsonl")
    for variant in (lines[:-1], lines[:2] + lines[3:], lines[:2] + [lines[3], lines[2]] + lines[4:]):
        with edited(path, join(relink(variant, seed, 1))):
            assert 8 in verify_run(run).failed()


def test_a_failed_final_push_fails_invariant_8(run):
    path = run / "anchor-pushes.jsonl"
    lines = split(path.read_bytes())
    obj = json.loads(lines[-1])
    obj["rc"] = 128
    lines[-1] = dumps(obj)
    with edited(path, join(relink(lines, seed_of(run, "anchor-pushes.jsonl"), len(lines) - 1))):
        assert 8 in verify_run(run).failed()


def test_a_line_nested_too_deep_to_parse_is_a_chain_break_not_an_unchecked_model(run):
    # json.loads raises RecursionError, not ValueError, on it: the model's
    # other lines must still be checked, and the line reported where it is
    path = run / "models/alpha/run.jsonl"
    lines = split(path.read_bytes())
    k = len(lines) - 3
    deep = b'{"event":"stop","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with edited(path, join(lines[:k] + [deep] + lines[k:])):
        report = verify_run(run)
    assert any(v.file == "models/alpha/run.jsonl" and v.line == k for v in report.start_here), report.start_here
    assert not any("cannot be checked" in v.message for r in report.results for v in r.first)
    assert "alpha: 0 of" not in (report.outcome or "")
