"""The Anchorer and push-anchor with real ChainWriters, real commands, a real bare remote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import process_gone

from confirmatory.anchors.anchorer import Anchorer
from confirmatory.anchors.check import check_witness
from confirmatory.anchors.push import push_anchor_command
from confirmatory.core import merkle
from confirmatory.records.chain import dumps, log_seed
from confirmatory.records.reader import check_chain, iter_lines, prefix_head
from confirmatory.records.writer import ChainWriter, write_json_durable
from confirmatory.runtime.clock import Clock, FakeClock

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "confirmatory_anchor.py"
PY = sys.executable
# Exits 3 while ./fail exists, else 0; prints its last argument either way.
FLAKY = [
    PY,
    "-c",
    "import os,sys; print('witness unreachable' if os.path.exists('fail') else 'pushed',"
    " sys.argv[-1]); sys.exit(3 if os.path.exists('fail') else 0)",
]
# Waits until ./gate exists (at most 20 s), then succeeds.
GATED = [
    PY,
    "-c",
    "import os,time\nfor _ in range(2000):\n  if os.path.exists('gate'): break\n  time.sleep(0.01)\nprint('pushed')",
]
# Says it started (./started), then hangs like an unreachable witness.
SLEEPER = [
    PY,
    "-c",
    "import pathlib,time; print('pushing', flush=True); pathlib.Path('started').touch(); time.sleep(30)",
]


class RunDir:
    """A run directory with a manifest and three logs written by this process."""

    def __init__(self, root: Path, command: list[str] | None = None, cwd: Path | None = None):
        self.path = root / "run"
        self.cwd = cwd or root
        manifest = {
            "format": "confirmatory-run/1",
            "run_id": "run",
            "anchors": {"command": command, "cwd": str(self.cwd)} if command else None,
        }
        self.msha = write_json_durable(self.path / "manifest.json", manifest)
        self.model_sha = write_json_durable(self.path / "models/m/manifest.json", {"model": "m"})
        self.seeds = {
            "run.jsonl": self.seed("run.jsonl"),
            "host.jsonl": self.seed("host.jsonl"),
            "models/m/run.jsonl": log_seed(self.model_sha, "models/m/run.jsonl"),
        }
        self.logs = {rel: ChainWriter(self.path / rel, seed) for rel, seed in self.seeds.items()}
        for writer in self.logs.values():
            writer.append({"event": "open", "t": 1.0})
        self.anchors = ChainWriter(self.path / "anchors.jsonl", self.seed("anchors.jsonl"))
        self.pushes = ChainWriter(self.path / "anchor-pushes.jsonl", self.seed("anchor-pushes.jsonl"))
        for writer in (self.anchors, self.pushes):
            writer.append({"event": "open", "t": 1.0})

    def seed(self, rel: str) -> str:
        return log_seed(self.msha, rel)

    def anchorer(self, *, command=None, interval_s: float = 3600, clock=None, **kw) -> Anchorer:
        return Anchorer(
            self.path,
            clock or Clock(),
            logs=self.logs,
            external_logs=["resume.jsonl"],
            manifests=["manifest.json", "models/m/manifest.json"],
            anchors=self.anchors,
            pushes=self.pushes,
            interval_s=interval_s,
            command=command,
            cwd=self.cwd,
            **kw,
        )

    def anchor_lines(self) -> list[dict]:
        return [ln.obj for ln in iter_lines(self.path / "anchors.jsonl") if ln.obj["event"] == "anchor"]

    def push_lines(self) -> list[dict]:
        return [ln.obj for ln in iter_lines(self.path / "anchor-pushes.jsonl") if ln.obj["event"] == "push"]

    def wait_for_pushes(self, n: int, timeout: float = 20) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.push_lines()) < n:
            assert time.monotonic() < deadline, f"only {len(self.push_lines())} of {n} pushes"
            time.sleep(0.01)
        return self.push_lines()


def test_an_anchor_counts_only_acknowledged_lines_and_matches_every_logs_prefix(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer()
    run.logs["run.jsonl"].append({"event": "x", "t": 2.0})
    first = anchorer.anchor()
    for i in range(3):
        run.logs["models/m/run.jsonl"].append({"event": "x", "t": 3.0 + i})
    # A whole line whose append has not returned (written, fsync under way) is
    # on disk, but not acknowledged, so not counted.
    host = run.logs["host.jsonl"]
    with open(run.path / "host.jsonl", "ab") as f:
        f.write(dumps({"event": "sample", "t": 4.0, "seq": 1, "prev": host.head}) + b"\n")
    second = anchorer.anchor()

    anchors = run.anchor_lines()
    assert [a["seq"] for a in anchors] == [first, second] == [1, 2]
    assert anchors[0]["logs"]["run.jsonl"]["lines"] == 2
    assert anchors[1]["logs"]["models/m/run.jsonl"]["lines"] == 4
    assert anchors[1]["logs"]["host.jsonl"]["lines"] == 1
    for anchor in anchors:
        for rel in run.seeds:
            entry = anchor["logs"][rel]
            assert prefix_head(run.path / rel, run.seeds[rel], entry["lines"]) == entry["head"]
            # the writer's frontier gives the root of the tree over exactly the counted lines
            lines = (run.path / rel).read_bytes().split(b"\n")[: entry["lines"]]
            assert entry["root"] == merkle.root(merkle.leaf_hashes(lines)).hex()
    assert set(anchors[0]["logs"]) == set(run.seeds) | {"resume.jsonl"}


def test_an_external_log_is_counted_to_its_last_complete_chain_valid_line(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer()
    anchorer.anchor()
    resume = ChainWriter(run.path / "resume.jsonl", run.seed("resume.jsonl"))  # as `resume` would
    resume.append({"event": "open", "t": 5.0})
    resume.append({"event": "resume-request", "model": "m", "t": 6.0})
    with open(run.path / "resume.jsonl", "ab") as f:
        f.write(b'{"event":"resume-req')  # another process mid-write
    anchorer.anchor()

    before, after = (a["logs"]["resume.jsonl"] for a in run.anchor_lines())
    assert before == {"lines": 0, "head": run.seed("resume.jsonl"), "root": merkle.EMPTY_ROOT.hex()}
    lines = (run.path / "resume.jsonl").read_bytes().split(b"\n")[:2]
    assert after == {"lines": 2, "head": resume.head, "root": merkle.root(merkle.leaf_hashes(lines)).hex()}


def test_an_anchor_fixes_the_sha256_of_every_manifest(tmp_path):
    run = RunDir(tmp_path)
    run.anchorer().anchor()
    assert run.anchor_lines()[0]["manifests"] == {"manifest.json": run.msha, "models/m/manifest.json": run.model_sha}


def test_the_anchor_logs_are_never_anchored(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(ValueError, match="cannot be anchored"):
        Anchorer(
            run.path,
            Clock(),
            logs={**run.logs, "anchors.jsonl": run.anchors},
            external_logs=[],
            manifests=[],
            anchors=run.anchors,
            pushes=run.pushes,
            interval_s=1,
            command=None,
            cwd=tmp_path,
        )


def test_anchors_are_written_every_interval_and_once_finally(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer(interval_s=0.05)
    anchorer.anchor()  # the Run's first anchor, before any admission
    anchorer.start()
    deadline = time.monotonic() + 10
    while len(run.anchor_lines()) < 4:  # the first and three periodic ones
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert anchorer.finish() is None
    anchors = run.anchor_lines()
    assert len(anchors) >= 4
    assert [a["final"] for a in anchors] == [False] * (len(anchors) - 1) + [True]
    assert all(a["t"] < b["t"] for a, b in zip(anchors, anchors[1:]))
    assert run.push_lines() == []
    assert anchorer.failure is None
    with pytest.raises(RuntimeError):
        anchorer.anchor()


def test_a_failing_push_is_logged_with_its_rc_and_retried_at_the_next_anchor(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "fail").touch()
    anchorer = run.anchorer(command=FLAKY)
    anchorer.anchor()
    failed = run.wait_for_pushes(1)[0]
    assert failed["anchor_seq"] == 1 and failed["rc"] == 3
    assert failed["output"].startswith("witness unreachable " + str(run.path / "anchors.jsonl"))
    (tmp_path / "fail").unlink()
    anchorer.anchor()
    retried = run.wait_for_pushes(2)[1]
    assert retried["anchor_seq"] == 2 and retried["rc"] == 0
    assert anchorer.finish() == 0


def test_a_slow_push_never_blocks_anchor_and_the_next_push_covers_what_came_meanwhile(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer(command=GATED)
    started = time.monotonic()
    for _ in range(3):
        anchorer.anchor()  # seq 1 starts a push that waits; 2 and 3 queue behind it
    assert time.monotonic() - started < 5  # the push itself waits up to 20 s
    assert run.push_lines() == []
    (tmp_path / "gate").touch()
    assert anchorer.finish() == 0
    pushed = [p["anchor_seq"] for p in run.push_lines()]
    # Which anchor the first push took depends on when the worker woke; in any
    # case the four anchors (1-3 and the final 4) took fewer than four pushes.
    assert pushed == sorted(set(pushed)) and pushed[-1] == 4 and len(pushed) < 4
    assert [p["rc"] for p in run.push_lines()] == [0] * len(run.push_lines())


def test_finish_returns_the_final_pushs_rc(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "fail").touch()
    anchorer = run.anchorer(command=FLAKY, clock=FakeClock())
    anchorer.start()
    assert anchorer.finish() == 3
    assert anchorer.finish() == 3  # idempotent
    final = run.anchor_lines()[-1]
    assert final["final"] and run.push_lines()[-1]["anchor_seq"] == final["seq"]


def test_finish_kills_a_push_that_outlives_push_timeout(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer(command=SLEEPER)
    started = time.monotonic()
    rc = anchorer.finish(push_timeout=0.5)
    assert time.monotonic() - started < 10
    assert rc is not None and rc < 0  # killed by a signal
    last = run.push_lines()[-1]
    assert last["rc"] == rc and "pushing" in last["output"]
    assert last["output"].endswith("[killed by the runner: the time for pushes at the end of the run (0.5 s) ran out]")


def test_a_final_push_stuck_behind_an_earlier_one_is_logged_as_not_run(tmp_path):
    run = RunDir(tmp_path)
    anchorer = run.anchorer(command=SLEEPER)
    anchorer.anchor()
    deadline = time.monotonic() + 10
    while not (tmp_path / "started").exists():  # the first push is under way
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert anchorer.finish(push_timeout=0.3) == -1
    first, final = run.push_lines()
    assert first["anchor_seq"] == 1 and first["rc"] < 0
    assert first["output"].endswith("[killed by the runner: the time for pushes at the end of the run (0.3 s) ran out]")
    assert final["anchor_seq"] == 2 and final["rc"] is None
    assert final["output"] == "not run: the time for pushes at the end of the run (0.3 s) was spent on anchor 1's push"


def test_push_anchor_retries_the_final_push_after_the_run(tmp_path, capsys):
    run = RunDir(tmp_path, command=FLAKY)
    (tmp_path / "fail").touch()
    anchorer = run.anchorer(command=FLAKY)
    anchorer.start()
    assert anchorer.finish() == 3
    for writer in (*run.logs.values(), run.anchors, run.pushes):
        writer.close()

    assert push_anchor_command(run.path) == 6
    assert "returned 3: witness unreachable" in capsys.readouterr().err
    (tmp_path / "fail").unlink()
    assert push_anchor_command(run.path) == 0

    final_seq = run.anchor_lines()[-1]["seq"]
    retries = run.push_lines()[-2:]
    assert [(p["anchor_seq"], p["rc"], p["by"]) for p in retries] == [
        (final_seq, 3, "push-anchor"),
        (final_seq, 0, "push-anchor"),
    ]
    assert check_chain(run.path / "anchor-pushes.jsonl", run.seed("anchor-pushes.jsonl")).ok


def test_push_anchor_without_a_recorded_command_says_so(tmp_path, capsys):
    run = RunDir(tmp_path, command=None)
    run.anchorer().finish()
    assert push_anchor_command(run.path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "records no anchor command (key anchors.command)" in err


def test_a_run_pushes_its_anchors_to_a_protected_witness_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    remote = tmp_path / "witness.git"
    for args in (
        ["init", "--quiet", "--bare", "-b", "main", str(remote)],
        ["-C", str(remote), "config", "receive.denyNonFastForwards", "true"],
        ["-C", str(remote), "config", "receive.denyDeletes", "true"],
        ["clone", "--quiet", str(remote), str(tmp_path / "witness")],
    ):
        subprocess.run(["git", *args], check=True, capture_output=True, env=env)
    command = [PY, str(SCRIPT), "--clone", "../witness"]  # relative to cwd, as in a design
    run = RunDir(tmp_path, command=command, cwd=tmp_path / "design")
    run.cwd.mkdir()
    anchorer = run.anchorer(command=command, interval_s=0.2)
    anchorer.start()
    time.sleep(0.5)
    assert anchorer.finish() == 0
    assert all(p["rc"] == 0 for p in run.push_lines()), run.push_lines()
    for writer in run.logs.values():
        writer.close()

    reviewer = tmp_path / "reviewer"
    subprocess.run(["git", "clone", "--quiet", str(remote), str(reviewer)], check=True, env=env)
    assert check_witness(reviewer, run.path) == []
    held = (reviewer / "anchors" / "run.jsonl").read_bytes()
    assert held == (run.path / "anchors.jsonl").read_bytes()
    assert json.loads(held.splitlines()[-1])["final"] is True


def test_a_pushs_output_is_logged_without_secrets_and_at_most_2000_characters(tmp_path):
    run = RunDir(tmp_path)
    chatty = [PY, "-c", "print('x' * 5000); print('remote: https://Bearer abcdefghijkl@witness')"]
    anchorer = run.anchorer(command=chatty)
    assert anchorer.finish() == 0
    output = run.push_lines()[-1]["output"]
    assert len(output) == 2000
    assert "abcdefghijkl" not in output and "Bearer [redacted]" in output


# --- pushes during the run: their timeout, and what the progress display learns ------

# The first push hangs, with a child in its session as git would be under the
# script, until it is killed; every later push succeeds at once.
HANG_ONCE = [
    PY,
    "-c",
    "import pathlib,subprocess,sys,time\n"
    "if not pathlib.Path('hung').exists():\n"
    "  pathlib.Path('hung').touch()\n"
    "  child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "  pathlib.Path('grandchild').write_text(str(child.pid))\n"
    "  print('pushing', flush=True); time.sleep(60)\n"
    "print('pushed')",
]


def test_a_push_during_the_run_gets_half_the_anchor_interval_and_at_least_a_minute(tmp_path):
    run = RunDir(tmp_path)
    assert run.anchorer(interval_s=900).push_timeout_s == 450
    assert run.anchorer(interval_s=10).push_timeout_s == 60
    assert run.anchorer(interval_s=10, push_timeout_s=5).push_timeout_s == 5


def killed_once_then_retried(
    run: RunDir, command: list[str], *, push_timeout_s: float, within: float
) -> tuple[dict, tuple]:
    """An anchor whose push with ``command`` the runner kills within ``within`` s,
    then one whose push returns 0; (the first push line, its push_failures entry)."""
    anchorer = run.anchorer(command=command, push_timeout_s=push_timeout_s)
    try:
        started = time.monotonic()
        anchorer.anchor()
        first = run.wait_for_pushes(1, timeout=within + 10)[0]
        assert time.monotonic() - started < within
        (failure,) = anchorer.push_failures  # noted before its push line is written
        anchorer.anchor()
        retried = run.wait_for_pushes(2)[1]
        assert retried["anchor_seq"] == 2 and retried["rc"] == 0
    finally:
        rc = anchorer.finish(push_timeout=5)  # its threads are not daemons: end them even on failure
    assert rc == 0
    assert first["anchor_seq"] == 1 and first["rc"] < 0  # killed by a signal
    assert failure[:2] == (1, first["rc"])
    return first, failure


@pytest.mark.slow
def test_a_push_that_hangs_during_the_run_is_killed_at_its_timeout_and_retried_at_the_next_anchor(tmp_path):
    run = RunDir(tmp_path)
    hung, failure = killed_once_then_retried(
        run, HANG_ONCE, push_timeout_s=0.5, within=15
    )  # not the 60 s the command would hang
    assert "pushing" in hung["output"] and "longer than its timeout of 0.5 s" in hung["output"]
    # The whole session went, not just the command: a git under it would hold no lock.
    assert process_gone(int((tmp_path / "grandchild").read_text()))
    # what the progress line says after "failed (rc N): ": "killed" once (it said
    # "... and killed; its output: [killed by the runner: the push ran longer ...]")
    assert failure.tail == "timed out after 0.5 s and killed; its output: pushing", failure.tail


# The first push writes 20 MB of output and then hangs; every later push succeeds at once.
FLOOD_ONCE = ["sh", "-c", "if [ ! -e flooded ]; then touch flooded; yes | head -c 20000000; sleep 30; fi; echo pushed"]


@pytest.mark.slow
def test_a_push_that_floods_its_output_is_stopped_at_8_mib_and_retried_at_the_next_anchor(tmp_path):
    """A push's output goes to a temporary file: a command writing without
    end filled it for up to its timeout (450 s at the default interval), and
    the run stopped at its disk floor if the temporary directory was on the
    run's disk. Past MAX_PUSH_OUTPUT_BYTES it is stopped, a failed push."""
    run = RunDir(tmp_path)
    flooded, failure = killed_once_then_retried(
        run, FLOOD_ONCE, push_timeout_s=8, within=6
    )  # stopped at the bound, not at its timeout
    assert len(flooded["output"]) == 2000
    assert flooded["output"].endswith(
        "y\ny\n\n[killed by the runner: the push wrote more than its bound of 8,388,608 bytes of output]"
    )
    assert failure.tail == "killed for writing more than 8,388,608 bytes of output; its output: y", failure.tail


@pytest.mark.slow
def test_the_final_push_is_bounded_by_finish_not_by_the_timeout_of_pushes_during_the_run(tmp_path):
    run = RunDir(tmp_path)
    slow = [PY, "-c", "import time; time.sleep(1.5); print('pushed')"]
    anchorer = run.anchorer(command=slow, push_timeout_s=0.5)
    assert anchorer.finish(push_timeout=30) == 0
    assert [p["rc"] for p in run.push_lines()] == [0]


def test_the_progress_display_learns_of_each_push_and_its_problem_in_one_line(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "fail").touch()
    anchorer = run.anchorer(command=FLAKY)
    try:
        assert anchorer.push_failures == ()
        anchorer.anchor()
        first = run.wait_for_pushes(1, timeout=10)
        problem = f"witness unreachable {run.path / 'anchors.jsonl'}"
        assert [(p["anchor_seq"], p["rc"]) for p in first] == [(1, 3)]
        assert anchorer.push_failures == ((1, 3, problem),)  # (anchor_seq, rc, tail)
        (tmp_path / "fail").unlink()
        anchorer.anchor()
        second = run.wait_for_pushes(2, timeout=10)[1]
        assert (second["anchor_seq"], second["rc"]) == (2, 0)
        assert len(anchorer.push_failures) == 1  # a push that worked adds nothing
    finally:
        rc = anchorer.finish(push_timeout=5)  # its threads are not daemons: end them even on failure
    assert rc == 0


# --- the final anchor and `resume` -------------------------------------------------------


def test_the_final_anchor_waits_for_a_resume_that_is_appending_so_no_request_can_follow_it(tmp_path):
    import threading

    from processes import held_by_another_process

    run = RunDir(tmp_path)
    anchorer = run.anchorer()
    with held_by_another_process(run.path / "resume.jsonl.lock"):  # `resume` appending right now
        finisher = threading.Thread(target=anchorer.finish)
        finisher.start()
        time.sleep(0.5)
        assert finisher.is_alive()
        assert not any(a["final"] for a in run.anchor_lines())
    finisher.join(20)
    assert not finisher.is_alive()
    assert run.anchor_lines()[-1]["final"] is True


def test_the_final_anchor_leaves_no_lock_file_it_created(tmp_path):
    run = RunDir(tmp_path)
    run.anchorer().finish()
    assert run.anchor_lines()[-1]["final"] is True
    assert not (run.path / "resume.jsonl.lock").exists()


def test_a_git_lock_file_left_in_the_witness_clone_by_a_killed_git_does_not_fail_every_later_push(tmp_path):
    """A git killed mid-commit in the witness clone (SIGKILL: the OOM killer,
    the end of a timed-out push's grace, a crash) leaves its lock files, and
    git never removes them: every later commit there would fail ("Unable to
    create '.../index.lock': File exists") for the rest of the run and after.
    The witness script, which holds the clone's own lock while it works,
    removes git's lock files older than STALE_GIT_LOCK_S and says so."""
    from runhelpers import make_run, verified

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    remote, work = tmp_path / "witness.git", tmp_path / "witness"
    for args in (
        ["init", "--quiet", "--bare", "-b", "main", str(remote)],
        ["-C", str(remote), "config", "receive.denyNonFastForwards", "true"],
        ["clone", "--quiet", str(remote), str(work)],
    ):
        subprocess.run(["git", *args], check=True, capture_output=True, env=env)
    hour_ago = time.time() - 3600
    for rel in ("index.lock", "HEAD.lock"):  # what a git add / commit killed mid-way leaves
        (work / ".git" / rel).write_bytes(b"DIRC")
        os.utime(work / ".git" / rel, (hour_ago, hour_ago))
    run = make_run(
        tmp_path,
        households=3,
        models=1,
        engine_factory="confirmatory.testing.fakes:null_engine",
        # -m: the module of the checkout on PYTHONPATH (a planted fault's copy too)
        anchors={"interval_s": 0.2, "command": [PY, "-m", "confirmatory.anchors.witness", "--clone", "../witness"]},
    )
    result = run.execute()
    pushes = [ln.obj for ln in iter_lines(run.run_dir / "anchor-pushes.jsonl") if ln.obj["event"] == "push"]
    assert [p["rc"] for p in pushes] == [0] * len(pushes), pushes[-1]["output"]
    assert "removed git's lock file" in pushes[0]["output"]
    assert result.final_push_rc == 0 and result.status == "completed"
    verified(run.run_dir)
    reviewer = tmp_path / "reviewer"
    subprocess.run(["git", "clone", "--quiet", str(remote), str(reviewer)], check=True, env=env)
    assert check_witness(reviewer, run.run_dir) == []


def test_push_anchor_stops_a_push_that_hangs_and_frees_the_runs_lock(tmp_path, monkeypatch, capsys):
    """push-anchor holds the run's lock while it pushes. A push that hangs
    (a witness host that stopped answering mid-connection) would hold it for
    good, and every later push-anchor, a retry from a timer say, would be
    refused as if the run were still running. It is stopped at
    PUSH_ANCHOR_TIMEOUT_S like a push during the run, logged, and exits 6."""
    from confirmatory.anchors import push as push_anchor
    from confirmatory.records import lock as runlock

    monkeypatch.setattr(push_anchor, "PUSH_ANCHOR_TIMEOUT_S", 0.5)
    run = RunDir(tmp_path, command=SLEEPER)
    run.anchorer().finish()
    for writer in (*run.logs.values(), run.anchors, run.pushes):
        writer.close()
    started = time.monotonic()
    assert push_anchor_command(run.path) == 6
    assert time.monotonic() - started < 15  # not the 30 s the command would hang
    assert not runlock.held(run.path)
    (hung,) = run.push_lines()
    assert hung["by"] == "push-anchor" and hung["rc"] < 0
    assert "longer than its timeout of 0.5 s" in hung["output"]
    assert "longer than its timeout of 0.5 s" in capsys.readouterr().err


# --- the end of a run whose witness push hangs ---------------------------------------------
# A real run (run_command, as the CLI calls it, --quiet) pushing to a real bare
# witness whose pre-receive hook sleeps 300 s once ./hang exists beside it
# (a witness host that stopped answering mid-push). anchors.interval_s is an
# hour: only the first and the final anchor are made. The time for pushes at
# the end of the run is lowered from 120 s to END_S.

HANG_HOOK = {
    "from the start": 'if [ -e "{flag}" ]; then sleep 300; fi\n',  # anchor 1's push hangs
    "at the final push": 'if [ -e "{flag}" ]; then sleep 300; fi\ntouch "{flag}"\n',
}  # the final's
END_S = 3


def run_with_a_hung_witness(tmp_path: Path, hang: str) -> tuple[int, list[str], list[dict], Path]:
    """(exit status, stderr lines, push lines of anchor-pushes.jsonl, the run directory)."""
    import contextlib
    import io

    from confirmatory.anchors import anchorer as anchors
    from confirmatory.anchors.witness import init_local_witness
    from confirmatory.cli.run import run_command
    from confirmatory.testing.designs import write_design

    clone = init_local_witness(tmp_path / "w")
    flag = tmp_path / "w" / "hang"
    if hang == "from the start":
        flag.touch()
    hook = tmp_path / "w" / "witness.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\n" + HANG_HOOK[hang].format(flag=flag))
    hook.chmod(0o755)
    # lanes busy long enough for anchor 1's push to have started before the final anchor
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.1} for i in range(3)]
    design = write_design(
        tmp_path / "design",
        households=hh,
        models=1,
        engine_factory="confirmatory.testing.fakes:null_engine",
        anchors={
            "interval_s": 3600,
            "command": ["{python}", "-m", "confirmatory.anchors.witness", "--clone", str(clone)],
        },
    )
    started = time.monotonic()
    run_dir = tmp_path / "runs" / "h1"
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(anchors, "FINAL_PUSH_TIMEOUT_S", END_S)
        code = run_command(design, run_dir, quiet=True)
    assert time.monotonic() - started < 60  # not the 300 s the hook sleeps
    pushes = [ln.obj for ln in iter_lines(run_dir / "anchor-pushes.jsonl") if ln.obj["event"] == "push"]
    return code, err.getvalue().splitlines(), pushes, run_dir


@pytest.fixture(scope="module")
def hung_run(tmp_path_factory):
    """One run per way of hanging, shared by the tests that read it (each run
    waits out END_S): ``hung_run(hang)``."""
    runs: dict[str, tuple[int, list[str], list[dict], Path]] = {}

    def get(hang: str) -> tuple[int, list[str], list[dict], Path]:
        if hang not in runs:
            runs[hang] = run_with_a_hung_witness(tmp_path_factory.mktemp("hung"), hang)
        code, err, pushes, run_dir = runs[hang]
        return code, list(err), [dict(p) for p in pushes], run_dir

    return get


KILLED_AT_THE_END = f"[killed by the runner: the time for pushes at the end of the run ({END_S} s) ran out]"
NOT_RUN = f"not run: the time for pushes at the end of the run ({END_S} s) was spent on anchor 1's push"


@pytest.mark.slow
def test_the_records_of_a_push_the_runs_end_killed_or_never_ran_say_so_plainly_as_the_docs_do(hung_run):
    """The outputs read "[killed by the runner after finish()'s push_timeout]"
    and "not run: finish()'s push_timeout was spent on an earlier push": an
    internal name, no duration, no anchor, and not what docs/ANCHORS.md says."""
    code, err, pushes, _ = hung_run("from the start")
    assert code == 6, err
    first, final = pushes
    assert (first["anchor_seq"], final["anchor_seq"]) == (1, 2)
    assert first["rc"] < 0 and first["output"].endswith("\n" + KILLED_AT_THE_END), first
    assert final["rc"] is None and final["output"] == NOT_RUN, final
    # docs/ANCHORS.md gives both texts word for word, at the default 120 s
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "ANCHORS.md").read_text().split())
    assert KILLED_AT_THE_END.replace(f"({END_S} s)", "(120 s)") in docs
    assert NOT_RUN.replace(f"({END_S} s)", "(120 s)").replace("anchor 1's", "anchor M's") in docs


@pytest.mark.slow
@pytest.mark.parametrize("hang", list(HANG_HOOK))
def test_the_end_summary_says_what_the_records_say_of_the_final_push(hung_run, hang):
    """It said "the witness does not hold the final anchor yet (push rc -1)"
    when the records hold no rc -1: anchor 1's push killed (rc -15) and the
    final anchor's push not run (rc null)."""
    code, err, pushes, run_dir = hung_run(hang)
    assert code == 6, err
    retry = f"; retry with: confirmatory push-anchor {run_dir}"
    first, final = pushes
    if hang == "from the start":
        assert final["rc"] is None and first["rc"] < 0
        said = (
            f"its push (anchor 2) was not run: the time for pushes at the end of the run ({END_S} s) "
            f"was spent on anchor 1's push, killed by the runner (rc {first['rc']})"
        )
    else:
        assert first["rc"] == 0 and final["rc"] < 0
        said = (
            f"its push (anchor 2) was killed by the runner (rc {final['rc']}): "
            f"the time for pushes at the end of the run ({END_S} s) ran out"
        )
    assert err[-1] == f"  the witness does not hold the final anchor yet: {said}{retry}", err


@pytest.mark.parametrize("hang", list(HANG_HOOK))
def test_the_end_says_which_witness_push_it_waits_for_and_for_how_long_at_most(hung_run, hang):
    """Every lane done, the end waited up to 120 s on a hung push with no
    word but the table of models all `done` (and nothing at all with
    --quiet): a watcher could take the run for hung and kill it."""
    import re

    code, err, _, _ = hung_run(hang)
    assert code == 6, err
    waiting = [line for line in err if "waiting for the witness push" in line]
    first = (
        r"\[\d+:\d\d:\d\d\] waiting for the witness push of anchor 1, still under way \(at most [1-3] s more; "
        r"the final anchor 2's push comes after it, in the same time\)"
    )
    if hang == "from the start":
        want = first
    else:
        want = r"\[\d+:\d\d:\d\d\] waiting for the witness push of the final anchor 2 \(at most [1-3] s more\)"
        if len(waiting) == 2 and re.fullmatch(first, waiting[0]):
            # anchor 1's (unhung) push still under way at the end on a loaded
            # machine: said so first, then the final one's wait
            waiting = waiting[1:]
    assert len(waiting) == 1 and re.fullmatch(want, waiting[0]), err
    # said while it waits: before the push it waited for was killed
    assert err.index(waiting[0]) < next(i for i, line in enumerate(err) if "failed (rc" in line), err


@pytest.mark.parametrize("hang", list(HANG_HOOK))
def test_the_headline_of_a_run_whose_witness_lacks_the_final_anchor_says_so_and_how_to_retry(hung_run, hang):
    """Exit status 6 (README: completed, but the witness does not hold the
    final anchor yet), and the headline said "run completed: RUN_DIR", as a
    run whose witness holds everything does."""
    code, err, _, run_dir = hung_run(hang)
    assert code == 6, err
    headlines = [line for line in err if line.startswith("run ") and not line.startswith("run started")]
    assert headlines == [
        f"run completed, but the witness does not hold the final anchor yet: {run_dir}; "
        f"retry with: confirmatory push-anchor {run_dir}"
    ], err


# --- the texts of pushes a run's end cut short in other ways ------------------------------

ABANDONED = "the final anchor could not be written, and the run ended"


def test_the_pushes_of_a_run_whose_final_anchor_could_not_be_written_say_so(tmp_path):
    """The final anchor cannot be written (here: a manifest it hashes is
    gone): the push under way is killed and the one waiting is not run, and
    their records and progress lines say why, as a person reads them."""
    run = RunDir(tmp_path)
    anchorer = run.anchorer(command=SLEEPER)
    anchorer.anchor()
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists():  # anchor 1's push hangs
        assert time.monotonic() < deadline
        time.sleep(0.01)
    anchorer.anchor()  # anchor 2's push waits for the one push slot
    (run.path / "models/m/manifest.json").unlink()
    started = time.monotonic()
    with pytest.raises(FileNotFoundError):
        anchorer.finish(push_timeout=60)
    assert time.monotonic() - started < 10  # killed at once, not after the 60 s
    first, second = run.push_lines()
    assert (first["anchor_seq"], second["anchor_seq"]) == (1, 2)
    assert first["rc"] < 0 and first["output"] == f"pushing\n\n[killed by the runner: {ABANDONED}]", first
    assert second["rc"] is None and second["output"] == f"not run: {ABANDONED}", second
    assert anchorer.push_failures == (
        (1, first["rc"], f"killed: {ABANDONED}; its output: pushing"),
        (2, None, f"not run: {ABANDONED}"),
    )
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "ANCHORS.md").read_text().split())
    assert f"[killed by the runner: {ABANDONED}]" in docs and f"not run: {ABANDONED}" in docs


@pytest.mark.slow
def test_a_run_closed_without_its_main_loop_waits_for_its_pushes_for_the_close_time_and_says_so(tmp_path, monkeypatch):
    """Set-up failed after the anchorer started (or wait() never ran):
    close() writes a final anchor and waits for the pushes at most
    anchors.CLOSE_PUSH_TIMEOUT_S (30 s, lowered here); the records name
    that time as the time for pushes at the end of the run."""
    from runhelpers import make_run

    from confirmatory.anchors import anchorer as anchors

    monkeypatch.setattr(anchors, "CLOSE_PUSH_TIMEOUT_S", 1.5)
    run = make_run(
        tmp_path,
        households=2,
        models=1,
        engine_factory="confirmatory.testing.fakes:null_engine",
        anchors={"interval_s": 3600, "command": SLEEPER},
    )
    run.start()  # its first anchor's push hangs
    deadline = time.monotonic() + 20
    while not (tmp_path / "design" / "started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    run.close()
    assert time.monotonic() - started < 15  # not the 30 s the push would hang
    pushes = [ln.obj for ln in iter_lines(run.run_dir / "anchor-pushes.jsonl") if ln.obj["event"] == "push"]
    first, final = pushes
    assert first["rc"] < 0 and first["output"] == (
        "pushing\n\n[killed by the runner: the time for pushes at the end of the run (1.5 s) ran out]"
    ), first
    assert final["rc"] is None and final["output"] == (
        f"not run: the time for pushes at the end of the run (1.5 s) was spent on anchor {first['anchor_seq']}'s push"
    )
    assert run.anchorer.final_push_problem == (
        f"its push (anchor {final['anchor_seq']}) was not run: the time for pushes at the end of the run (1.5 s) "
        f"was spent on anchor {first['anchor_seq']}'s push, killed by the runner (rc {first['rc']})"
    )
