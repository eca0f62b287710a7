"""The operator's commands around a run: resume, push-anchor and verify, with a real
second process holding the run's lock, real git remotes and (once) a real runner."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import as_a_user_who_may_not_write, held_by_another_process

from confirmatory.anchors.check import check_witness
from confirmatory.anchors.push import push_anchor_command
from confirmatory.engine.resume import resume_command
from confirmatory.records import lock as runlock
from confirmatory.records.chain import log_seed
from confirmatory.records.reader import check_chain, iter_lines
from confirmatory.records.writer import ChainWriter, write_json_durable
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_command

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
# Leaves ./ran behind (in its working directory) and succeeds.
TOUCH = [PY, "-c", "import pathlib,sys; pathlib.Path('ran').touch(); print('pushed', sys.argv[-1])"]


class Run:
    """A run directory as the runner lays it out, with the lines each test needs."""

    def __init__(self, root: Path, *, models=("m0", "m1"), command=None, name: str = "run"):
        self.root = root
        self.path = root / name
        self.models = models
        manifest = {
            "format": "confirmatory-run/1",
            "run_id": "r",
            "models": list(models),
            "anchors": {"interval_s": 900, "command": command, "cwd": str(root)},
        }
        self.msha = write_json_durable(self.path / "manifest.json", manifest)
        self.model_logs = {}
        for m in models:
            sha = write_json_durable(self.path / "models" / m / "manifest.json", {"model": m})
            rel = f"models/{m}/run.jsonl"
            self.model_logs[m] = ChainWriter(self.path / rel, log_seed(sha, rel))
            self.model_logs[m].append({"event": "open", "t": 1.0})
        self.anchors = self.log("anchors.jsonl")
        self.pushes = self.log("anchor-pushes.jsonl")
        self.log("resume.jsonl").close()
        self.anchor()

    def log(self, rel: str) -> ChainWriter:
        writer = ChainWriter(self.path / rel, log_seed(self.msha, rel))
        writer.append({"event": "open", "t": 1.0})
        return writer

    def anchor(self, final: bool = False) -> None:
        self.anchors.append({"event": "anchor", "t": 2.0, "final": final, "logs": {}, "manifests": {}})

    def event(self, model: str, **line) -> None:
        self.model_logs[model].append(line)

    def bytes(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def lock(self):
        return held_by_another_process(runlock.lock_path(self.path))

    def beside(self) -> list[str]:
        return sorted(p.name for p in self.path.parent.iterdir() if p.name.startswith("."))


# --- resume -------------------------------------------------------------------------


def test_resume_of_a_run_no_runner_runs_is_refused_and_writes_nothing(tmp_path, capsys):
    run = Run(tmp_path)
    run.event("m0", event="pause", household="h", arm="a", **{"pass": 0}, t=3.0)  # paused: only the lock is missing
    before = run.bytes("resume.jsonl")
    assert resume_command(run.path, "m0") == 3
    err = capsys.readouterr().err
    assert "no runner holds the run's lock" in err and "Nothing written" in err
    assert run.bytes("resume.jsonl") == before
    assert run.beside() in ([], [".run.lock"])  # at most the lock file (never removed: runlock.held)


def test_resume_of_a_paused_model_while_a_runner_runs_is_written(tmp_path, capsys):
    run = Run(tmp_path)
    run.event("m0", event="pause", household="h", arm="a", **{"pass": 0}, t=3.0)
    with run.lock():
        assert resume_command(run.path, "m0") == 0
    assert "resume requested for m0 (paused)" in capsys.readouterr().out
    lines = [ln.obj for ln in iter_lines(run.path / "resume.jsonl")]
    assert [ln["event"] for ln in lines] == ["open", "resume-request"] and lines[1]["model"] == "m0"


def test_resume_of_a_model_that_is_not_paused_is_refused(tmp_path, capsys):
    run = Run(tmp_path)
    # m0 paused once and was resumed; m1 never paused.
    run.event("m0", event="pause", household="h", arm="a", **{"pass": 0}, t=3.0)
    run.event("m0", event="resume", request_t=3.5, accepted=False, t=3.6)  # a stale one does not count
    run.event("m0", event="resume", request_t=4.0, accepted=True, t=4.1)
    before = run.bytes("resume.jsonl")
    with run.lock():
        for model in ("m0", "m1"):
            assert resume_command(run.path, model) == 3
            err = capsys.readouterr().err
            assert f"model '{model}' is not paused" in err and "Nothing written" in err
    assert run.bytes("resume.jsonl") == before


def stopped(run: Run) -> None:
    run.event("m0", event="stop", cause="interrupt", scope="run", t=5.0)


def final_anchor_written(run: Run) -> None:
    # The runner keeps its lock while it waits for the final push: a request
    # then would follow the final anchor, unanchored for ever.
    run.anchor(final=True)


def clock_behind_the_latest_pause(run: Run) -> None:
    # The pause's t is the run's never-backwards clock; after the wall clock was
    # stepped back, a request (raw wall time) would predate it and be rejected.
    # A second lane paused it later: the runner compares a request with the latest pause.
    run.event("m0", event="pause", household="h2", arm="a", **{"pass": 0}, t=time.time() + 3600.0)


@pytest.mark.parametrize(
    "plant, says",
    [
        (stopped, "model 'm0' was stopped"),
        (final_anchor_written, "the run is ending: its final anchor is written"),
        (clock_behind_the_latest_pause, "s behind the pause of model 'm0'"),
    ],
)
def test_resume_of_a_paused_model_is_refused_and_writes_nothing_even_while_a_runner_holds_the_lock(
    tmp_path, capsys, plant, says
):
    run = Run(tmp_path)
    run.event("m0", event="pause", household="h", arm="a", **{"pass": 0}, t=time.time() - 60.0)
    plant(run)
    before = run.bytes("resume.jsonl")
    with run.lock():
        assert resume_command(run.path, "m0") == 3
    err = capsys.readouterr().err
    assert says in err and "Nothing written" in err, err
    assert run.bytes("resume.jsonl") == before


# A resume command in a child process whose files may not grow past ``limit``
# bytes (RLIMIT_FSIZE, SIGXFSZ ignored): its write stops part-way with EFBIG,
# as on a full disk.
_RESUME_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from confirmatory.engine.resume import resume_command
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.exit(resume_command(sys.argv[1], "m0"))
"""


def test_a_resume_whose_write_is_cut_off_and_every_later_resume_are_refused_in_a_sentence(tmp_path, capsys):
    run = Run(tmp_path)
    run.event("m0", event="pause", household="h", arm="a", **{"pass": 0}, t=time.time() - 60.0)
    size = len(run.bytes("resume.jsonl"))
    with run.lock():
        cut = subprocess.run(
            [PY, "-c", _RESUME_UNDER_A_FILE_SIZE_LIMIT, str(run.path), str(size + 10)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cut.returncode == 3, cut.stderr
        assert "Traceback" not in cut.stderr and cut.stderr.startswith("resume failed: "), cut.stderr
        torn = run.bytes("resume.jsonl")
        assert len(torn) == size + 10 and not torn.endswith(b"\n")  # the request's first 10 bytes
        assert resume_command(run.path, "m0") == 3
    err = capsys.readouterr().err
    assert err.startswith("resume refused: resume.jsonl is damaged") and "Nothing written" in err, err
    assert "torn tail of 10 bytes" in err and "SIGINT or SIGTERM" in err
    assert run.bytes("resume.jsonl") == torn


# --- push-anchor ----------------------------------------------------------------------


def test_push_anchor_while_a_runner_holds_the_lock_is_refused_and_touches_nothing(tmp_path, capsys):
    run = Run(tmp_path, command=TOUCH)
    run.anchor(final=True)
    before = run.bytes("anchor-pushes.jsonl")
    with run.lock():
        assert push_anchor_command(run.path) == 1
    err = capsys.readouterr().err
    assert "is still running" in err and "fork anchor-pushes.jsonl's chain" in err
    assert run.bytes("anchor-pushes.jsonl") == before
    assert not (tmp_path / "ran").exists()  # the command never ran


def test_push_anchor_after_the_run_pushes_and_leaves_the_lock_free(tmp_path, capsys):
    run = Run(tmp_path, command=TOUCH)
    run.anchor(final=True)
    assert push_anchor_command(run.path) == 0
    assert "anchor 2 pushed (the final anchor)" in capsys.readouterr().out
    assert (tmp_path / "ran").exists()
    assert not runlock.held(run.path)


def test_push_anchor_of_a_run_that_never_ended_pushes_and_says_so(tmp_path, capsys):
    run = Run(tmp_path, command=TOUCH)  # its runner died: no final anchor
    assert push_anchor_command(run.path) == 0
    out, err = capsys.readouterr()
    assert "the run never ended: anchors.jsonl has no final anchor" in err
    assert "anchor 1 pushed (the last anchor (not final: the run never ended))" in out
    assert (tmp_path / "ran").exists()


def _witness(tmp_path: Path) -> tuple[Path, Path]:
    remote, clone = tmp_path / "witness.git", tmp_path / "witness"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    return remote, clone


def test_push_anchor_run_id_files_a_run_whose_id_the_witness_already_holds_elsewhere(tmp_path, capsys):
    remote, clone = _witness(tmp_path)
    command = [PY, str(ROOT / "scripts" / "confirmatory_anchor.py"), "--clone", str(clone)]
    first = Run(tmp_path / "first", command=command, name="run")
    first.anchor(final=True)
    assert push_anchor_command(first.path) == 0
    # A second run into a directory of the same name (the first was deleted):
    # the witness holds another "run".
    second = Run(tmp_path / "second", command=command, name="run")
    second.anchors.append({"event": "anchor", "t": 9.0, "final": True, "logs": {"x": 1}, "manifests": {}})
    capsys.readouterr()
    assert push_anchor_command(second.path) == 6
    err = capsys.readouterr().err
    assert "not a prefix" in err and f"push-anchor --run-id NEW_ID {second.path}" in err

    assert push_anchor_command(second.path, run_id="run-2") == 0
    pushed = [ln.obj for ln in iter_lines(second.path / "anchor-pushes.jsonl")][-1]
    assert pushed["rc"] == 0 and pushed["run_id"] == "run-2"
    assert check_chain(second.path / "anchor-pushes.jsonl", log_seed(second.msha, "anchor-pushes.jsonl")).ok
    # A later push-anchor and the reviewer's check find it under that id.
    assert push_anchor_command(second.path) == 0
    assert "using run id 'run-2'" in capsys.readouterr().err
    reviewer = tmp_path / "reviewer"
    subprocess.run(["git", "clone", "-q", str(remote), str(reviewer)], check=True, capture_output=True)
    assert check_witness(reviewer, second.path) == []
    assert check_witness(reviewer, first.path) == []


def test_push_anchor_names_a_run_id_only_when_it_files_under_another_than_the_default(tmp_path, capsys):
    """Pushes filed under the run directory's name (the witness script's
    default): a later push-anchor passes no id and says none; once the
    directory is renamed, it files where the earlier pushes did, and says why
    (not that a --run-id was given: none was)."""
    remote, clone = _witness(tmp_path)
    command = [PY, str(ROOT / "scripts" / "confirmatory_anchor.py"), "--clone", str(clone)]
    run = Run(tmp_path, command=command, name="run")
    assert push_anchor_command(run.path) == 0
    run.anchor(final=True)
    capsys.readouterr()
    assert push_anchor_command(run.path) == 0
    assert "using run id" not in capsys.readouterr().err
    pushed = [ln.obj for ln in iter_lines(run.path / "anchor-pushes.jsonl") if ln.obj.get("event") == "push"]
    assert [p["rc"] for p in pushed] == [0, 0] and not any("run_id" in p for p in pushed)
    run.anchors.close()
    run.pushes.close()
    renamed = run.path.rename(tmp_path / "renamed")
    assert push_anchor_command(renamed) == 0
    err = capsys.readouterr().err
    assert "using run id 'run', the id the run's earlier pushes filed its anchors under" in err, err
    assert "--run-id did" not in err
    reviewer = tmp_path / "reviewer"
    subprocess.run(["git", "clone", "-q", str(remote), str(reviewer)], check=True, capture_output=True)
    assert check_witness(reviewer, renamed) == []


def test_push_anchor_quotes_the_run_directory_in_its_hint(tmp_path, capsys):
    _, clone = _witness(tmp_path)
    command = [PY, str(ROOT / "scripts" / "confirmatory_anchor.py"), "--clone", str(clone)]
    run = Run(tmp_path, command=command, name="my run")  # not a slug: the witness refuses the id
    run.anchor(final=True)
    assert push_anchor_command(run.path) == 6
    err = capsys.readouterr().err
    assert f"confirmatory push-anchor --run-id NEW_ID '{run.path}'" in err
    assert push_anchor_command(run.path, run_id="my-run") == 0


def test_push_anchor_run_id_is_refused_for_a_command_that_is_not_the_witness_script(tmp_path, capsys):
    run = Run(tmp_path, command=TOUCH)
    run.anchor(final=True)
    assert push_anchor_command(run.path, run_id="other") == 1
    assert "--run-id applies only to confirmatory's witness script" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()
    witness_run = Run(
        tmp_path / "w",
        command=[PY, str(ROOT / "scripts" / "confirmatory_anchor.py"), "--clone", str(tmp_path / "nowhere")],
    )
    assert push_anchor_command(witness_run.path, run_id="no slug") == 1
    assert "--run-id 'no slug' is not a slug" in capsys.readouterr().err


# --- verify ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    return generate_run(tmp_path_factory.mktemp("gen") / "run", Plan(households=6))


def test_verify_of_a_run_whose_runner_holds_its_lock_is_provisional_and_fails(finished_run, capsys):
    assert verify_command(finished_run) == 0  # the same run, not running: it passes
    capsys.readouterr()
    with held_by_another_process(runlock.lock_path(finished_run)):
        assert verify_command(finished_run) == 3  # no violation, but not complete
    out = capsys.readouterr().out
    notice = "THE RUN IS STILL RUNNING"
    assert out.count(notice) == 2 and "this report is provisional" in out
    assert out.splitlines()[0].startswith("***") and out.rstrip().splitlines()[-1].startswith("***")
    assert out.splitlines()[1].startswith("state: running")
    assert "NO VIOLATION, BUT THE RUN IS NOT COMPLETE (running)" in out  # the report itself is kept


def test_verify_of_a_finished_run_the_reviewer_may_not_write_to_is_not_called_still_running(finished_run, tmp_path):
    # A runs folder received as it was (the lock file the run left beside it
    # included) that the reviewer may not write to: another user's folder, a
    # read-only copy (chmod -R a-w) or mount. verify asked whether a runner held
    # the lock by taking it, could not open the file for writing, and printed
    # THE RUN IS STILL RUNNING around the report of a finished run: exit 1.
    folder = tmp_path / "received"
    shutil.copytree(finished_run, folder / "run")
    (folder / ".run.lock").touch()
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
    for path, mode in modes.items():
        path.chmod(mode & ~0o222)
    try:
        done = subprocess.run(
            as_a_user_who_may_not_write(
                [PY, str(ROOT / "scripts" / "confirmatory_run.py"), "verify", str(folder / "run")]
            ),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert "STILL RUNNING" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ALL INVARIANTS HOLD" in done.stdout
    assert sorted(p.name for p in folder.iterdir()) == [".run.lock", "run"]


def test_verify_json_of_a_running_run_says_provisional(finished_run, capsys):
    with held_by_another_process(runlock.lock_path(finished_run)):
        assert verify_command(finished_run, as_json=True) == 3
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["provisional"] is True and report["ok"] is True
    assert (report["state"], report["crash"]) == ("running", None) and report["under_way"] is not None
    assert "THE RUN IS STILL RUNNING" in err


def documented_json_keys() -> dict[str, set[str]]:
    """The keys docs/VERIFY.md's `--json` section names: the top level's, and
    those listed in each row's value (an object's or a list item's)."""
    text = (ROOT / "docs" / "VERIFY.md").read_text()
    section = text.split("## `--json`", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            key, value = line[2:].split(" | ", 1)
            rows[key.strip("`")] = named(value)
    rows["violation"] = named(section.split("A violation is an object:", 1)[1])
    return rows


def named(text: str) -> set[str]:
    """The `key`s a sentence names, leaving out what its parentheses say of them."""
    return set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", text)))


def test_verify_json_has_exactly_the_keys_its_page_documents(finished_run, capsys):
    # The --json shape was documented for four of its keys; ok, run_dir,
    # unanchored_tail, each invariant's fields and a violation's were not.
    docs = documented_json_keys()
    with held_by_another_process(runlock.lock_path(finished_run)):
        verify_command(finished_run, as_json=True)
    live = json.loads(capsys.readouterr().out)
    assert set(live) == {k for k in docs if k != "violation"}
    assert set(live["witness"]) == docs["witness"] and set(live["households"]) == docs["households"]
    assert all(set(inv) == docs["invariants"] for inv in live["invariants"])
    assert set(live["under_way"]) == docs["crash"]
    assert [inv["invariant"] for inv in live["invariants"]] == list(range(1, 13))
    damaged = finished_run.parent / "damaged"
    shutil.copytree(finished_run, damaged)
    (damaged / "manifest.json").write_bytes(b"{}")
    verify_command(damaged, as_json=True)
    report = json.loads(capsys.readouterr().out)
    assert "provisional" not in report
    violations = report["start_here"] + [v for inv in report["invariants"] for v in inv["first"]]
    assert violations and all(set(v) == docs["violation"] for v in violations)


def test_verify_of_a_directory_that_is_not_a_run_says_so_in_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert verify_command(tmp_path) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "is not a run directory" in err


def test_verify_of_a_run_that_lost_its_manifest_still_reports_in_full(finished_run, tmp_path, capsys):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(finished_run, damaged)
    (damaged / "manifest.json").unlink()
    assert verify_command(damaged) == 1
    assert "VERIFY FAILED" in capsys.readouterr().out


# --- a real runner -----------------------------------------------------------------------


@pytest.mark.slow
def test_the_commands_against_a_real_runner_paused_for_an_operator(tmp_path):
    from confirmatory.testing.designs import write_design

    hh = [{"id": "hh-000", "plan": {"m0:calculator/0": "operator"}}, {"id": "hh-001"}, {"id": "hh-002"}]
    design = write_design(
        tmp_path / "design", households=hh, models=2, engine_factory="confirmatory.testing.fakes:null_engine"
    )
    run_dir = tmp_path / "run"
    cli = [PY, str(ROOT / "scripts" / "confirmatory_run.py")]
    runner = subprocess.Popen(
        [*cli, "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while (
            not (run_dir / "models/m0/run.jsonl").exists()
            or b'"event":"pause"' not in (run_dir / "models/m0/run.jsonl").read_bytes()
        ):
            assert runner.poll() is None and time.monotonic() < deadline, "m0 never paused"
            time.sleep(0.05)
        assert runlock.held(run_dir)  # run_command's lock is the one runlock names

        def cmd(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)

        live = cmd("verify", str(run_dir))
        # no violation, not complete: 3 (docs/VERIFY.md "States")
        assert live.returncode == 3 and "THE RUN IS STILL RUNNING" in live.stdout
        pushes = (run_dir / "anchor-pushes.jsonl").read_bytes()
        refused = cmd("push-anchor", str(run_dir))
        assert refused.returncode == 1 and "is still running" in refused.stderr
        assert (run_dir / "anchor-pushes.jsonl").read_bytes().startswith(pushes)
        other = cmd("resume", str(run_dir), "--model", "m1")
        assert other.returncode == 3 and "not paused" in other.stderr
        resumed = cmd("resume", str(run_dir), "--model", "m0")
        assert resumed.returncode == 0, resumed.stderr
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, err
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()

    assert not runlock.held(run_dir)  # released (its file stays: runlock.held)
    resume_log = (run_dir / "resume.jsonl").read_bytes()
    late = cmd("resume", str(run_dir), "--model", "m0")
    assert late.returncode == 3 and "no runner holds the run's lock" in late.stderr
    assert (run_dir / "resume.jsonl").read_bytes() == resume_log
    final = cmd("verify", str(run_dir))
    assert final.returncode == 0, final.stdout
    assert "STILL RUNNING" not in final.stdout
