"""Git plumbing both sides of the witness use: git run in a clone with an
environment that points it at no other repository and never prompts, the
one line a failed git command's output reduces to (``problem_line``),
opening a witness clone (``_open_clone``), and the run ids a run's anchors
are filed under (``anchors/<run_id>.jsonl``).

Nothing here commits, pushes or takes a lock: the push side is
``confirmatory.anchors.witness``, the read side ``confirmatory.anchors.check``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from confirmatory.core.redaction import redact

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
_GIT_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
)


class WitnessError(Exception):
    """The witness could not take the anchors; the message is one line."""


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
    cmd = [
        "git",
        "-c",
        f"user.name={name}",
        "-c",
        f"user.email={email}",
        "-c",
        "commit.gpgsign=false",
        "-C",
        str(repo),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_git_env(), stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise WitnessError(f"git {args[0]} failed in {repo}: {problem_line(proc.stderr or proc.stdout)}")
    return proc


def _git_bytes(repo: Path, *args: str) -> bytes | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, env=_git_env(), stdin=subprocess.DEVNULL
    )
    return proc.stdout if proc.returncode == 0 else None


def _committed(clone: Path, rev: str, rel: str) -> bytes | None:
    return _git_bytes(clone, "show", f"{rev}:{rel}")


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
            raise WitnessError(
                f"witness clone {clone} is mid-rebase: run `git -C {clone} rebase --abort`, "
                "then push again (a rebase that was cut short: killed, or left half done)"
            )
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
