"""verify's last lines suggest the command that draws the run's page with the
checks verify was asked to make (``--witness W --households F``), and the
page drawn with that command says what verify checked."""

from __future__ import annotations

import shlex
import subprocess

from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_command


def hint(out: str) -> list[str]:
    (line,) = [x for x in out.splitlines() if x.startswith("a page of this run for its reviewer: ")]
    return shlex.split(line.split(": ", 1)[1])


def test_the_report_command_verify_suggests_repeats_its_witness_and_households(tmp_path, capsys):
    from confirmatory import report_command
    from confirmatory.anchors.witness import publish

    run = generate_run(tmp_path / "runs dir" / "run", Plan(households=4, harness=None))
    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id=run.name)
    households = tmp_path / "households.jsonl"
    households.write_text('{"id": "elsewhere"}\n')

    verify_command(run)
    assert hint(capsys.readouterr().out) == ["confirmatory", "report", str(run)]
    verify_command(run, witness=clone, households=households)
    words = hint(capsys.readouterr().out)
    assert words == ["confirmatory", "report", str(run), "--witness", str(clone), "--households", str(households)]
    # the page drawn with it says what verify checked, as verify said it
    out = tmp_path / "page.html"
    witness = words[words.index("--witness") + 1]
    given = words[words.index("--households") + 1]
    assert report_command(run, out, witness=witness, households=given, quiet=True) == 0
    html = out.read_text()
    assert f"witness: {clone} holds every anchor of the run, unchanged" in html
    assert f"households: {households}: " in html and "households: not checked" not in html
