"""``confirmatory key new`` and records.keyfile: mode 0600 from creation, never over a file, never in a run directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from confirmatory.cli.main import main
from confirmatory.core.cosignature import CosignatureVerifier
from confirmatory.core.note import NoteVerifier, open_note, sign_note
from confirmatory.records.keyfile import KeyFileRefused, make_key_file, read_cosigner, read_note_signer


def test_key_new_writes_a_0600_key_file_and_prints_its_verifier_key(tmp_path):
    out = tmp_path / "keys" / "study.key"
    old = os.umask(0)  # even with no umask at all, the file is never wider than 0600
    try:
        r = subprocess.run(
            [sys.executable, "-m", "confirmatory", "key", "new", "example.org/study-1", "--out", str(out)],
            capture_output=True,
            text=True,
        )
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    vkey = NoteVerifier.parse(r.stdout.strip())
    assert vkey.name == "example.org/study-1"
    signer = read_note_signer(out)
    assert str(signer.verifier) == r.stdout.strip()
    assert open_note(sign_note("hello\n", signer), [vkey]).text == "hello\n"
    assert out.read_text().startswith("PRIVATE+KEY+example.org/study-1+") and out.read_text() not in r.stdout + r.stderr


def test_key_new_refuses_an_existing_file_and_leaves_it_alone(tmp_path):
    out = tmp_path / "study.key"
    out.write_text("precious\n")
    r = CliRunner().invoke(main, ["key", "new", "example.org/s", "--out", str(out)])
    assert r.exit_code == 3 and "the file exists" in r.output
    assert out.read_text() == "precious\n"
    link = tmp_path / "dangling.key"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(KeyFileRefused, match="exists"):
        make_key_file(link, "example.org/s")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("marker", ["run.jsonl", "anchors.jsonl", "manifest.json"])
def test_key_new_refuses_a_path_inside_a_run_directory(tmp_path, marker):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    if marker == "manifest.json":
        (run / marker).write_text(json.dumps({"format": "x", "run_id": "r1"}))
    else:
        (run / marker).write_text("")
    for out in (run / "study.key", run / "models" / "m" / "deep" / "study.key"):
        r = CliRunner().invoke(main, ["key", "new", "example.org/s", "--out", str(out)])
        assert r.exit_code == 3 and "inside the run directory" in r.output, r.output
        assert not out.exists() and not (run / "models").exists()
    # beside the run directories (the demo's runs/.keys/) is fine
    assert make_key_file(tmp_path / "runs" / ".keys" / "study.key", "example.org/s")


def test_an_unrelated_manifest_json_does_not_make_a_run_directory(tmp_path):
    (tmp_path / "manifest.json").write_text('{"name": "a web app"}')
    assert make_key_file(tmp_path / "study.key", "example.org/s")


def test_key_new_refuses_a_name_the_note_format_forbids(tmp_path):
    r = CliRunner().invoke(main, ["key", "new", "a+b", "--out", str(tmp_path / "k")])
    assert r.exit_code == 3 and "'+'" in r.output and not (tmp_path / "k").exists()


def test_a_cosigner_key_is_made_with_type_0x04_and_read_only_as_one(tmp_path):
    out = tmp_path / "w.key"
    vkey = CosignatureVerifier.parse(make_key_file(out, "witness.example.org/w1", cosigner=True))
    assert read_cosigner(out).verifier == vkey
    with pytest.raises(KeyFileRefused, match="not a note signer key"):
        read_note_signer(out)
    study = tmp_path / "s.key"
    make_key_file(study, "example.org/s")
    with pytest.raises(KeyFileRefused, match="not a witness"):
        read_cosigner(study)
