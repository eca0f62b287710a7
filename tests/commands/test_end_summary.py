"""The end summary is a value: ``run_command`` computes it (``EndSummary``:
the exit status and the lines) and hands it to the caller's shower; only the
default shower prints, and prints exactly those lines."""

from __future__ import annotations

import confirmatory
from confirmatory.commands.run import EndSummary, end_summary, run_command
from confirmatory.testing.designs import write_design

FAST = "confirmatory.testing.fakes:null_engine"


def test_the_end_summary_is_handed_to_the_callers_shower_and_printed_only_by_the_default(tmp_path, capsys):
    design = write_design(tmp_path / "design", households=2, models=1, engine_factory=FAST)
    shown: list[EndSummary] = []
    assert run_command(design, tmp_path / "run", quiet=True, show_summary=shown.append) == 0
    err = capsys.readouterr().err
    (summary,) = shown
    assert summary.status == 0
    assert summary.lines[0] == f"run completed: {tmp_path / 'run'}"
    assert any(line.startswith("  spend $") for line in summary.lines)
    assert any(line.startswith("  m0: ") for line in summary.lines)
    assert not any(line in err.splitlines() for line in summary.lines)  # the library printed none of them

    # the same run's result, summed up again: the same value, nothing printed
    again = end_summary(_Result(tmp_path / "run"))
    assert again == summary and capsys.readouterr().err == ""

    # without a shower of the caller's, the default prints those lines on stderr
    assert run_command(design, tmp_path / "run2", quiet=True) == 0
    printed = capsys.readouterr().err.splitlines()
    assert f"run completed: {tmp_path / 'run2'}" in printed
    assert confirmatory.EndSummary is EndSummary and confirmatory.end_summary is end_summary


class _Result:
    """What end_summary reads of a completed, witnessed run's result."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.status = "completed"
        self.final_push_rc = 0
        self.write_failures: list[str] = []
        self.disk_failed = None
        self.final_anchor_written = True
        self.stop_cause = None
        self.stop_detail = None
        import json

        (close,) = [
            json.loads(line)
            for line in (run_dir / "run.jsonl").read_text().splitlines()
            if json.loads(line).get("event") == "close"
        ]
        self.spend_total_nusd = close["spend_total_nusd"]
