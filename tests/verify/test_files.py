"""Every file of a run directory is fixed (docs/RECORDS.md "What fixes each
file"): a run made by `confirmatory run` (its command, in this process), with its
config.json, its local git witness and its records; one byte of every file
under it flipped in turn fails verify. config.json rewritten (its
not_pinned_down erased, garbage after its JSON) is a violation naming it; a
run manifest made before the manifest fixed config.json says it was not
checked."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from confirmatory.cli.run import run_command
from confirmatory.testing.designs import write_design
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import Status, verify_run

FAST = "confirmatory.testing.fakes:null_engine"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A small complete run, made once: one model, three households."""
    tmp = tmp_path_factory.mktemp("files")
    design = write_design(tmp / "design", households=3, models=1, engine_factory=FAST)
    run_dir = tmp / "run"
    assert run_command(design, run_dir, quiet=True) == 0  # `confirmatory run`, in this process
    report = verify_run(run_dir, workers=1)
    assert report.ok, report.to_table()
    return run_dir


@pytest.fixture
def run(made, tmp_path) -> Path:
    """A copy of the module's run, to damage."""
    return Path(shutil.copytree(made, tmp_path / "run"))


def violations(report, invariant=None):
    return [v for r in report.results for v in r.first if invariant is None or v.invariant == invariant]


def flip_each(run: Path, model_dirs: tuple[str, ...]) -> list[str]:
    """Flip one bit (XOR 1) of the middle byte of every file found under
    ``run``, recursively, in turn (a file a later change adds is flipped
    too; an empty one, a lock file, gets a byte), verify, put the file back;
    the files found. The flip keeps ASCII
    ASCII, so most flips leave the JSON valid. Each flip must fail verify,
    and its report must name the file (a record: relative to its model's
    folder, in its attempt line's violation)."""
    # An atomic write a kill cut short leaves `.<name>.<pid>.<thread>.tmp`:
    # never acknowledged and never read (RECORDS.md), so not flipped.
    cut_short = re.compile(r"\..+\.\d+\.\d+\.tmp")
    files = sorted(
        p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file() and not cut_short.fullmatch(p.name)
    )
    undetected, unnamed = [], []
    for rel in files:
        path = run / rel
        data = path.read_bytes()
        flipped = bytearray(data or b"\x00")  # an empty file (a lock file): a byte put into it
        flipped[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        try:
            report = verify_run(run, workers=1)
        finally:
            path.write_bytes(data)
        said = " | ".join(f"{v.file}: {v.message}" for v in (*report.start_here, *violations(report)))
        if report.ok:
            undetected.append(rel)
        elif not any(rel.removeprefix(d) in said for d in ("", *model_dirs)):
            unnamed.append((rel, said[:300]))
    assert not undetected, f"a flipped byte verify did not see, in: {undetected}"
    assert not unnamed, unnamed
    assert verify_run(run, workers=1).ok  # every file put back: the run verifies again
    return files


def test_one_byte_flipped_in_any_file_of_the_run_directory_fails_verify(run):
    files = flip_each(run, ("models/m0/",))
    assert {"config.json", "manifest.json", "design.toml", "anchors.jsonl", "anchor-pushes.jsonl"} <= set(files)
    assert any("/records/" in rel for rel in files) and "models/m0/manifest.json" in files


@pytest.mark.slow
def test_one_byte_flipped_in_any_file_of_a_continued_run_with_a_kept_torn_tail_fails_verify(tmp_path):
    """A runner process killed with SIGKILL, a torn tail planted on a model's
    log, `confirmatory continue` as a process: the continued run's files (its
    kept torn tail among them) are each fixed as a first run's are."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_states as states

    run_dir, ended = states.kill_at(tmp_path, "first household ended")
    assert not ended
    log = run_dir / "models" / "m0" / "run.jsonl"
    last = log.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    with open(log, "ab") as fh:
        fh.write(last[: len(last) // 2])  # an append the kill cut short
    done = subprocess.run(
        [sys.executable, str(states.SCRIPT), "continue", str(run_dir), "--reason", "test", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = verify_run(run_dir, workers=1)
    assert report.ok and report.state == "complete", report.to_table()
    files = flip_each(run_dir, ("models/m0/", "models/m1/"))
    assert {"models/m0/run.jsonl.torn-1", "config.json", "resume.jsonl.lock"} <= set(files)


def test_config_json_with_not_pinned_down_erased_is_a_named_violation(run):
    path = run / "config.json"
    config = json.loads(path.read_bytes())
    assert config["not_pinned_down"], "the fake models' run has something it could not pin down"
    config["not_pinned_down"], config["known_confounds"] = [], []
    # written as the runner writes it (canonical JSON and a newline): only the hash can tell
    path.write_text(json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    report = verify_run(run, workers=1)
    assert not report.ok
    assert report.result(11).status is Status.FAIL
    (v,) = violations(report)
    assert (v.invariant, v.file, v.line) == (11, "config.json", None)
    assert v.message.startswith("does not hash as the run manifest fixes it: its sha256 is "), v.message
    assert "ALL INVARIANTS HOLD" not in report.to_table()
    said = json.loads(report.to_json())
    assert said["ok"] is False
    assert said["invariants"][10]["first"] == [
        {"invariant": 11, "file": "config.json", "line": None, "message": v.message}
    ]


def test_garbage_appended_after_config_json_is_a_named_violation(run):
    with open(run / "config.json", "ab") as fh:
        fh.write(b'{"not_pinned_down": []}\n')
    (v,) = violations(verify_run(run, workers=1))
    assert (v.invariant, v.file) == (11, "config.json") and "does not hash as the run manifest fixes it" in v.message


def test_a_missing_config_json_that_the_manifest_fixes_is_a_violation(run):
    (run / "config.json").unlink()
    (v,) = violations(verify_run(run, workers=1))
    assert (v.invariant, v.file) == (11, "config.json") and v.message.startswith("missing: the run manifest fixes")


def test_a_config_json_put_into_a_run_whose_runner_wrote_none_is_a_violation(tmp_path):
    # A run made by the library without a config (Run(config=None)): its
    # manifest fixes no config.json, so one found there was put there since.
    from tests.runhelpers import execute

    result, run_dir = execute(tmp_path, households=2, models=1, engine_factory=FAST)
    assert result.status == "completed"
    assert json.loads((run_dir / "manifest.json").read_bytes())["files"] == {}
    assert verify_run(run_dir, workers=1).ok
    (run_dir / "config.json").write_text('{"not_pinned_down":[]}\n')
    (v,) = violations(verify_run(run_dir, workers=1))
    assert (v.invariant, v.file) == (11, "config.json") and "fixes no sha256 of it" in v.message


def test_a_manifest_naming_another_file_fails_and_that_file_is_never_read(run):
    # (the manifest edited: its hash no longer seeds the logs either; what
    # matters here is that /dev/zero is refused by name, never read)
    man = json.loads((run / "manifest.json").read_bytes())
    man["files"] = {**man["files"], "/dev/zero": "0" * 64}
    (run / "manifest.json").write_text(json.dumps(man, sort_keys=True))
    found = [v for v in violations(verify_run(run, workers=1), 11) if "/dev/zero" in v.message]
    assert [v.file for v in found] == ["manifest.json"] and "not a file the run manifest fixes" in found[0].message


def test_a_run_manifest_made_before_files_says_config_json_was_not_checked(tmp_path):
    # The generator writes manifests as a runner before the files map did
    # (no files); such a runner wrote config.json beside them, fixed by nothing.
    root = generate_run(tmp_path / "run", Plan(households=4, harness=None))
    assert "files" not in json.loads((root / "manifest.json").read_bytes())
    assert verify_run(root, workers=1).result(11).note is None  # no config.json: nothing to say
    (root / "config.json").write_text('{"not_pinned_down":[]}\n')
    report = verify_run(root, workers=1)
    assert report.ok  # not a violation: its runner fixed nothing, and verify does not claim it checked
    note = report.result(11).note
    assert note is not None and note.startswith("config.json not checked: the run manifest fixes no sha256 of it")
    assert "config.json not checked" in report.to_table()
    assert json.loads(report.to_json())["invariants"][10]["note"] == note


def test_the_resume_lock_file_is_fixed_as_empty(run):
    lock = run / "resume.jsonl.lock"
    lock.write_bytes(b"")  # as `confirmatory resume` leaves it
    assert verify_run(run, workers=1).ok
    lock.write_bytes(b"x")
    (v,) = violations(verify_run(run, workers=1))
    assert (v.invariant, v.file) == (11, "resume.jsonl.lock") and "holds no byte" in v.message
