"""``confirmatory push-anchor RUN_DIR [--run-id ID]``: after a run, run its
anchor command again on its anchors.jsonl and log the result to
anchor-pushes.jsonl (``push_anchor_command``), under the run's lock.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from confirmatory.anchors.check import filed_run_id
from confirmatory.anchors.command import run_anchor_command
from confirmatory.anchors.git import is_slug, problem_line
from confirmatory.anchors.witness import default_run_id, witness_args
from confirmatory.core.exits import EXIT_WITNESS
from confirmatory.records.chain import ChainError, log_seed, sha256_hex
from confirmatory.records.reader import check_chain, iter_lines
from confirmatory.records.writer import ChainWriter
from confirmatory.runtime.clock import Clock

# How long `push-anchor`'s push may take. It holds the run's lock meanwhile:
# a push that hung for good would have every later push-anchor refused as if
# the run were still running. As long as a run's push at the default interval.
PUSH_ANCHOR_TIMEOUT_S = 450.0


def push_anchor_command(run_dir: Path, run_id: str | None = None) -> int:
    """``confirmatory push-anchor RUN_DIR [--run-id ID]``: re-run the run's
    anchor command on its anchors.jsonl and log the result to anchor-pushes.jsonl.

    The command and its working directory come from manifest.json
    (``anchors.command``, ``anchors.cwd``; a relative cwd is taken from the run
    directory). ``run_id`` (only for confirmatory's witness script) files the
    anchors under another id; it is logged in the push line (``run_id``), and
    a later push-anchor and ``verify --witness`` use it again. Refused while
    a runner (or another push-anchor) holds the run's lock: two writers of
    anchor-pushes.jsonl would fork its chain. A run that never ended (no
    final anchor) is still pushed, with a note. The push is stopped after
    PUSH_ANCHOR_TIMEOUT_S. Exit 0 when the command returned 0, 6 when it did
    not, 1 when it could not be tried."""
    from confirmatory.records import lock as runlock

    run_dir = Path(run_dir)

    def fail(message: str) -> int:
        print(f"confirmatory push-anchor: {message}", file=sys.stderr)
        return 1

    manifest_path = run_dir / "manifest.json"
    try:
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
    except (OSError, ValueError) as exc:
        return fail(f"cannot read {manifest_path}: {exc}")
    config: Any = manifest.get("anchors") if isinstance(manifest, dict) else None
    command = config.get("command") if isinstance(config, dict) else None
    if not command or not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return fail(
            f"{manifest_path} records no anchor command (key anchors.command); "
            "this run was not configured to push its anchors to a witness"
        )
    cwd = run_dir / config.get("cwd", ".")
    if not cwd.is_dir():
        return fail(f"the anchor command's working directory {cwd} does not exist (anchors.cwd)")
    ours = witness_args(command) is not None
    if run_id is not None:
        if not ours:
            return fail(
                "--run-id applies only to confirmatory's witness script "
                f"(confirmatory_anchor.py); the recorded anchor command is {command!r}"
            )
        if not is_slug(run_id):
            return fail(f"--run-id {run_id!r} is not a slug ([A-Za-z0-9._-]+)")
    elif ours:
        # keep filing where the run's pushes filed: an earlier push-anchor
        # --run-id, or (a run directory renamed since) the file they wrote
        run_id, given = filed_run_id(run_dir)
        if run_id is not None and not given and run_id == default_run_id(run_dir / "anchors.jsonl"):
            run_id = None  # the command's own default: nothing to pass, nothing to record
        if run_id is not None:
            why = (
                "as the last push-anchor --run-id did"
                if given
                else "the id the run's earlier pushes filed its anchors under (the run directory's name "
                "has changed since)"
            )
            print(f"confirmatory push-anchor: using run id {run_id!r}, {why}", file=sys.stderr)

    lock_file = runlock.lock_path(run_dir)
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return fail(
            f"{run_dir} is still running: its runner (or another push-anchor) holds {lock_file}. "
            "The runner pushes its own anchors, and a second writer would fork "
            "anchor-pushes.jsonl's chain; run push-anchor after the run has ended"
        )
    except OSError as exc:
        return fail(f"cannot take the run's lock {lock_file}: {exc}")
    try:
        return _push_anchor_locked(run_dir, raw, command, cwd, run_id, fail)
    finally:
        lock.release()  # the file stays: removing a lock file breaks the lock (runlock.held)


def _last_anchor(path: Path) -> dict[str, Any] | None:
    """The last anchor line that reads (verify judges the chain; this is for a message)."""
    last = None
    try:
        for line in iter_lines(path):
            if isinstance(line.obj, dict) and line.obj.get("event") == "anchor":
                last = line.obj
    except Exception:  # noqa: BLE001 - a damaged or torn tail: what was read so far
        pass
    return last


def _push_anchor_locked(
    run_dir: Path, raw: bytes, command: list[str], cwd: Path, run_id: str | None, fail: Callable[[str], int]
) -> int:
    msha = sha256_hex(raw)
    anchors_path = run_dir / "anchors.jsonl"
    check = check_chain(anchors_path, log_seed(msha, "anchors.jsonl"))
    if check.lines == 0:
        return fail(f"{anchors_path} holds no anchor to push ({check.problem or 'empty'})")
    if not check.ok:
        print(f"confirmatory push-anchor: warning: {anchors_path}: {check.problem}", file=sys.stderr)
    last = _last_anchor(anchors_path)
    ended = last is not None and last.get("final") is True
    try:
        pushes = ChainWriter(run_dir / "anchor-pushes.jsonl", log_seed(msha, "anchor-pushes.jsonl"))
    except (ChainError, OSError) as exc:
        return fail(f"cannot append to anchor-pushes.jsonl: {exc}")
    extra: dict[str, Any] = {}
    if run_id is not None:
        # argparse takes the last --run-id: this one wins over one the design passed.
        command = [*command, "--run-id", run_id]
        extra["run_id"] = run_id
    with pushes:
        rc, output = run_anchor_command(command, anchors_path.resolve(), cwd, timeout=PUSH_ANCHOR_TIMEOUT_S)
        # A fresh Clock: the run's clock is gone; this line comes after all of its lines anyway.
        pushes.append(
            {
                "event": "push",
                "t": Clock().now(),
                "anchor_seq": check.lines - 1,
                "rc": rc,
                "output": output,
                "by": "push-anchor",
                **extra,
            }
        )
    if not ended:
        print(
            f"confirmatory push-anchor: note: the run never ended: anchors.jsonl has no final anchor "
            f"(its runner was killed or crashed?). The last anchor it wrote (line {check.lines - 1}) is "
            "what this push sends; verify will still fail the run (invariant 8).",
            file=sys.stderr,
        )
    if rc == 0:
        what = "the final anchor" if ended else "the last anchor (not final: the run never ended)"
        print(f"anchor {check.lines - 1} pushed ({what}); logged in anchor-pushes.jsonl")
        return 0
    print(f"confirmatory push-anchor: the anchor command returned {rc}: {problem_line(output)}", file=sys.stderr)
    if "pass --run-id" in output and witness_args(command) is not None:
        print(
            "  the witness holds another run's anchors under this id; file this run under a new one: "
            f"confirmatory push-anchor --run-id NEW_ID {shlex.quote(str(run_dir))}",
            file=sys.stderr,
        )
    return EXIT_WITNESS
