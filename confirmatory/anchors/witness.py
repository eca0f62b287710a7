"""The witness: a git remote outside the run that holds every anchor with its time.

This module is its push side:

* ``publish`` (what ``scripts/confirmatory_anchor.py`` and
  ``python -m confirmatory.anchors.witness`` run as the design's
  ``anchors.command``) copies the complete lines of a run's anchors.jsonl to
  ``anchors/<run_id>.jsonl`` in a clone, commits and pushes to ``origin``;
* ``preflight_problems`` says, before a run, why every push of it would fail;
* ``init_local_witness`` makes a witness on this machine (the demo, the tests).

The read side, ``check_witness`` (what ``verify --witness`` calls), is
``confirmatory.anchors.check``; the git plumbing both use is
``confirmatory.anchors.git``.

The file is only ever extended, so a remote that refuses non-fast-forward
updates and deletions (docs/ANCHORS.md) keeps each anchor once pushed. Errors
are one line naming the problem, because the runner keeps the tail of this
command's output in anchor-pushes.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from filelock import FileLock

from confirmatory.anchors.git import (
    WitnessError,
    _check_run_id,
    _committed,
    _git,
    _git_env,
    _open_clone,
    complete_lines,
    is_slug,
    problem_line,
)

# A git lock file in the clone older than this, found while we hold the
# clone's own lock, was left by a git that was killed (SIGKILL: the OOM
# killer, a timed-out push's grace running out, a crash). Git never removes
# one, so every later commit would fail on it. Our git commands in the clone
# take milliseconds; a git of someone else's would hold one for this long
# only with an editor open.
STALE_GIT_LOCK_S = 120.0


@dataclass(frozen=True, slots=True)
class Published:
    """What ``publish`` did: ``committed`` is False when the file was already there."""

    path: str
    lines: int
    committed: bool
    branch: str
    commit: str


def default_run_id(anchors_file: Path) -> str:
    """The id ``publish`` files a run under without --run-id: its run directory's name."""
    return Path(anchors_file).resolve().parent.name


# --- publish ------------------------------------------------------------------


def publish(clone: Path, anchors_file: Path, run_id: str | None = None) -> Published:
    """Commit the complete lines of ``anchors_file`` to ``anchors/<run_id>.jsonl``
    in ``clone`` and push the clone's current branch to origin."""
    anchors_file = Path(anchors_file)
    run_id = _check_run_id(run_id or default_run_id(anchors_file))
    try:
        data = complete_lines(anchors_file.read_bytes())
    except OSError as exc:
        raise WitnessError(f"cannot read anchors file {anchors_file}: {exc.strerror or exc}") from None
    if not data:
        raise WitnessError(f"anchors file {anchors_file} has no complete line yet")
    gitdir, branch = _open_clone(clone)
    rel = f"anchors/{run_id}.jsonl"
    # Two runs started from one design directory share the clone ("../witness");
    # without this lock their add/commit would collide on the index lock.
    with FileLock(str(gitdir / "confirmatory-anchor.lock")):
        _clear_stale_git_locks(gitdir, branch)
        committed = _commit(clone, rel, data, _message(rel, data))
        outcome = _push(clone, branch)
        if outcome == "behind":
            # Someone else pushed to the branch (another run's file): replay our
            # commits on theirs once. Our commits only touch our own file.
            _catch_up(clone, branch, rel, data)
            outcome = _push(clone, branch)
        if outcome != "ok":
            raise WitnessError(
                outcome
                if outcome != "behind"
                else f"push of {branch} to origin was rejected twice as non-fast-forward; try again"
            )
    commit = _git(clone, "rev-parse", "HEAD").stdout.strip()
    return Published(rel, data.count(b"\n"), committed, branch, commit)


def _clear_stale_git_locks(gitdir: Path, branch: str) -> None:
    """Remove the lock files a commit takes (index, HEAD, the branch) that a
    killed git left behind (STALE_GIT_LOCK_S); under the clone's lock."""
    now = time.time()
    for rel in ("index.lock", "HEAD.lock", f"refs/heads/{branch}.lock"):
        path = gitdir / rel
        try:
            age = now - path.lstat().st_mtime
            if age <= STALE_GIT_LOCK_S:
                continue  # a git at work now (or killed just now: the next push removes it)
            path.unlink()
        except OSError:
            continue  # none there (the usual case), or not ours to remove: git says so below
        print(
            f"confirmatory_anchor: note: removed git's lock file {path} ({age:.0f} s old, "
            "left by a git that was killed)",
            file=sys.stderr,
        )


def _message(rel: str, data: bytes) -> str:
    n = data.count(b"\n")
    last = data[:-1].rsplit(b"\n", 1)[-1]
    try:
        t = float(json.loads(last)["t"])
        when = _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="seconds")
        stamp = f"last anchor t={t:.3f} ({when})"
    except (ValueError, KeyError, TypeError, OverflowError):
        stamp = "last anchor t unreadable"
    return f"{rel}: {n} lines, {stamp}"


def _commit(clone: Path, rel: str, data: bytes, message: str) -> bool:
    head = _committed(clone, "HEAD", rel) or b""
    if not data.startswith(head):
        # Most likely two runs share a directory name: refuse rather than
        # replace another run's anchors (the remote would refuse a rewrite anyway).
        raise WitnessError(
            f"{rel} in the witness is not a prefix of this anchors file (another run with the same id?); pass --run-id"
        )
    target = clone / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    _git(clone, "add", "--", rel)
    if _git(clone, "diff", "--cached", "--quiet", "--", rel, check=False).returncode == 0:
        return False  # already committed: the push below may still be owed
    _git(clone, "commit", "--no-verify", "--quiet", "-m", message, "--", rel)
    return True


def _push(clone: Path, branch: str) -> str:
    """ "ok", "behind" (non-fast-forward: the remote has commits we lack), or an error line."""
    proc = _git(clone, "push", "--porcelain", "origin", f"HEAD:refs/heads/{branch}", check=False)
    if proc.returncode == 0:
        return "ok"
    text = proc.stdout + "\n" + proc.stderr
    for line in text.splitlines():
        # porcelain: "!<TAB>HEAD:refs/heads/main<TAB>[rejected] (fetch first)"
        if line.startswith("!\t") and "[rejected]" in line:
            return "behind"
        if line.startswith("!\t") and "[remote rejected]" in line:
            reason = line.split("[remote rejected]", 1)[1].strip()
            return f"the witness remote refused the push of {branch}: {reason}"
    return f"push of {branch} to origin failed: {problem_line(proc.stderr or proc.stdout)}"


def _catch_up(clone: Path, branch: str, rel: str, data: bytes) -> None:
    fetch = _git(clone, "fetch", "--quiet", "origin", f"refs/heads/{branch}", check=False)
    if fetch.returncode != 0:
        raise WitnessError(f"push rejected (non-fast-forward) and fetch failed: {problem_line(fetch.stderr)}")
    rebase = _git(clone, "rebase", "--quiet", "FETCH_HEAD", check=False)
    if rebase.returncode != 0:
        _git(clone, "rebase", "--abort", check=False)
        raise WitnessError(
            f"push rejected (non-fast-forward): the remote's {branch} changed {rel} "
            "itself; refusing to merge another history of this run's anchors"
        )
    if _committed(clone, "HEAD", rel) != data:
        raise WitnessError(f"push rejected (non-fast-forward): after catching up, {rel} differs from this anchors file")


# --- before a run ----------------------------------------------------------------


def witness_args(command: Sequence[str]) -> list[str] | None:
    """The arguments ``command`` passes to this module's ``main`` (the anchors
    file excluded), or None when it does not run this module (by
    ``scripts/confirmatory_anchor.py`` or ``-m confirmatory.anchors.witness``)."""
    command = list(command)
    for i, arg in enumerate(command):
        if Path(arg).name == "confirmatory_anchor.py":
            return command[i + 1 :]
        if arg == "-m" and command[i + 1 : i + 2] == ["confirmatory.anchors.witness"]:
            return command[i + 2 :]
    return None


def preflight_problems(command: Sequence[str] | None, cwd: Path, run_dir: Path) -> list[str]:
    """Why every push of a run into ``run_dir`` would fail, one line each naming
    what to do; for ``runmain.preflight``, before the run directory exists.

    ``command`` is the design's ``anchors.command`` as written (placeholders
    unexpanded), ``cwd`` the directory it runs in (the design's). Empty when
    there is no command or it is not this module's script: then nothing is
    known about how it files anchors. Otherwise it names a clone that is not
    usable (``_open_clone``), a run id (``--run-id``, else the run
    directory's name) that is not a slug, and a run id the witness already
    holds a file for (an earlier run of that id: the first push would find
    that file is not a prefix of this run's anchors, and so would every
    other). Nothing is fetched: a file pushed by another clone since this
    clone last fetched or pushed is not seen here (publish still refuses to
    overwrite it)."""
    if not command:
        return []
    from confirmatory.records.rundir import (
        expand_command,  # the placeholders as the run will expand them
    )

    args = witness_args(expand_command(command, Path(run_dir)))
    if args is None:
        return []
    anchors_file = Path(run_dir).resolve() / "anchors.jsonl"
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stderr(quiet):
            parsed, _ = _parser().parse_known_args([*args, str(anchors_file)])
    except SystemExit:
        return [
            f"anchors.command: confirmatory_anchor.py would refuse its arguments "
            f"({problem_line(quiet.getvalue())}): every push would fail"
        ]
    problems = []
    run_id: str | None = parsed.run_id or default_run_id(anchors_file)
    if not is_slug(cast(str, run_id)):  # (a str here: the default is one)
        if parsed.run_id:
            problems.append(
                f"anchors.command: --run-id {run_id!r} is not a slug ([A-Za-z0-9._-]+): "
                "the witness script would refuse every push"
            )
        else:
            problems.append(
                f"{run_dir}: the witness files a run's anchors under its run directory's "
                f"name, and {run_id!r} is not a slug ([A-Za-z0-9._-]+): every push would "
                "fail; name the run directory with letters, digits, '.', '_' and '-' only"
            )
        run_id = None
    # Lexically normalized: "{run_dir}/../x" names x beside a run directory
    # that does not exist yet (the OS cannot walk through it before then).
    clone = Path(os.path.normpath(Path(cwd) / parsed.clone))
    try:
        _, branch = _open_clone(clone)
    except WitnessError as exc:
        return problems + [f"anchors.command: {exc}: every push would fail"]
    if run_id is not None:
        rel = f"anchors/{run_id}.jsonl"
        for rev, where in (
            ("HEAD", f"in {clone}'s {branch}"),
            (f"refs/remotes/origin/{branch}", f"on origin/{branch} as {clone} last saw it"),
        ):
            if _git(clone, "cat-file", "-e", f"{rev}:{rel}", check=False).returncode == 0:
                problems.append(
                    f"the witness already holds {rel} ({where}): a run with the id {run_id!r} pushed "
                    "there before (an earlier attempt in a run directory of this name?), and every "
                    "push of this run would be refused as not a prefix of it; choose another run "
                    "directory name"
                )
                break
    return problems


# --- command line ---------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="confirmatory_anchor.py",
        description="Commit a run's anchors.jsonl (complete lines) into a witness clone and push it.",
    )
    parser.add_argument("--clone", required=True, type=Path, help="a clone of the witness remote")
    parser.add_argument(
        "--run-id", default=None, help="name of the file under anchors/ (default: the anchors file's directory name)"
    )
    parser.add_argument("anchors_file", type=Path, metavar="RUN_ANCHORS_FILE")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        done = publish(args.clone, args.anchors_file, args.run_id)
    except WitnessError as exc:
        print(f"confirmatory_anchor: {exc}", file=sys.stderr)
        return 1
    what = "committed and pushed" if done.committed else "already committed; pushed"
    print(f"{done.path}: {done.lines} lines {what} ({done.branch} {done.commit[:12]})")
    return 0


def init_local_witness(root: Path) -> Path:
    """A protected bare repository at ``root/witness.git`` and a clone at ``root/clone``.

    For the demo and the tests: a witness on the same machine proves less
    than one the run machine cannot rewrite (docs/ANCHORS.md), but it runs
    the same push path. Returns the clone; an existing one is reused.
    """
    root = Path(root)
    remote, work = root / "witness.git", root / "clone"
    root.mkdir(parents=True, exist_ok=True)
    if not remote.exists():
        subprocess.run(
            ["git", "init", "--quiet", "--bare", "-b", "main", str(remote)],
            check=True,
            env=_git_env(),
            capture_output=True,
        )
    # At every call, not only at creation: a set-up cut short between the
    # init and these would otherwise leave an unprotected remote for good.
    for key in ("receive.denyNonFastForwards", "receive.denyDeletes"):
        _git(remote, "config", key, "true")
    if not (work / ".git").is_dir():
        subprocess.run(
            ["git", "clone", "--quiet", str(remote), str(work)], check=True, env=_git_env(), capture_output=True
        )
    return work


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
