"""A run signed, stamped by a local TSA and cosigned by a local witness (both real processes on
127.0.0.1), verified; then planted faults that verify must name (invariant 12)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import procserver
import pytest

from confirmatory.core.cosignature import Cosigner
from confirmatory.core.note import parse_note
from confirmatory.design.load import load_design
from confirmatory.engine.run import Run
from confirmatory.records.chain import sha256_hex
from confirmatory.records.layout import load_layout
from confirmatory.records.writer import dumps
from confirmatory.runtime.clock import Clock
from confirmatory.testing.designs import write_design
from confirmatory.testing.evidence import local_evidence
from confirmatory.testing.tsa import openssl_missing
from confirmatory.verify import verify_run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing()))]

ORIGIN = "example.org/study/evidence-run"


class AheadClock(Clock):
    """The runner's clock 600 s ahead of the machine's (and so of the TSA's): every anchor is
    dated after the stamp of its own checkpoint."""

    def now(self) -> float:
        return super().now() + 600.0


def _run(tmp: Path, ev, *, clock=None, name="run", **anchors) -> Path:
    design = write_design(tmp / f"design-{name}", households=4, anchors=ev.anchors(**anchors))
    result = Run(load_design(design), tmp / name, clock=clock).execute()
    assert result.status == "completed"
    return tmp / name


@pytest.fixture(scope="module")
def evidenced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evidence")
    with local_evidence(tmp / "ev", origin=ORIGIN) as ev:
        yield tmp, ev, _run(tmp, ev)


def pushes(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "anchor-pushes.jsonl").read_bytes().splitlines()]


def rewrite_pushes(run_dir: Path, objs: list[dict]) -> None:
    """anchor-pushes.jsonl with ``objs``, chained again from its seed (no anchor fixes it)."""
    seed = {s.relpath: s.seed for s in load_layout(run_dir).logs()}["anchor-pushes.jsonl"]
    out, head = [], seed
    for seq, obj in enumerate(objs):
        line = dumps({**{k: v for k, v in obj.items() if k not in ("seq", "prev")}, "seq": seq, "prev": head})
        head = sha256_hex(line)
        out.append(line + b"\n")
    (run_dir / "anchor-pushes.jsonl").write_bytes(b"".join(out))


def failures(report, invariant: int = 12) -> list[str]:
    return [v.message for v in report.result(invariant).first]


def test_a_run_through_a_local_tsa_and_witness_verifies_and_lists_every_stamp_and_cosignature(evidenced):
    _, ev, run_dir = evidenced
    report = verify_run(run_dir)
    assert report.ok and report.complete, report.to_table(shown=10)
    lines = pushes(run_dir)
    stamps = [o for o in lines if o.get("event") == "stamp" and o["ok"]]
    cosigs = [o for o in lines if o.get("event") == "cosignature" and o["ok"]]
    assert stamps and cosigs
    final = report.anchors[-1]
    assert final["final"] and final["evidence"]["git"] and final["evidence"]["signature"]
    assert [c["name"] for c in final["evidence"]["cosignatures"]] == ["witness.example/w0"]
    assert [s["tsa"] for s in final["evidence"]["stamps"]] == [0]
    listed = {(a["seq"], s["file"]) for a in report.anchors for s in a["evidence"]["stamps"]}
    assert listed == {(o["anchor_seq"], o["file"]) for o in stamps}  # every stamp, each checked
    cosigned = {(a["seq"], c["time"]) for a in report.anchors for c in a["evidence"]["cosignatures"]}
    assert cosigned == {(o["anchor_seq"], o["time"]) for o in cosigs}
    every = {o["anchor_seq"] for o in lines if o.get("event") == "checkpoint"}
    assert every == {a["seq"] for a in report.anchors}  # every anchor signed
    as_json = json.loads(report.to_json())
    assert as_json["anchors"][-1]["evidence"] == final["evidence"]
    table = report.to_table()
    assert "stamped by TSA 0 at" in table and "cosigned by witness.example/w0 at" in table
    assert "evidence: git witness, the study's signature, 1 witness cosignature(s), 1 RFC 3161 time stamp(s)" in table
    # the study's private key is nowhere in the run directory
    secret = ev.key_file.read_bytes().strip()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    # and the TSA certificates are copies the manifest fixes
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(manifest["files"]) >= {"evidence/tsa-0.certificate.pem", "evidence/tsa-0.ca.pem"}
    assert manifest["evidence"]["origin"] == ORIGIN


def test_one_byte_flipped_in_any_file_of_an_evidenced_run_fails_verify(evidenced, tmp_path):
    # every stamp reply, TSA certificate copy and checkpoint line among them
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verify"))
    from test_files import flip_each

    _, _, run_dir = evidenced
    files = flip_each(Path(shutil.copytree(run_dir, tmp_path / "run")), ("models/m0/", "models/m1/"))
    assert {"evidence/tsa-0.certificate.pem", "evidence/tsa-0.ca.pem", "anchor-pushes.jsonl"} <= set(files)
    assert any(rel.startswith("evidence/stamps/") and rel.endswith(".tsr") for rel in files)


def test_a_tsa_down_for_the_whole_run_fails_it_unless_the_design_needs_fewer_stamps(tmp_path):
    with local_evidence(tmp_path / "ev", origin=ORIGIN, tsas=2, witnesses=0) as ev:
        ev.tsas[1].stop()  # nothing listens at its URL: every stamp it is asked for fails
        lenient = _run(tmp_path, ev, name="lenient", timestamps_required=1)
        strict = _run(tmp_path, ev, name="strict")
    report = verify_run(lenient)
    assert report.ok and report.complete, report.to_table(shown=10)
    failed = [o for o in pushes(lenient) if o.get("event") == "stamp" and not o["ok"]]
    assert failed and {o["tsa"] for o in failed} == {1}  # logged like a failed push; the run went on
    assert {s["tsa"] for a in report.anchors for s in a["evidence"]["stamps"]} == {0}
    report = verify_run(strict)
    assert not report.ok
    (message,) = failures(report)
    assert "has valid stamps from 1 TSA(s), the manifest asks for 2: none from TSA 1 (http://127.0.0.1:" in message


def test_a_manifest_whose_evidence_is_not_the_designs_fails_invariant_11_naming_the_field(evidenced, tmp_path):
    # A forger who re-signs every checkpoint with a key of their own passes
    # invariant 12 (it checks against the manifest's keys): the design's pins
    # are what the pre-registration fixed.
    _, _, run_dir = evidenced
    forged_key = Cosigner.generate("witness.example/forged").verifier
    cases = {
        "evidence.verifier_key is": lambda m: m["evidence"].update(verifier_key="example.org/forged+00000000+AAAA"),
        "evidence.witnesses[0].verifier_key is": lambda m: m["evidence"]["witnesses"][0].update(
            verifier_key=str(forged_key)
        ),
        "evidence.origin is": lambda m: m["evidence"].update(origin="example.org/another"),
        "evidence.timestamps_required is": lambda m: m["evidence"].update(timestamps_required=0),
        "files['evidence/tsa-0.certificate.pem'] is": lambda m: m["files"].update(
            {"evidence/tsa-0.certificate.pem": "0" * 64}
        ),
    }
    for n, (expected, plant) in enumerate(cases.items()):
        forged = tmp_path / f"forged-{n}"
        shutil.copytree(run_dir, forged)
        manifest = json.loads((forged / "manifest.json").read_bytes())
        plant(manifest)
        (forged / "manifest.json").write_text(json.dumps(manifest))
        named = failures(verify_run(forged), 11)
        assert any(m.startswith(expected) for m in named), (expected, named)


def test_a_stamp_of_another_checkpoint_fails_verify_naming_it(evidenced, tmp_path):
    _, _, original = evidenced
    run_dir = tmp_path / "run"
    shutil.copytree(original, run_dir)
    objs = pushes(run_dir)
    stamps = [o for o in objs if o.get("event") == "stamp" and o["ok"]]
    final, other = stamps[-1], stamps[0]
    assert final["anchor_seq"] != other["anchor_seq"]
    data = (run_dir / other["file"]).read_bytes()
    (run_dir / final["file"]).write_bytes(data)
    final["sha256"] = sha256_hex(data)  # the line fixed up to match: only the TSA's imprint tells
    rewrite_pushes(run_dir, objs)
    report = verify_run(run_dir)
    assert report.failed() == {12}, report.to_table(shown=10)
    assert any("a stamp of another message" in m for m in failures(report)), failures(report)


def test_a_forged_cosignature_fails_verify_naming_it(evidenced, tmp_path):
    _, _, original = evidenced
    run_dir = tmp_path / "run"
    shutil.copytree(original, run_dir)
    objs = pushes(run_dir)
    cos = [o for o in objs if o.get("event") == "cosignature" and o["ok"]][-1]
    note = next(o for o in objs if o.get("event") == "checkpoint" and o["anchor_seq"] == cos["anchor_seq"])["note"]
    forger = Cosigner.generate("witness.example/w0")  # the witness's name, another key
    cos["line"] = forger.cosign(parse_note(note).text, cos["time"]).line().removesuffix("\n")
    rewrite_pushes(run_dir, objs)
    report = verify_run(run_dir)
    assert report.failed() == {12}, report.to_table(shown=10)
    assert any("does not verify with the witness key" in m for m in failures(report)), failures(report)
    assert any("valid cosignature(s) from distinct witnesses" in m for m in failures(report))


def test_an_anchor_dated_after_its_stamp_fails_verify_naming_the_window(tmp_path):
    with local_evidence(tmp_path / "ev", origin=ORIGIN + "/ahead", witnesses=0) as ev:
        run_dir = _run(tmp_path, ev, clock=AheadClock(), name="ahead")
    report = verify_run(run_dir)
    assert 12 in report.failed()
    said = failures(report)
    assert any("outside its anchor's window" in m and "dated after its stamp" in m for m in said), said


def test_a_run_killed_and_continued_verifies_with_all_of_its_evidence(tmp_path):
    with local_evidence(tmp_path / "ev", origin=ORIGIN + "/continued") as ev:
        _killed_and_continued(tmp_path, ev)


def _killed_and_continued(tmp_path: Path, ev) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = Path(__file__).resolve().parents[2] / "scripts" / "confirmatory_run.py"
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.2} for i in range(30)]
    design = write_design(
        tmp_path / "design",
        households=hh,
        engine_factory="confirmatory.testing.fakes:null_engine",
        anchors=ev.anchors(interval_s=0.3),
    )
    run_dir = tmp_path / "run"
    proc = procserver.popen(
        [sys.executable, str(script), "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    try:
        while sum(1 for o in _pushes_or_none(run_dir) if o.get("event") == "cosignature" and o.get("ok")) < 2:
            assert proc.poll() is None, "the run ended before it was killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = procserver.run(
        [sys.executable, str(script), "continue", str(run_dir), "--reason", "killed", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = verify_run(run_dir)
    assert report.ok and report.complete, report.to_table(shown=10)
    anchors = [json.loads(x) for x in (run_dir / "anchors.jsonl").read_bytes().splitlines()]
    cont = next(k for k, o in enumerate(anchors) if o.get("event") == "continuation")
    first = next(k for k, o in enumerate(anchors) if k > cont and o.get("event") == "anchor")
    ev_first = next(a for a in report.anchors if a["seq"] == first)["evidence"]
    assert ev_first["signature"] and ev_first["stamps"] and ev_first["cosignatures"] and ev_first["git"]
    # the continuation's first anchor was cosigned before any of its attempts started
    cosigned_t = next(
        o["t"] for o in pushes(run_dir) if o.get("event") == "cosignature" and o.get("anchor_seq") == first and o["ok"]
    )
    after = [json.loads(x) for p in (run_dir / "models").glob("*/run.jsonl") for x in p.read_bytes().splitlines()]
    cont_t = anchors[cont]["t"]
    started = [o["t"] for o in after if o.get("event") == "attempt" and o.get("t", 0) > cont_t]
    assert all(t > cosigned_t for t in started)
    final = report.anchors[-1]["evidence"]
    assert final["stamps"] and final["cosignatures"]


def _pushes_or_none(run_dir: Path) -> list[dict]:
    try:
        data = (run_dir / "anchor-pushes.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(x) for x in data.split(b"\n")[:-1]]
