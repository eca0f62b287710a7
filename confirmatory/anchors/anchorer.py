"""Anchors: what the run fixes about its logs, and the pushes that take it off the machine.

Owns anchors.jsonl and anchor-pushes.jsonl (RECORDS.md). An anchor is one
line naming, for every other log, how many lines were acknowledged (fsynced),
the hash of the last one and the RFC 9162 Merkle root of the tree over them
(``root``: docs/ANCHORS.md), and the sha256 of every manifest. After each
anchor the design's ``anchors.command`` runs in the background with the
absolute path of anchors.jsonl appended (normally scripts/confirmatory_anchor.py,
which commits it to a witness remote; see docs/ANCHORS.md); its result is a
``push`` line in anchor-pushes.jsonl.

Neither anchors.jsonl nor anchor-pushes.jsonl is anchored: the final push's
result necessarily comes after the final anchor.

Threads: ``start`` runs one periodic anchor thread; pushes run on one push
worker, one command at a time. A push never blocks ``anchor()``: an anchor
made while a push runs is covered by the next push (the command always sends
the whole file). A push made during the run is killed after ``push_timeout_s``
(its process group), logged with that outcome and retried at the next anchor
like any failed push; the final anchor's push is bounded by ``finish``'s
``push_timeout`` instead: the time for pushes at the end of the run, which
an earlier push still under way spends too (``end_wait`` says what the end
waits on; ``final_push_problem`` what became of the final push). Any push that writes more than
MAX_PUSH_OUTPUT_BYTES of output is killed the same way. Each push's result is also kept for the progress
display (``push_failures``). Neither
thread is a daemon; each keeps its first exception in ``failure`` for the Run
to read.

Each push runs the command through ``confirmatory.anchors.command``;
``confirmatory push-anchor`` (``confirmatory.anchors.push``) runs it
again after the run.

With ``evidence`` (an ``anchors.evidence.Attester``), the push worker signs,
stamps and has witnesses cosign each anchor it takes before its push; an
anchor a later one overtook gets its signed checkpoint only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from filelock import FileLock, Timeout

from confirmatory.anchors.command import (
    MAX_PUSH_OUTPUT_BYTES,
    OUTPUT_TAIL_CHARS,
    _run_command,
)
from confirmatory.anchors.git import problem_line
from confirmatory.records.chain import log_seed, sha256_hex
from confirmatory.records.reader import check_chain, prefix_tree
from confirmatory.records.writer import ChainWriter
from confirmatory.runtime import children
from confirmatory.runtime.clock import Clock

if TYPE_CHECKING:
    from confirmatory.anchors.evidence import Attester

_UNANCHORED = frozenset({"anchors.jsonl", "anchor-pushes.jsonl"})
# A push during the run gets max(this, interval_s / 2) seconds (the design has
# no setting of its own): long enough for a slow remote, short enough that a
# hung push does not hold the one push slot for long.
MIN_PUSH_TIMEOUT_S = 60.0
# How long the final anchor's push may take (finish()'s default).
FINAL_PUSH_TIMEOUT_S = 120.0
# How long a Run whose main loop never ran (its set-up failed after the
# anchorer started) waits for pushes as it closes (Run.close); read then.
CLOSE_PUSH_TIMEOUT_S = 30.0
# The final anchor waits this long for the lock `resume` appends under, so
# that no resume request lands after it (see Anchorer._external_locks).
EXTERNAL_LOCK_WAIT_S = 10.0


# How a push ended, besides its rc: killed at the end of the run ("end"),
# killed at its own timeout or output bound (children.TIMEOUT / OUTPUT),
# never started ("not run"), or on its own (None).
_END, _NOT_RUN = "end", "not run"


def end_time(push_timeout: float) -> str:
    """How the records and the end summary name ``finish``'s ``push_timeout``."""
    return f"the time for pushes at the end of the run ({push_timeout:g} s)"


class EndWait(NamedTuple):
    """What ``finish`` waits on, for the progress display."""

    anchor_seq: int  # the anchor whose push is under way (or about to start)
    final_seq: int
    left_s: float  # at most this long more


class PushFailure(NamedTuple):
    """A failed push, for the progress display: unpacks as (anchor_seq, rc, tail)."""

    anchor_seq: int
    rc: int | None  # None: not run; negative: killed by that signal (timeout)
    tail: str  # one line: what went wrong (anchors.git.problem_line of the output)


class Anchorer:
    """Appends anchors and runs the anchor command after each (see the module docstring).

    ``logs``: relpath -> the writer of every log this process writes.
    ``external_logs``: logs other processes append to (resume.jsonl); they are
    read from disk and counted up to their last complete, chain-valid line. A
    mapping gives each one's seed; a plain sequence means run-level logs, whose
    seed comes from the run's manifest.json. A missing one is anchored as 0
    lines (head = its seed). ``manifests``: relpaths hashed as file bytes.
    ``push_timeout_s``: how long a push made during the run may take
    (default max(60 s, interval_s / 2)).
    """

    def __init__(
        self,
        run_dir: Path,
        clock: Clock,
        *,
        logs: Mapping[str, ChainWriter],
        external_logs: Sequence[str] | Mapping[str, str],
        manifests: Sequence[str],
        anchors: ChainWriter,
        pushes: ChainWriter,
        interval_s: float,
        command: Sequence[str] | None,
        cwd: Path,
        push_timeout_s: float | None = None,
        evidence: Attester | None = None,
    ) -> None:
        named = set(logs) | set(external_logs)
        if named & _UNANCHORED:
            raise ValueError(f"{sorted(named & _UNANCHORED)} cannot be anchored (module docstring)")
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if push_timeout_s is None:
            push_timeout_s = max(MIN_PUSH_TIMEOUT_S, float(interval_s) / 2)
        if push_timeout_s <= 0:
            raise ValueError(f"push_timeout_s must be > 0, got {push_timeout_s}")
        self._run_dir = Path(run_dir)
        self._clock = clock
        self._logs = dict(logs)
        self._external: dict[str, str | None] = (
            dict(external_logs) if isinstance(external_logs, Mapping) else dict.fromkeys(external_logs)
        )
        self._manifests = tuple(manifests)
        self._anchors = anchors
        self._pushes = pushes
        self._interval_s = float(interval_s)
        self._command = tuple(command) if command else None
        if evidence is not None and self._command is None:
            raise ValueError("evidence is attested by the push worker: it needs a command")
        self._evidence = evidence
        self._cwd = Path(cwd)
        self.failure: BaseException | None = None

        self._anchor_lock = threading.Lock()  # one anchor at a time, in seq order
        self._final_seq: int | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

        # Push worker state, all under _push_cv.
        self._push_cv = threading.Condition()
        self._pending: int | None = None  # newest anchor not yet handed to a push
        self._done_seq = -1  # anchor covered by the last finished push
        self._done_rc: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closing = False  # finish(): the worker exits once idle
        self._give_up = False  # finish() timed out: start nothing more
        self._give_up_why = ""  # why, as a push's output says it: "[killed by the runner: ...]"
        self._worker: threading.Thread | None = None
        self._finished = False
        self._final_rc: int | None = None
        self._pushing_seq: int | None = None  # the anchor whose push runs now
        self._end_killing = False  # the run's end killed the push under way (_give_up_why)
        self._end_timeout: float | None = None  # finish()'s push_timeout, once it waits
        self._end_deadline: float | None = None  # monotonic; None once it no longer waits
        self._last_push: tuple[int, int | None, str | None] | None = None  # (seq, rc, how) last logged
        # rc, output, how, spent on (the last push's _last_push, when the final push was not run)
        self._final_push: tuple[int | None, str, str | None, tuple[int, int | None, str | None] | None] | None = None
        self.push_timeout_s = float(push_timeout_s)
        # What the progress display reads (push_failures), under _push_cv.
        self._failures: list[PushFailure] = []  # every one: at most one push per anchor

    # --- anchors ----------------------------------------------------------

    def anchor(self, final: bool = False, extra: Mapping[str, object] | None = None) -> int:
        """Append an anchor line (with ``extra``'s fields) and hand it to the push worker; returns its seq."""
        with self._anchor_lock, self._external_locks() if final else contextlib.nullcontext():
            if self._final_seq is not None:
                raise RuntimeError("the final anchor is written; no anchor may follow it")
            logs = {}
            for rel, writer in self._logs.items():
                lines, head, root = writer.anchor_snapshot()  # acknowledged = fsynced lines only
                logs[rel] = {"lines": lines, "head": head, "root": root}
            for rel, seed in self._external.items():
                # Race: another process appends under its own lock; we may read
                # while it writes. check_chain stops before a partial last line,
                # so we count only complete lines. A complete line whose fsync
                # has not returned yet can still be counted: we cannot see
                # another process's fsync.
                path = self._run_dir / rel
                check = check_chain(path, seed or self._run_seed(rel))
                # The tree over the lines just counted: lines are only ever
                # appended, so the first check.lines are the ones checked.
                root = prefix_tree(path, check.lines).root().hex()
                logs[rel] = {"lines": check.lines, "head": check.head, "root": root}
            manifests = {rel: sha256_hex((self._run_dir / rel).read_bytes()) for rel in self._manifests}
            seq = self._anchors.snapshot()[0]  # we are its only appender, under our lock
            # t after the snapshots: every counted line existed by t.
            self._anchors.append(
                {
                    "event": "anchor",
                    "t": self._clock.now(),
                    "final": final,
                    "logs": logs,
                    "manifests": manifests,
                    **(extra or {}),
                }
            )
            if final:
                self._final_seq = seq
        self._request_push(seq)
        return seq

    @contextlib.contextmanager
    def _external_locks(self) -> Iterator[None]:
        """Hold the lock each external log is appended under (``<log>.lock``,
        as resume.request_resume takes it) while the final anchor is made.

        `resume` checks under that lock that no final anchor exists before it
        appends, so no request can land after the final anchor (an unanchored
        tail forever). A lock file this creates is removed again: a `resume`
        that opened it meanwhile locks the removed file and then finds the
        final anchor. If the lock stays taken (a `resume` stuck while holding
        it) the run still ends, after EXTERNAL_LOCK_WAIT_S."""
        with contextlib.ExitStack() as stack:
            for rel in self._external:
                path = self._run_dir / (rel + ".lock")
                existed = os.path.lexists(path)
                lock = FileLock(str(path))
                try:
                    lock.acquire(timeout=EXTERNAL_LOCK_WAIT_S)
                except (Timeout, OSError):
                    continue
                if not existed:
                    stack.callback(path.unlink, missing_ok=True)
                stack.callback(lock.release)
            yield

    def _run_seed(self, rel: str) -> str:
        return log_seed(sha256_hex((self._run_dir / "manifest.json").read_bytes()), rel)

    def start(self) -> None:
        """An anchor every ``interval_s`` on the anchor thread until ``finish``.

        The first anchor is the caller's: ``anchor()`` before any lane admits."""
        if self._ticker is not None:
            raise RuntimeError("the anchorer is already started")
        # Not a daemon: it writes records, and the Run joins it in finish().
        self._ticker = threading.Thread(target=self._tick, name="anchorer", daemon=False)
        self._ticker.start()

    def _tick(self) -> None:
        try:
            # Event.wait, not sleep: finish() sets the event and is not kept waiting.
            while not self._stop.wait(self._interval_s):
                self.anchor()
        except BaseException as exc:  # noqa: BLE001 - kept for the Run, not lost with the thread
            self.failure = self.failure or exc

    def finish(
        self, push_timeout: float = FINAL_PUSH_TIMEOUT_S, final: bool = True, extra: Mapping[str, object] | None = None
    ) -> int | None:
        """Stop the anchor thread, write the final anchor, wait up to
        ``push_timeout`` s for its push; its return code (None: no command).

        If the time runs out, the push under way is killed and logged with its
        return code; if that was an earlier anchor's push, the final anchor's
        push is logged as not run (rc null) and -1 is returned. Idempotent.
        Meanwhile ``end_wait`` says what it waits on; after, ``final_push_problem``
        says what became of the final push, as its lines in anchor-pushes.jsonl do."""
        if self._finished:
            return self._final_rc
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        try:
            # (final False: a run ending as a crash does, its last anchor not final)
            final = self.anchor(final=final, extra=extra)  # type: ignore[assignment]  # now the final anchor's seq
        except BaseException:
            self._abandon_pushes()  # a live non-daemon worker would keep the process up
            raise
        self._finished = True
        if self._command is None:
            return None
        with self._push_cv:
            self._end_timeout = float(push_timeout)
            self._end_deadline = time.monotonic() + push_timeout
            pushed = self._push_cv.wait_for(
                lambda: self._done_seq >= final or self._worker_gone(), timeout=push_timeout
            )
            self._closing = True
            self._end_deadline = None
            if not pushed:
                self._give_up, self._give_up_why = True, f"{end_time(push_timeout)} ran out"
            proc = self._proc
            if not pushed and proc is not None:
                self._end_killing = True
            self._push_cv.notify_all()
        if not pushed and proc is not None:
            children.kill_group(proc)
        if self._worker is not None:
            self._worker.join()
        with self._push_cv:
            ok = self._done_seq >= final and self._done_rc is not None
            self._final_rc = self._done_rc if ok else -1
        return self._final_rc

    def wait_pushed(self, seq: int, timeout: float) -> int | None:
        """Wait until a push covering anchor ``seq`` has ended; its rc, or None
        (no command, the wait ran out, or the push worker failed)."""
        if self._command is None:
            return None
        deadline = time.monotonic() + timeout
        with self._push_cv:
            while self._done_seq < seq and self.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._push_cv.wait(left)
            return self._done_rc if self._done_seq >= seq else None

    @property
    def end_wait(self) -> EndWait | None:
        """While ``finish`` waits for a push: which anchor's push runs (an
        earlier one's, still under way, spends the same time), and at most how
        long the wait lasts; else None. Thread-safe."""
        with self._push_cv:
            final, deadline = self._final_seq, self._end_deadline
            if final is None or deadline is None or self._done_seq >= final:
                return None
            seq = self._pushing_seq if self._pushing_seq is not None else final
            return EndWait(seq, final, max(0.0, deadline - time.monotonic()))

    @property
    def final_seq(self) -> int | None:
        """The final anchor's seq once it is written (no anchor follows it)."""
        return self._final_seq

    @property
    def final_push_problem(self) -> str:
        """After ``finish``: why the witness does not hold the final anchor,
        one line saying what the final anchor's push line records ("" when it
        returned 0, or there is no command)."""
        with self._push_cv:
            final, pushed, timeout = self._final_seq, self._final_push, self._end_timeout
        if self._command is None or final is None or not self._finished:
            return ""
        what = f"its push (anchor {final})"
        if pushed is None:
            why = f": the push worker failed ({self.failure!r})" if self.failure is not None else ""
            return f"{what} was not logged{why}"
        rc, output, how, spent = pushed
        ended = end_time(timeout if timeout is not None else FINAL_PUSH_TIMEOUT_S)
        if how == _NOT_RUN:
            if spent is None:
                return f"{what} was not run: {ended} ran out before it could start"
            seq, spent_rc, spent_how = spent
            killed = ", killed by the runner" if spent_how == _END else ""
            return f"{what} was not run: {ended} was spent on anchor {seq}'s push{killed} (rc {spent_rc})"
        if rc == 0:
            return ""
        if how == _END:
            return f"{what} was killed by the runner (rc {rc}): {ended} ran out"
        if how == children.OUTPUT:
            return (
                f"{what} was killed by the runner (rc {rc}) for writing more than "
                f"{MAX_PUSH_OUTPUT_BYTES:,} bytes of output"
            )
        return f"{what} returned {rc}: {problem_line(output)}"

    def _abandon_pushes(self) -> None:
        with self._push_cv:
            self._closing = self._give_up = True
            self._give_up_why = "the final anchor could not be written, and the run ended"
            proc = self._proc
            if proc is not None:
                self._end_killing = True
            self._push_cv.notify_all()
        if proc is not None:
            children.kill_group(proc)
        if self._worker is not None:
            self._worker.join()

    # --- the push worker ----------------------------------------------------

    def _worker_gone(self) -> bool:
        return self._worker is not None and not self._worker.is_alive()

    def _request_push(self, seq: int) -> None:
        if self._command is None:
            return
        with self._push_cv:
            # One push covers every anchor before it. max(): two anchors made
            # concurrently may reach here in the opposite order of their seqs.
            self._pending = seq if self._pending is None else max(self._pending, seq)
            if self._worker is None:
                self._worker = threading.Thread(target=self._push_loop, name="anchor-push", daemon=False)
                self._worker.start()
            self._push_cv.notify_all()

    def _push_loop(self) -> None:
        try:
            while True:
                with self._push_cv:
                    while self._pending is None and not self._closing:
                        self._push_cv.wait()
                    if self._pending is None:
                        return
                    seq, self._pending = self._pending, None
                    give_up = self._give_up
                    spent = self._last_push
                    self._pushing_seq = seq
                stopped: str | None = None
                if give_up:
                    rc, stopped = None, _NOT_RUN
                    if self._end_timeout is None:  # _abandon_pushes: no wait, nothing spent
                        output = f"not run: {self._give_up_why}"
                    elif spent is not None:
                        output = f"not run: {end_time(self._end_timeout)} was spent on anchor {spent[0]}'s push"
                    else:
                        output = f"not run: {end_time(self._end_timeout)} ran out before it could start"
                    if self._evidence is not None:  # every anchor has its checkpoint, stamped or not
                        self._evidence.attest(seq, evidence=False)
                else:
                    if self._evidence is not None:
                        # Signed, stamped and cosigned before its push: on this
                        # worker, never on a lane's path (anchors.evidence).
                        self._evidence.attest(seq, final=seq == self._final_seq)
                    assert self._command is not None
                    # The final anchor's push is bounded by finish()'s push_timeout.
                    timeout = None if seq == self._final_seq else self.push_timeout_s
                    rc, output, stopped = _run_command(
                        self._command, self._anchors.path.resolve(), self._cwd, self._started, timeout
                    )
                    with self._push_cv:
                        self._proc = None
                        killed, self._end_killing = self._end_killing, False
                    if killed and stopped is None and rc is not None and rc < 0:
                        stopped = _END
                        output = (output + f"\n[killed by the runner: {self._give_up_why}]")[-OUTPUT_TAIL_CHARS:]
                with self._push_cv:
                    self._note_push(seq, rc, output, stopped)  # by the time its line is written
                t = self._clock.now()
                self._pushes.append({"event": "push", "t": t, "anchor_seq": seq, "rc": rc, "output": output})
                with self._push_cv:
                    if seq == self._final_seq:
                        self._final_push = (rc, output, stopped, spent if stopped == _NOT_RUN else None)
                    self._last_push = (seq, rc, stopped)
                    self._done_seq, self._done_rc = seq, rc
                    self._pushing_seq = None
                    self._push_cv.notify_all()
        except BaseException as exc:  # noqa: BLE001 - kept for the Run; finish() stops waiting
            self.failure = self.failure or exc
            with self._push_cv:
                self._push_cv.notify_all()

    def _note_push(self, seq: int, rc: int | None, output: str, stopped: str | None) -> None:
        """Keep a failed push for the progress display; under _push_cv."""
        if rc == 0:
            return
        problem = problem_line(output)
        if stopped in (children.TIMEOUT, children.OUTPUT, _END):
            # What the command itself said, without the note saying why the
            # runner killed it (the line below says that once).
            said, note, _ = output.rpartition("\n[killed by the runner: ")
            problem = problem_line(said if note else output)
        if stopped == children.TIMEOUT:
            problem = f"timed out after {self.push_timeout_s:g} s and killed; its output: {problem}"
        elif stopped == _END:
            problem = f"killed: {self._give_up_why}; its output: {problem}"
        elif stopped == children.OUTPUT:
            problem = f"killed for writing more than {MAX_PUSH_OUTPUT_BYTES:,} bytes of output; its output: {problem}"
        self._failures.append(PushFailure(seq, rc, problem))

    # --- what the progress display reads (thread-safe) ------------------------

    @property
    def push_failures(self) -> tuple[PushFailure, ...]:
        """Every logged push that did not return 0 (failed, timed out, not run),
        in order, as (anchor_seq, rc, tail): a snapshot; index it from the
        length the previous call had to get the new ones."""
        with self._push_cv:
            return tuple(self._failures)

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._push_cv:
            self._proc = proc
            give_up = self._give_up
            if give_up:
                self._end_killing = True
        if give_up:
            # Race: finish() gave up between our taking the seq and the Popen;
            # it saw no process to kill, so we do it.
            children.kill_group(proc)
