"""The witness against real local bare repositories and real git processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import as_a_user_who_may_not_write

from confirmatory.anchors.check import check_witness
from confirmatory.anchors.git import WitnessError, problem_line
from confirmatory.anchors.witness import preflight_problems, publish

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "confirmatory_anchor.py"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
ENV.update(GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [
        "git",
        "-c",
        "user.name=tester",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "init.defaultBranch=main",
        "-C",
        str(repo),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def bare(path: Path, *, protected: bool) -> Path:
    git(path.parent, "init", "--quiet", "--bare", "-b", "main", str(path))
    if protected:
        git(path, "config", "receive.denyNonFastForwards", "true")
        git(path, "config", "receive.denyDeletes", "true")
    return path


def clone(remote: Path, path: Path) -> Path:
    git(remote.parent, "clone", "--quiet", str(remote), str(path))
    return path


def write_anchors(run_dir: Path, n: int, *, partial: bytes = b"") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"event": "anchor", "seq": i, "t": 1_800_000_000.0 + i, "final": False}, sort_keys=True)
        for i in range(n)
    ]
    path = run_dir / "anchors.jsonl"
    path.write_bytes("".join(ln + "\n" for ln in lines).encode() + partial)
    return path


def remote_file(remote: Path, rel: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(remote), "show", f"main:{rel}"], capture_output=True, env=ENV, check=True
    ).stdout


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=ENV, timeout=30)


@pytest.fixture
def witness(tmp_path: Path) -> tuple[Path, Path]:
    remote = bare(tmp_path / "witness.git", protected=True)
    return remote, clone(remote, tmp_path / "witness")


def test_the_script_commits_the_anchors_and_pushes_them_to_the_witness(tmp_path, witness):
    remote, work = witness
    anchors = write_anchors(tmp_path / "run-1", 3)
    proc = run_script("--clone", str(work), str(anchors))
    assert proc.returncode == 0, proc.stderr
    assert remote_file(remote, "anchors/run-1.jsonl") == anchors.read_bytes()
    subject = git(remote, "log", "-1", "--format=%s %an", "main").stdout
    assert "anchors/run-1.jsonl: 3 lines, last anchor t=1800000002.000" in subject
    assert "confirmatory anchor" in subject


def test_a_trailing_partial_line_is_left_out_of_the_commit(tmp_path, witness):
    remote, work = witness
    anchors = write_anchors(tmp_path / "run", 2, partial=b'{"event":"anch')
    publish(work, anchors)
    assert remote_file(remote, "anchors/run.jsonl").count(b"\n") == 2
    assert remote_file(remote, "anchors/run.jsonl").endswith(b"}\n")


def test_publishing_with_nothing_new_to_commit_is_a_success(tmp_path, witness):
    _, work = witness
    anchors = write_anchors(tmp_path / "run", 2)
    assert publish(work, anchors).committed
    again = publish(work, anchors)
    assert not again.committed and again.lines == 2


def test_a_commit_whose_push_failed_is_pushed_by_the_next_call(tmp_path, witness):
    remote, work = witness
    anchors = write_anchors(tmp_path / "run", 2)
    publish(work, anchors)
    git(work, "remote", "set-url", "origin", str(tmp_path / "unreachable.git"))
    write_anchors(tmp_path / "run", 3)
    with pytest.raises(WitnessError, match="push of main to origin failed"):
        publish(work, anchors)
    git(work, "remote", "set-url", "origin", str(remote))
    assert not publish(work, anchors).committed  # committed last time; only the push was owed
    assert remote_file(remote, "anchors/run.jsonl").count(b"\n") == 3


def test_a_force_push_of_rewritten_anchor_history_is_rejected_by_the_witness(tmp_path, witness):
    remote, work = witness
    anchors = write_anchors(tmp_path / "run", 2)
    publish(work, anchors)
    write_anchors(tmp_path / "run", 4)
    publish(work, anchors)
    honest = git(remote, "rev-parse", "main").stdout

    forger = clone(remote, tmp_path / "forger")
    git(forger, "reset", "--quiet", "--hard", "HEAD~1")
    (forger / "anchors" / "run.jsonl").write_text('{"forged": true}\n')
    git(forger, "commit", "--quiet", "-am", "rewrite")
    proc = git(forger, "push", "--force", "origin", "main", check=False)
    assert proc.returncode != 0
    assert "non-fast-forward" in proc.stderr
    assert git(remote, "rev-parse", "main").stdout == honest


def test_deleting_the_witness_branch_is_rejected(tmp_path, witness):
    remote, work = witness
    publish(work, write_anchors(tmp_path / "run", 1))
    proc = git(work, "push", "origin", ":main", check=False)
    assert proc.returncode != 0
    assert "deletion prohibited" in proc.stderr
    assert git(remote, "rev-parse", "--verify", "main", check=False).returncode == 0


def test_a_missing_clone_is_a_one_line_error(tmp_path):
    anchors = write_anchors(tmp_path / "run", 1)
    proc = run_script("--clone", str(tmp_path / "nowhere"), str(anchors))
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1
    assert "does not exist" in proc.stderr


def test_a_directory_that_is_not_a_git_clone_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(WitnessError, match="is not the top of a git repository"):
        publish(tmp_path / "plain", write_anchors(tmp_path / "run", 1))


def test_a_clone_without_a_remote_is_refused(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    git(local, "init", "--quiet")
    with pytest.raises(WitnessError, match="has no remote"):
        publish(local, write_anchors(tmp_path / "run", 1))


def test_a_clone_left_in_the_middle_of_a_rebase_is_refused_with_the_way_out(tmp_path, witness):
    """A rebase stopped half way (here on a conflict; for the witness script,
    a rebase of its catch-up that was killed) leaves the clone on a detached
    HEAD with the rebase's state: every later push fails until someone acts.
    The error says what happened and the command that undoes it; after it,
    the push goes through."""
    _, work = witness
    anchors = write_anchors(tmp_path / "run", 2)
    publish(work, anchors)
    git(work, "checkout", "--quiet", "-b", "other")
    (work / "conflict.txt").write_text("a\n")
    git(work, "add", "conflict.txt")
    git(work, "commit", "--quiet", "-m", "a")
    git(work, "checkout", "--quiet", "main")
    (work / "conflict.txt").write_text("b\n")
    git(work, "add", "conflict.txt")
    git(work, "commit", "--quiet", "-m", "b")
    assert git(work, "rebase", "other", check=False).returncode != 0  # stopped on the conflict
    with pytest.raises(WitnessError, match="is mid-rebase") as err:
        publish(work, write_anchors(tmp_path / "run", 3))
    assert f"git -C {work} rebase --abort" in str(err.value)
    git(work, "rebase", "--abort")
    publish(work, write_anchors(tmp_path / "run", 3))


def test_a_push_the_witness_refuses_is_reported_with_its_reason(tmp_path, witness):
    remote, work = witness
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'closed for audit' >&2\nexit 1\n")
    hook.chmod(0o755)
    proc = run_script("--clone", str(work), str(write_anchors(tmp_path / "run", 1)))
    assert proc.returncode != 0
    assert "the witness remote refused the push of main: (pre-receive hook declined)" in proc.stderr


def test_two_runs_sharing_a_witness_branch_catch_up_and_both_push(tmp_path, witness):
    remote, work = witness
    other = clone(remote, tmp_path / "other-clone")
    publish(work, write_anchors(tmp_path / "a", 1))
    publish(work, write_anchors(tmp_path / "a", 2))
    publish(other, write_anchors(tmp_path / "b", 3))  # rejected at first, then replayed on a's
    assert remote_file(remote, "anchors/a.jsonl").count(b"\n") == 2
    assert remote_file(remote, "anchors/b.jsonl").count(b"\n") == 3


def test_a_branch_that_changed_our_own_file_is_not_merged(tmp_path, witness):
    remote, work = witness
    other = clone(remote, tmp_path / "other-clone")
    publish(work, write_anchors(tmp_path / "one" / "run", 2))
    with pytest.raises(WitnessError, match="non-fast-forward"):
        publish(other, write_anchors(tmp_path / "two" / "run", 1, partial=b'{"x":1}\n'))
    assert remote_file(remote, "anchors/run.jsonl").count(b"\n") == 2


def test_another_run_with_the_same_id_is_not_overwritten(tmp_path, witness):
    _, work = witness
    publish(work, write_anchors(tmp_path / "one" / "run", 2))
    other = tmp_path / "two" / "run" / "anchors.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text('{"event":"anchor","t":1}\n')
    with pytest.raises(WitnessError, match="pass --run-id"):
        publish(work, other)
    assert publish(work, other, run_id="run-two").committed


def test_check_witness_passes_for_an_honest_witness(tmp_path, witness):
    remote, work = witness
    run_dir = tmp_path / "run"
    for n in (1, 2, 3):
        publish(work, write_anchors(run_dir, n))
    reviewer = clone(remote, tmp_path / "reviewer")
    assert check_witness(reviewer, run_dir) == []


def test_check_witness_reports_anchors_that_were_never_pushed(tmp_path, witness):
    remote, work = witness
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2))
    write_anchors(run_dir, 3)
    problems = check_witness(clone(remote, tmp_path / "reviewer"), run_dir)
    assert problems == ["the witness holds 2 of the run's 3 anchor lines; anchors.jsonl line 3 onward was never pushed"]


def test_check_witness_reports_a_run_whose_anchors_were_edited_after_the_push(tmp_path, witness):
    remote, work = witness
    run_dir = tmp_path / "run"
    anchors = write_anchors(run_dir, 3)
    publish(work, anchors)
    lines = anchors.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"1800000001.0", b"1800000001.5")
    anchors.write_bytes(b"\n".join(lines))
    problems = check_witness(clone(remote, tmp_path / "reviewer"), run_dir)
    assert len(problems) == 1
    assert "anchors/run.jsonl line 2 differs from the run's anchors.jsonl" in problems[0]


def rewrite_history(remote: Path, work_dir: Path) -> str:
    """Replace the witness's history with one whose first anchor line is different."""
    forger = clone(remote, work_dir)
    root = git(forger, "rev-list", "--max-parents=0", "HEAD").stdout.strip()
    git(forger, "reset", "--quiet", "--hard", root)
    path = forger / "anchors" / "run.jsonl"
    path.write_bytes(path.read_bytes().replace(b"1800000000.0", b"1799999999.0"))
    git(forger, "commit", "--quiet", "--amend", "-am", "rewritten")
    git(forger, "push", "--quiet", "--force", "origin", "main")
    return git(forger, "rev-parse", "HEAD").stdout.strip()


def test_check_witness_reports_a_witness_whose_history_diverges(tmp_path):
    remote = bare(tmp_path / "unprotected.git", protected=False)
    work = clone(remote, tmp_path / "witness")
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 1))
    publish(work, write_anchors(run_dir, 2))
    forged = rewrite_history(remote, tmp_path / "forger")

    problems = check_witness(clone(remote, tmp_path / "reviewer"), run_dir)
    assert any(
        p.startswith(f"witness commit {forged[:12]} ") and "anchors/run.jsonl line 1 differs" in p for p in problems
    ), problems


def test_check_witness_notices_a_rewrite_since_its_last_fetch(tmp_path):
    remote = bare(tmp_path / "unprotected.git", protected=False)
    work = clone(remote, tmp_path / "witness")
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2))
    reviewer = clone(remote, tmp_path / "reviewer")
    assert check_witness(reviewer, run_dir) == []
    rewrite_history(remote, tmp_path / "forger")

    problems = check_witness(reviewer, run_dir)
    assert any("was rewritten" in p for p in problems), problems
    assert any("line 1 differs" in p for p in problems), problems


def edit_then_restore(remote: Path, work_dir: Path) -> str:
    """Two fast-forward commits (a protected witness takes them): one that
    changes the run's first anchor line, one that puts it back. Returns the first."""
    editor = clone(remote, work_dir)
    path = editor / "anchors" / "run.jsonl"
    honest = path.read_bytes()
    path.write_bytes(honest.replace(b"1800000000.0", b"1799999999.0"))
    git(editor, "commit", "--quiet", "-am", "edited")
    edited = git(editor, "rev-parse", "HEAD").stdout.strip()
    path.write_bytes(honest)
    git(editor, "commit", "--quiet", "-am", "restored")
    git(editor, "push", "--quiet", "origin", "main")
    return edited


def test_a_shallow_clone_of_the_witness_is_checked_over_the_whole_history(tmp_path, witness):
    # A reviewer's clone made with --depth 1 held only the newest version of
    # the run's anchors file: an edited version in between went unseen, and
    # verify said the witness held every anchor unchanged.
    remote, work = witness
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2))
    edited = edit_then_restore(remote, tmp_path / "editor")
    url = remote.resolve().as_uri()
    full = check_witness(clone(remote, tmp_path / "full"), run_dir)
    assert any(p.startswith(f"witness commit {edited[:12]} ") and "line 1 differs" in p for p in full), full
    git(tmp_path, "clone", "--quiet", "--depth", "1", url, str(tmp_path / "shallow"))
    assert check_witness(tmp_path / "shallow", run_dir) == full
    # A shallow clone that cannot fetch the rest says what it could not check.
    git(tmp_path, "clone", "--quiet", "--depth", "1", url, str(tmp_path / "cut-off"))
    git(tmp_path / "cut-off", "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    problems = check_witness(tmp_path / "cut-off", run_dir)
    assert problems[0].startswith("cannot check: could not fetch the witness")
    assert problems[1] == (
        "the witness clone is shallow (cloned with --depth) and its whole history could not "
        "be fetched: the versions of anchors/run.jsonl before its shallow history were not checked"
    )


def test_a_witness_clone_already_at_origins_tip_is_checked_without_writing_to_it(tmp_path, witness):
    # A reviewer's clone on a read-only copy or mount: the check fetched into
    # it whatever its state, git could not write .git/FETCH_HEAD, and
    # invariant 8 failed ("could not fetch the witness") though the clone
    # held origin's tip. A clone at the tip is now checked as it is.
    remote, work = witness
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2))
    reviewer = clone(remote, tmp_path / "reviewer")
    assert check_witness(reviewer, run_dir) == []
    assert not (reviewer / ".git" / "FETCH_HEAD").exists()  # nothing written
    modes = {p: p.stat().st_mode for p in [reviewer, *reviewer.rglob("*")]}
    for path, mode in modes.items():
        path.chmod(mode & ~0o222)
    probe = (
        "import json, sys; from pathlib import Path; from confirmatory.anchors.check import check_witness; "
        "print(json.dumps(check_witness(Path(sys.argv[1]), Path(sys.argv[2]))))"
    )
    try:
        done = subprocess.run(
            as_a_user_who_may_not_write([sys.executable, "-c", probe, str(reviewer), str(run_dir)]),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**ENV, "PYTHONPATH": str(SCRIPT.parent.parent)},
        )
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    # Behind origin: fetched, as before.
    publish(work, write_anchors(run_dir, 3))
    assert check_witness(reviewer, run_dir) == []
    assert (reviewer / ".git" / "FETCH_HEAD").exists()


def test_check_witness_names_a_missing_clone(tmp_path):
    run_dir = tmp_path / "run"
    write_anchors(run_dir, 1)
    assert check_witness(tmp_path / "nowhere", run_dir) == [
        f"witness clone {tmp_path / 'nowhere'} does not exist (clone the witness remote there first)"
    ]


def test_check_witness_uses_the_run_id_the_anchor_command_was_given(tmp_path, witness):
    remote, work = witness
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2), run_id="study-42")
    (run_dir / "manifest.json").write_text(
        json.dumps({"anchors": {"command": ["python", "x.py", "--clone", "w", "--run-id", "study-42"], "cwd": "."}})
    )
    assert check_witness(clone(remote, tmp_path / "reviewer"), run_dir) == []


def test_a_renamed_copy_of_a_run_is_checked_under_the_id_its_pushes_said(tmp_path, witness):
    # A reviewer's copy rarely keeps the directory's name; the run's own push
    # lines say which file the witness wrote (the script's output, as the
    # runner records it in anchor-pushes.jsonl).
    remote, work = witness
    run_dir = tmp_path / "study-20261129T120000Z"
    write_anchors(run_dir, 2)
    proc = run_script("--clone", str(work), str(run_dir / "anchors.jsonl"))
    assert proc.returncode == 0, proc.stderr
    push = {"event": "push", "anchor_seq": 1, "rc": 0, "output": proc.stdout, "seq": 1, "prev": "0" * 64, "t": 1.0}
    (run_dir / "anchor-pushes.jsonl").write_text(json.dumps(push) + "\n")
    copy = tmp_path / "for-review" / "renamed"
    copy.parent.mkdir()
    run_dir.rename(copy)
    reviewer = clone(remote, tmp_path / "reviewer")
    assert check_witness(reviewer, copy) == []
    # Without that line the directory's name is all there is, and the
    # problem says where the id came from.
    (copy / "anchor-pushes.jsonl").unlink()
    (problem,) = check_witness(reviewer, copy)
    assert problem.startswith(
        "the witness holds no anchors/renamed.jsonl (the run id 'renamed' comes from the run directory's name"
    ), problem


# --- what a failed git command said, in one line ------------------------------------------

GIT_UNREACHABLE = """fatal: '/srv/gone.git' does not appear to be a git repository
fatal: Could not read from remote repository.

Please make sure you have the correct access rights
and the repository exists.
"""


def test_the_problem_line_is_what_git_said_went_wrong_not_its_advice():
    assert problem_line(GIT_UNREACHABLE) == (
        "'/srv/gone.git' does not appear to be a git repository; Could not read from remote repository."
    )
    assert problem_line("hint: one\nerror: failed to push some refs\nhint: two\n") == "failed to push some refs"
    assert (
        problem_line("Traceback ...\nModuleNotFoundError: No module named 'x'\n")
        == "ModuleNotFoundError: No module named 'x'"
    )
    assert problem_line("\n  \n") == "(no output)"


def test_the_problem_line_is_bounded_and_redacted(monkeypatch):
    monkeypatch.setenv("WITNESS_TOKEN", "tok-5ecret-value")
    said = problem_line("fatal: unable to access 'https://me:tok-5ecret-value@host/w.git/': " + "x" * 500)
    assert "tok-5ecret-value" not in said and "\n" not in said
    assert len(said) == 300 and said.endswith("...")


def _unreachable_clone(remote: Path, path: Path) -> Path:
    work = clone(remote, path)
    git(work, "remote", "set-url", "origin", str(path.parent / "gone.git"))
    return work


def test_an_unreachable_witness_is_named_by_what_git_said(tmp_path, witness):
    remote, _ = witness
    work = _unreachable_clone(remote, tmp_path / "cut-off")
    proc = run_script("--clone", str(work), str(write_anchors(tmp_path / "run", 1)))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "push of main to origin failed: " in proc.stderr
    assert "gone.git' does not appear to be a git repository; Could not read from remote repository." in proc.stderr
    assert "repository exists" not in proc.stderr


def test_check_witness_says_why_it_could_not_fetch(tmp_path, witness):
    remote, work = witness
    run_dir = tmp_path / "run"
    publish(work, write_anchors(run_dir, 2))
    reviewer = _unreachable_clone(remote, tmp_path / "reviewer")
    problems = check_witness(reviewer, run_dir)
    assert problems[0].startswith("cannot check: could not fetch the witness ('")
    assert "gone.git' does not appear to be a git repository; Could not read from remote repository.)" in problems[0]


# --- before a run: would every push fail? ---------------------------------------------------


def _command(clone_arg: str, *extra: str, module: bool = False) -> list[str]:
    head = ["{python}", "-m", "confirmatory.anchors.witness"] if module else ["{python}", str(SCRIPT)]
    return [*head, "--clone", clone_arg, *extra]


def test_preflight_finds_nothing_wrong_with_a_fresh_id_and_a_usable_clone(tmp_path, witness):
    _, work = witness
    design_dir = tmp_path
    assert preflight_problems(_command("witness"), design_dir, tmp_path / "runs" / "study-1") == []
    assert preflight_problems(_command(str(work), module=True), design_dir, tmp_path / "runs" / "s2") == []
    assert preflight_problems(None, design_dir, tmp_path / "runs" / "s3") == []
    # Not the witness script: nothing is known about how it files anchors.
    assert preflight_problems(["./push.sh", "--clone", "nowhere"], design_dir, tmp_path / "my run") == []


def test_preflight_names_a_run_directory_that_is_not_a_slug(tmp_path, witness):
    (problem,) = preflight_problems(_command("witness"), tmp_path, tmp_path / "runs" / "my run")
    assert "'my run'" in problem and "not a slug" in problem and "every push would fail" in problem
    # A --run-id in the command is the id instead of the directory's name.
    assert preflight_problems(_command("witness", "--run-id", "study-1"), tmp_path, tmp_path / "my run") == []
    (problem,) = preflight_problems(_command("witness", "--run-id", "a b"), tmp_path, tmp_path / "run")
    assert "--run-id 'a b' is not a slug" in problem


def test_preflight_names_an_id_the_witness_already_holds(tmp_path, witness):
    remote, work = witness
    publish(work, write_anchors(tmp_path / "first" / "study-1", 2))  # an earlier attempt, since deleted
    (problem,) = preflight_problems(_command("witness"), tmp_path, tmp_path / "runs" / "study-1")
    assert problem.startswith("the witness already holds anchors/study-1.jsonl (in ")
    assert "choose another run directory name" in problem
    (problem,) = preflight_problems(_command("witness", "--run-id", "study-1"), tmp_path, tmp_path / "runs" / "x")
    assert "anchors/study-1.jsonl" in problem
    # Pushed from another clone: seen once this clone has fetched it.
    other = clone(remote, tmp_path / "other")
    publish(other, write_anchors(tmp_path / "elsewhere" / "study-2", 1))
    assert preflight_problems(_command("witness"), tmp_path, tmp_path / "runs" / "study-2") == []
    git(work, "fetch", "--quiet", "origin")
    (problem,) = preflight_problems(_command("witness"), tmp_path, tmp_path / "runs" / "study-2")
    assert "anchors/study-2.jsonl (on origin/main as" in problem


def test_preflight_names_a_clone_every_push_would_fail_on(tmp_path):
    (problem,) = preflight_problems(_command("nowhere"), tmp_path, tmp_path / "runs" / "r")
    assert problem == (
        f"anchors.command: witness clone {tmp_path / 'nowhere'} does not exist (clone the "
        "witness remote there first): every push would fail"
    )
    # The module form, as the bundled designs write it, is the same script.
    assert preflight_problems(_command("nowhere", module=True), tmp_path, tmp_path / "runs" / "r") == [problem]
    # {run_dir} is expanded as the run will expand it.
    # {run_dir} is expanded as the run will expand it, and ".." taken beside the
    # run directory, which does not exist yet.
    (problem,) = preflight_problems(_command("{run_dir}/../w"), tmp_path, tmp_path / "runs" / "r")
    assert f"witness clone {(tmp_path / 'runs').resolve()}/w does not exist" in problem
    from confirmatory.anchors.witness import init_local_witness

    init_local_witness(tmp_path / "runs" / "wroot")
    assert preflight_problems(_command("{run_dir}/../wroot/clone"), tmp_path, tmp_path / "runs" / "r") == []


def test_a_git_lock_file_of_a_git_that_may_still_be_at_work_is_left_alone(tmp_path, witness):
    """Only a lock older than STALE_GIT_LOCK_S is taken as left by a killed
    git; a fresh one may be a git at work in the clone now."""
    _, work = witness
    (work / ".git" / "index.lock").write_bytes(b"")
    with pytest.raises(WitnessError, match="index.lock"):
        publish(work, write_anchors(tmp_path / "run", 2))
    assert (work / ".git" / "index.lock").exists()


def test_a_local_witness_whose_set_up_was_cut_short_is_protected_at_the_next_call(tmp_path):
    """The demo's witness: a bare repository made, then the set-up cut short
    (Ctrl-C) before its receive.deny* settings. The next call reused it
    unprotected, and a force-push then rewrote the witness's history."""
    from confirmatory.anchors.witness import init_local_witness

    root = tmp_path / "w"
    root.mkdir()
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(root / "witness.git")], check=True)
    work = init_local_witness(root)

    def setting(key: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root / "witness.git"), "config", "--get", key], capture_output=True, text=True
        ).stdout.strip()

    assert setting("receive.denyNonFastForwards") == "true"
    assert setting("receive.denyDeletes") == "true"
    assert (work / ".git").is_dir() and init_local_witness(root) == work
