"""The witness's read side: what ``verify --witness`` runs.

``check_witness`` fetches the witness remote into a clone (one already at
origin's tip is checked as it is, without a write) and checks that every committed version of ``anchors/<run_id>.jsonl`` is a
prefix of the run's anchors.jsonl and that the newest one holds every
anchor. ``filed_run_id`` / ``run_id_from_pushes`` read, from
anchor-pushes.jsonl, the id the run's anchors were filed under.

Of the anchors package this imports only ``confirmatory.anchors.git``:
nothing here commits, pushes, takes a file lock or reaches the runner.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import subprocess
from pathlib import Path

from confirmatory.anchors.git import (
    _SLUG,
    WitnessError,
    _check_run_id,
    _committed,
    _git,
    _open_clone,
    complete_lines,
    is_slug,
    problem_line,
)

# What the witness script prints on success (witness.main): ``anchors/<run_id>.jsonl: N lines ...``.
_PUBLISHED = re.compile(rf"^anchors/({_SLUG.pattern})\.jsonl: \d+ lines ")


CANNOT_CHECK = "cannot check: "  # a witness problem that is this machine's, not the run's


def run_id_from_pushes(run_dir: Path) -> str | None:
    """The id the run's anchors were last filed under: a push line's
    ``run_id`` (``push-anchor --run-id ID``), else the file a successful push
    of the witness script (witness.py) said it wrote (so a copy of the run under
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


def check_witness(clone: Path, run_dir: Path, run_id: str | None = None, held: list[bytes] | None = None) -> list[str]:
    """Problems, one line each; empty when the witness holds every anchor unchanged.

    Fetches origin first. Every committed version of ``anchors/<run_id>.jsonl``
    on origin's branch (and on the history it had before the fetch, if the
    fetch was a forced update) must be a prefix of the run's anchors.jsonl,
    and the newest must hold every complete anchor line of the run.
    ``held``: a list the newest version's complete lines are added to (for
    verify, which checks the Merkle roots they give against the logs)."""
    run_dir = Path(run_dir)
    try:
        gitdir, branch = _open_clone(clone)
    except WitnessError as exc:
        return [str(exc)]
    candidates = (
        ("the caller", run_id),
        ("anchor-pushes.jsonl", run_id_from_pushes(run_dir)),
        ("the anchor command's --run-id", _run_id_from_manifest(run_dir)),
        ("the run directory's name", run_dir.resolve().name),
    )
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
    fetch = (
        subprocess.CompletedProcess([], 0)
        if current
        else _git(clone, "fetch", "--quiet", *unshallow, "origin", f"+refs/heads/{branch}:{tracking}", check=False)
    )
    if fetch.returncode != 0:
        # what could not be checked here (a full disk, a remote out of reach)
        # is said as such, never as a violation of the run's records
        if tip() is None:
            return problems + [
                f"{CANNOT_CHECK}could not fetch the witness ({problem_line(fetch.stderr)}), and "
                "the clone holds no earlier fetch of it"
            ]
        problems.append(
            f"{CANNOT_CHECK}could not fetch the witness ({problem_line(fetch.stderr)}); checked the last fetched state"
        )
    if shallow():
        problems.append(
            f"the witness clone is shallow (cloned with --depth) and its whole history could not "
            f"be fetched: the versions of {rel} before its shallow history were not checked"
        )
    after = tip()
    if after is None:
        return problems + [f"the witness has no branch {branch}"]
    tips = [after]
    if (
        before
        and before != after
        and _git(clone, "merge-base", "--is-ancestor", before, after, check=False).returncode != 0
    ):
        problems.append(
            f"the witness's {branch} was rewritten: {before[:12]} is no longer in its history (now {after[:12]})"
        )
        tips.append(before)

    log = _git(clone, "log", "--full-history", "--reverse", "--format=%H %ct", *tips, "--", rel).stdout
    versions = [ln.split() for ln in log.splitlines() if ln.strip()]
    if not versions:
        return problems + [
            f"the witness holds no {rel} (the run id {run_id!r} comes from "
            f"{source}; if the witness files this run under another id, that id's "
            "file is the one to check)"
        ]
    longest = 0
    for sha, ct in versions:
        where = f"witness commit {sha[:12]} ({_dt.datetime.fromtimestamp(int(ct), _dt.UTC):%Y-%m-%d %H:%M:%SZ})"
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
    newest_lines = _lines(complete_lines(newest)) if newest else []
    if held is not None:
        held.extend(newest_lines)
    if len(newest_lines) < len(run_lines):
        problems.append(
            f"the witness holds {len(newest_lines)} of the run's {len(run_lines)} anchor lines; "
            f"anchors.jsonl line {len(newest_lines) + 1} onward was never pushed"
        )
    return problems


def _compare(where: str, rel: str, content: bytes, run_lines: list[bytes]) -> list[str]:
    if content and not content.endswith(b"\n"):
        return [f"{where}: {rel} ends with a partial line"]
    for i, line in enumerate(_lines(content)):
        if i >= len(run_lines):
            return [
                f"{where}: {rel} line {i + 1} is missing from the run's anchors.jsonl (it has {len(run_lines)} lines)"
            ]
        if line != run_lines[i]:
            return [f"{where}: {rel} line {i + 1} differs from the run's anchors.jsonl"]
    return []
