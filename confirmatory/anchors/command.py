"""The anchor command's runner: one run of the design's ``anchors.command``
with the absolute path of anchors.jsonl appended (``run_anchor_command``).

The command runs in a session of its own (a kill reaches every process it
started), its output goes to a temporary file (never a pipe that nobody
reads), it is stopped past its timeout or past MAX_PUSH_OUTPUT_BYTES of
output, and what is kept of its output is a redacted tail of at most
OUTPUT_TAIL_CHARS. The anchorer's push worker and ``confirmatory
push-anchor`` both run it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from confirmatory.core.redaction import redact
from confirmatory.runtime import children

OUTPUT_TAIL_CHARS = 2000
# A push's output goes to a temporary file; past this many bytes of it the
# push is stopped (its process group) and is a failed push: else a command
# writing without end would fill the temporary directory for up to its timeout.
MAX_PUSH_OUTPUT_BYTES = 8 << 20


def run_anchor_command(
    command: Sequence[str],
    anchors_file: Path,
    cwd: Path,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    timeout: float | None = None,
) -> tuple[int, str]:
    """Run ``command + [anchors_file]``; (return code, redacted output tail).

    stdout and stderr go to one temporary file, not a pipe: a chatty command
    can then never block on a full pipe that nobody reads. The command gets
    its own session so that a kill reaches the git processes it started.
    127 means the command could not be started. After ``timeout`` seconds,
    or once it has written more than MAX_PUSH_OUTPUT_BYTES of output, the
    whole session is killed (``children.kill_group``); the return code is
    then the negative signal and the output ends with a note saying why."""
    rc, text, _ = _run_command(command, anchors_file, cwd, on_start, timeout)
    return rc, text


def _run_command(
    command: Sequence[str],
    anchors_file: Path,
    cwd: Path,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None,
    timeout: float | None,
) -> tuple[int, str, str | None]:
    """``run_anchor_command`` and why the runner killed the command (None: it
    was not; else children.TIMEOUT or children.OUTPUT)."""
    try:
        out = tempfile.TemporaryFile()
    except OSError as exc:
        # A temporary directory that cannot make a file (removed by a tmp
        # cleaner, read-only, out of space or inodes) is a failed push, not
        # a dead push worker: the run goes on and the next anchor retries.
        return (
            127,
            redact(f"could not start the anchor command {list(command)!r}: no temporary file for its output: {exc}"),
            None,
        )
    with out:
        try:
            proc = children.start([*command, str(anchors_file)], cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:
            return 127, redact(f"could not start the anchor command {list(command)!r}: {exc}"), None
        if on_start is not None:
            on_start(proc)
        stopped = children.wait_watching(proc, out, timeout=timeout, max_output=MAX_PUSH_OUTPUT_BYTES)
        rc = proc.returncode
        out.seek(0, os.SEEK_END)
        out.seek(max(0, out.tell() - 4 * OUTPUT_TAIL_CHARS))
        # Redact before cutting the tail, so a secret cut in half is still found.
        text = redact(out.read().decode("utf-8", errors="replace"))
    if stopped == children.TIMEOUT:
        note = f"\n[killed by the runner: the push ran longer than its timeout of {timeout:g} s]"
    elif stopped == children.OUTPUT:
        note = (
            f"\n[killed by the runner: the push wrote more than its bound of {MAX_PUSH_OUTPUT_BYTES:,} bytes of output]"
        )
    else:
        return rc, text[-OUTPUT_TAIL_CHARS:], None
    return rc, (text + note)[-OUTPUT_TAIL_CHARS:], stopped
