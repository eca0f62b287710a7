"""The witness: a git remote outside the run that holds every anchor with its time.

This module owns both ends of that remote:

* ``publish`` (what ``scripts/confirmatory_anchor.py`` runs as the design's
  ``anchors.command``) copies the complete lines of a run's anchors.jsonl to
  ``anchors/<run_id>.jsonl`` in a clone, commits and pushes to ``origin``;
* ``check_witness`` (what ``verify --witness`` calls) fetches the remote and
  checks that every committed version of that file is a prefix of the run's
  anchors.jsonl and that the newest one holds every anchor.

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
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from filelock import FileLock

from confirmatory.redaction import redact

# Used when the environment names nobody (GIT_AUTHOR_NAME / GIT_COMMITTER_NAME
# win over these -c settings, so an operator can still sign as themselves).
DEFAULT_AUTHOR = ("confirmatory anchor", "confirmatory-anchor@localhost")
_SLUG = re.compile(r"[A-Za-z0-9._-]+")
# The lines of a failed git command that say what went wrong ("fatal: ...",
# "error: ..."); the rest is advice ("Please make sure you have the correct
# access rights / and the repository exists.").
_PROBLEM = re.compile(r"(?i)^(?:fatal|error)\s*:\s*")
PROBLEM_CHARS = 300  # problem_line's bound: it goes into one-line messages
# Git variables that would point our commands at some other repository.
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE")
# A git lock file in the clone older than this, found while we hold the
# clone's own lock, was left by a git that was killed (SIGKILL: the OOM
# killer, a timed-out push's grace running out, a crash). Git never removes
# one, so every later commit would fail on it. Our git commands in the clone
# take milliseconds; a git of someone else's would hold one for this long
# only with an editor open.
STALE_GIT_LOCK_S = 120.0


class WitnessError(Exception):
    """The witness could not take the anchors; the message is one line."""


@dataclass(frozen=True, slots=True)
class Published:
    """What ``publish`` did: ``committed`` is False when the file was already there."""
    path: str
    lines: int
    committed: bool
    branch: str
    commit: str


# --- git plumbing -------------------------------------------------------------

def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    # A background push must never sit at a password prompt: it would hold the
    # one push slot of the run until the final anchor's timeout.
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    # We read git's messages (rejections) - keep them in one language.
    env["LC_ALL"] = "C"
    env["LANGUAGE"] = "C"
    return env


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    name, email = DEFAULT_AUTHOR
    cmd = ["git", "-c", f"user.name={name}", "-c", f"user.email={email}",
           "-c", "commit.gpgsign=false", "-C", str(repo), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_git_env(),
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise WitnessError(f"git {args[0]} failed in {repo}: {problem_line(proc.stderr or proc.stdout)}")
    return proc


def _git_bytes(repo: Path, *args: str) -> bytes | None:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                          env=_git_env(), stdin=subprocess.DEVNULL)
    return proc.stdout if proc.returncode == 0 else None


def problem_line(text: str, limit: int = PROBLEM_CHARS) -> str:
    """What a failed command said went wrong, as one redacted line of at most ``limit`` characters.

    git ends its messages with advice ("... and the repository exists."); the
    problem is in its ``fatal:`` / ``error:`` lines. Those are joined with
    "; " (prefix dropped, repeats once); without any, the last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked: list[str] = []
    for ln in lines:
        if _PROBLEM.match(ln):
            said = _PROBLEM.sub("", ln, count=1)
            if said and said not in picked:
                picked.append(said)
    out = redact("; ".join(picked) if picked else (lines[-1] if lines else "(no output)"))
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _open_clone(clone: Path) -> tuple[Path, str]:
    """The clone's git dir and current branch, or a WitnessError saying what is wrong."""
    clone = Path(clone)
    if not clone.is_dir():
        raise WitnessError(f"witness clone {clone} does not exist (clone the witness remote there first)")
    top = _git(clone, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != clone.resolve():
        raise WitnessError(f"witness clone {clone} is not the top of a git repository")
    remotes = _git(clone, "remote").stdout.split()
    if not remotes:
        raise WitnessError(f"witness clone {clone} has no remote (git remote add origin URL)")
    if "origin" not in remotes:
        raise WitnessError(f"witness clone {clone} has no remote named origin")
    head = _git(clone, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    gitdir = Path(_git(clone, "rev-parse", "--absolute-git-dir").stdout.strip())
    if head.returncode != 0:
        if (gitdir / "rebase-merge").is_dir() or (gitdir / "rebase-apply").is_dir():
            # A rebase stopped half way: the catch-up's (_catch_up) killed
            # mid-way, or one by hand. Every push fails until it is undone.
            # (the way out first: a push's output keeps a message's start)
            raise WitnessError(f"witness clone {clone} is mid-rebase: run `git -C {clone} rebase --abort`, "
                               "then push again (a rebase that was cut short: killed, or left half done)")
        raise WitnessError(f"witness clone {clone} has a detached HEAD; check out the witness branch")
    return gitdir, head.stdout.strip()


def complete_lines(data: bytes) -> bytes:
    """The bytes up to and including the last newline (a writer may be mid-line)."""
    return data[: data.rfind(b"\n") + 1]


def _check_run_id(run_id: str) -> str:
    if not is_slug(run_id):
        raise WitnessError(f"run id {run_id!r} is not a slug ([A-Za-z0-9._-]+); pass --run-id")
    return run_id


def is_slug(run_id: str) -> bool:
    """Whether ``run_id`` can name ``anchors/<run_id>.jsonl``."""
    return bool(_SLUG.fullmatch(run_id)) and run_id not in (".", "..")


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
            raise WitnessError(outcome if outcome != "behind" else
                               f"push of {branch} to origin was rejected twice as non-fast-forward; try again")
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
        print(f"confirmatory_anchor: note: removed git's lock file {path} ({age:.0f} s old, "
              "left by a git that was killed)", file=sys.stderr)


def _message(rel: str, data: bytes) -> str:
    n = data.count(b"\n")
    last = data[: -1].rsplit(b"\n", 1)[-1]
    try:
        t = float(json.loads(last)["t"])
        when = _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")
        stamp = f"last anchor t={t:.3f} ({when})"
    except (ValueError, KeyError, TypeError, OverflowError):
        stamp = "last anchor t unreadable"
    return f"{rel}: {n} lines, {stamp}"


def _committed(clone: Path, rev: str, rel: str) -> bytes | None:
    return _git_bytes(clone, "show", f"{rev}:{rel}")


def _commit(clone: Path, rel: str, data: bytes, message: str) -> bool:
    head = _committed(clone, "HEAD", rel) or b""
    if not data.startswith(head):
        # Most likely two runs share a directory name: refuse rather than
        # replace another run's anchors (the remote would refuse a rewrite anyway).
        raise WitnessError(f"{rel} in the witness is not a prefix of this anchors file "
                           "(another run with the same id?); pass --run-id")
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
    """"ok", "behind" (non-fast-forward: the remote has commits we lack), or an error line."""
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
        raise WitnessError(f"push rejected (non-fast-forward): the remote's {branch} changed {rel} "
                           "itself; refusing to merge another history of this run's anchors")
    if _committed(clone, "HEAD", rel) != data:
        raise WitnessError(f"push rejected (non-fast-forward): after catching up, {rel} "
                           "differs from this anchors file")


# --- before a run ----------------------------------------------------------------

def witness_args(command: Sequence[str]) -> list[str] | None:
    """The arguments ``command`` passes to this module's ``main`` (the anchors
    file excluded), or None when it does not run this module (by
    ``scripts/confirmatory_anchor.py`` or ``-m confirmatory.witness``)."""
    command = list(command)
    for i, arg in enumerate(command):
        if Path(arg).name == "confirmatory_anchor.py":
            return command[i + 1:]
        if arg == "-m" and command[i + 1:i + 2] == ["confirmatory.witness"]:
            return command[i + 2:]
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
    from confirmatory.runfiles import expand_command  # the placeholders as the run will expand them

    args = witness_args(expand_command(command, Path(run_dir)))
    if args is None:
        return []
    anchors_file = Path(run_dir).resolve() / "anchors.jsonl"
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stderr(quiet):
            parsed, _ = _parser().parse_known_args([*args, str(anchors_file)])
    except SystemExit:
        return [f"anchors.command: confirmatory_anchor.py would refuse its arguments "
                f"({problem_line(quiet.getvalue())}): every push would fail"]
    problems = []
    run_id: str | None = parsed.run_id or default_run_id(anchors_file)
    if not is_slug(run_id):
        if parsed.run_id:
            problems.append(f"anchors.command: --run-id {run_id!r} is not a slug ([A-Za-z0-9._-]+): "
                            "the witness script would refuse every push")
        else:
            problems.append(f"{run_dir}: the witness files a run's anchors under its run directory's "
                            f"name, and {run_id!r} is not a slug ([A-Za-z0-9._-]+): every push would "
                            "fail; name the run directory with letters, digits, '.', '_' and '-' only")
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
        for rev, where in (("HEAD", f"in {clone}'s {branch}"),
                           (f"refs/remotes/origin/{branch}", f"on origin/{branch} as {clone} last saw it")):
            if _git(clone, "cat-file", "-e", f"{rev}:{rel}", check=False).returncode == 0:
                problems.append(
                    f"the witness already holds {rel} ({where}): a run with the id {run_id!r} pushed "
                    "there before (an earlier attempt in a run directory of this name?), and every "
                    "push of this run would be refused as not a prefix of it; choose another run "
                    "directory name")
                break
    return problems


# --- check --------------------------------------------------------------------

# What ``main`` prints on success: ``anchors/<run_id>.jsonl: N lines ...``.
_PUBLISHED = re.compile(rf"^anchors/({_SLUG.pattern})\.jsonl: \d+ lines ")


def run_id_from_pushes(run_dir: Path) -> str | None:
    """The id the run's anchors were last filed under: a push line's
    ``run_id`` (``push-anchor --run-id ID``), else the file a successful push
    of this module's command said it wrote (so a copy of the run under
    another name still finds its anchors). None if no push says. Read
    leniently: a damaged line is skipped (verify reports the chain); the
    witness check still compares contents."""
    return filed_run_id(run_dir)[0]


def filed_run_id(run_dir: Path) -> tuple[str | None, bool]:
    """`run_id_from_pushes`, and whether that id was given (a push line's
    ``run_id``: ``push-anchor --run-id``) rather than read off a push's output."""
    found, given = None, False
    try:
        with open(Path(run_dir) / "anchor-pushes.jsonl", "rb") as fh:
            for raw in fh:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if not (isinstance(obj, dict) and obj.get("event") == "push"):
                    continue
                if isinstance(obj.get("run_id"), str):
                    found, given = obj["run_id"], True
                elif obj.get("rc") == 0 and isinstance(obj.get("output"), str):
                    said = next(filter(None, map(_PUBLISHED.match, obj["output"].splitlines())), None)
                    if said and is_slug(said.group(1)):
                        found, given = said.group(1), False
    except OSError:
        return None, False
    return found, given


def _run_id_from_manifest(run_dir: Path) -> str | None:
    """The --run-id the run's anchor command passed, if it passed one."""
    try:
        command = json.loads((run_dir / "manifest.json").read_bytes())["anchors"]["command"]
        i = list(command).index("--run-id")
        return str(command[i + 1])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data else []


def check_witness(clone: Path, run_dir: Path, run_id: str | None = None) -> list[str]:
    """Problems, one line each; empty when the witness holds every anchor unchanged.

    Fetches origin first. Every committed version of ``anchors/<run_id>.jsonl``
    on origin's branch (and on the history it had before the fetch, if the
    fetch was a forced update) must be a prefix of the run's anchors.jsonl,
    and the newest must hold every complete anchor line of the run."""
    run_dir = Path(run_dir)
    try:
        gitdir, branch = _open_clone(clone)
    except WitnessError as exc:
        return [str(exc)]
    candidates = (("the caller", run_id), ("anchor-pushes.jsonl", run_id_from_pushes(run_dir)),
                  ("the anchor command's --run-id", _run_id_from_manifest(run_dir)),
                  ("the run directory's name", run_dir.resolve().name))
    source, chosen = next((where, value) for where, value in candidates if value)
    try:
        run_id = _check_run_id(chosen)
    except WitnessError as exc:
        return [str(exc)]
    try:
        run_lines = _lines(complete_lines((run_dir / "anchors.jsonl").read_bytes()))
    except OSError as exc:
        return [f"cannot read {run_dir / 'anchors.jsonl'}: {exc.strerror or exc}"]
    rel = f"anchors/{run_id}.jsonl"
    tracking = f"refs/remotes/origin/{branch}"
    problems: list[str] = []

    def tip() -> str | None:
        proc = _git(clone, "rev-parse", "--quiet", "--verify", f"{tracking}^{{commit}}", check=False)
        return proc.stdout.strip() or None

    def shallow() -> bool:
        return _git(clone, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() == "true"

    before = tip()
    # A shallow clone (git clone --depth) holds only the newest versions: the
    # earlier ones, each of which must be a prefix of the run's, are fetched.
    unshallow = ["--unshallow"] if shallow() else []

    def remote_tip() -> str | None:
        # What origin's branch is now, asked without writing to the clone.
        proc = _git(clone, "ls-remote", "origin", f"refs/heads/{branch}", check=False)
        words = proc.stdout.split() if proc.returncode == 0 else []
        return words[0] if words else None

    # A clone already at origin's tip needs no fetch, and so no write: a
    # reviewer's clone on a read-only copy or mount is checked as it is.
    current = before is not None and not unshallow and remote_tip() == before
    fetch = subprocess.CompletedProcess([], 0) if current else _git(
        clone, "fetch", "--quiet", *unshallow, "origin", f"+refs/heads/{branch}:{tracking}", check=False)
    if fetch.returncode != 0:
        problems.append(f"could not fetch the witness ({problem_line(fetch.stderr)}); "
                        "checked the last fetched state")
    if shallow():
        problems.append(f"the witness clone is shallow (cloned with --depth) and its whole history could not "
                        f"be fetched: the versions of {rel} before its shallow history were not checked")
    after = tip()
    if after is None:
        return problems + [f"the witness has no branch {branch}"]
    tips = [after]
    if before and before != after and \
            _git(clone, "merge-base", "--is-ancestor", before, after, check=False).returncode != 0:
        problems.append(f"the witness's {branch} was rewritten: {before[:12]} is no longer in its "
                        f"history (now {after[:12]})")
        tips.append(before)

    log = _git(clone, "log", "--full-history", "--reverse", "--format=%H %ct", *tips, "--", rel).stdout
    versions = [ln.split() for ln in log.splitlines() if ln.strip()]
    if not versions:
        return problems + [f"the witness holds no {rel} (the run id {run_id!r} comes from "
                           f"{source}; if the witness files this run under another id, that id's "
                           "file is the one to check)"]
    longest = 0
    for sha, ct in versions:
        where = f"witness commit {sha[:12]} ({_dt.datetime.fromtimestamp(int(ct), _dt.timezone.utc):%Y-%m-%d %H:%M:%SZ})"
        content = _committed(clone, sha, rel)
        if content is None:
            problems.append(f"{where} deletes {rel}")
            continue
        problems.extend(_compare(where, rel, content, run_lines))
        n = content.count(b"\n")
        if n < longest:
            problems.append(f"{where}: {rel} shrank to {n} lines from {longest}")
        longest = max(longest, n)

    newest = _committed(clone, after, rel)
    held = len(_lines(complete_lines(newest))) if newest else 0
    if held < len(run_lines):
        problems.append(f"the witness holds {held} of the run's {len(run_lines)} anchor lines; "
                        f"anchors.jsonl line {held + 1} onward was never pushed")
    return problems


def _compare(where: str, rel: str, content: bytes, run_lines: list[bytes]) -> list[str]:
    if content and not content.endswith(b"\n"):
        return [f"{where}: {rel} ends with a partial line"]
    for i, line in enumerate(_lines(content)):
        if i >= len(run_lines):
            return [f"{where}: {rel} line {i + 1} is missing from the run's anchors.jsonl "
                    f"(it has {len(run_lines)} lines)"]
        if line != run_lines[i]:
            return [f"{where}: {rel} line {i + 1} differs from the run's anchors.jsonl"]
    return []


# --- command line ---------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="confirmatory_anchor.py",
        description="Commit a run's anchors.jsonl (complete lines) into a witness clone and push it.")
    parser.add_argument("--clone", required=True, type=Path, help="a clone of the witness remote")
    parser.add_argument("--run-id", default=None,
                        help="name of the file under anchors/ (default: the anchors file's directory name)")
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
        subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)],
                       check=True, env=_git_env(), capture_output=True)
    # At every call, not only at creation: a set-up cut short between the
    # init and these would otherwise leave an unprotected remote for good.
    for key in ("receive.denyNonFastForwards", "receive.denyDeletes"):
        _git(remote, "config", key, "true")
    if not (work / ".git").is_dir():
        subprocess.run(["git", "clone", "--quiet", str(remote), str(work)],
                       check=True, env=_git_env(), capture_output=True)
    return work


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
