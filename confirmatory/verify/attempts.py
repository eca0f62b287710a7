"""Each attempt's record and calls: invariants 1 and 5, and 2, 6, 7 and 9 attempt by attempt.

Owns `AttemptChecks`, the hot path of `model.ModelCheck`: one record file per
attempt, read with the fewest system calls and never past a file that is not
regular (a FIFO, a device), hashed as its line says, with the contract's
fields and calls, agreeing with its line (1); its calls inside the attempt,
widened by the wall clock's reported steps back (5), their costs its cost
(7); its status against its deadline, a budget_stop only after a halt (2);
no attempt starting after a halt, in a pause (6) or after a trigger (9). Also
that every record file has its attempt line, and every household folder of
records its household line (1).
"""

from __future__ import annotations

import bisect
import errno
import operator
import os
import re
import stat
from hashlib import sha256
from typing import TYPE_CHECKING, Any

from confirmatory.records.chain import NotRegularFile, parse_document
from confirmatory.records.layout import record_relpath
from confirmatory.records.readers import (
    CALL_FIELDS,
    CALL_KINDS,
    ERROR_FIELDS,
    RECORD_FIELDS,
    is_error_object,
)
from confirmatory.verify.classes import _INCONCLUSIVE
from confirmatory.verify.clocks import CALL_SLACK_S
from confirmatory.verify.report import UNDER_WAY
from confirmatory.verify.state import hkey, line_hkey

if TYPE_CHECKING:
    from pathlib import Path

    from confirmatory.core import rules
    from confirmatory.verify.context import RunContext
    from confirmatory.verify.report import Findings
    from confirmatory.verify.state import ModelState

_TMP_NAME = re.compile(r"\..+\.\d+\.\d+\.tmp")  # chain.write_json_durable's temporary file
_RECORD_NAME = re.compile(r"\d+(?:\.r([1-9]\d*))?\.json")  # <pass>.json, <pass>.r<round>.json
_RECORD_FIELD_SET, _CALL_FIELD_SET = frozenset(RECORD_FIELDS), frozenset(CALL_FIELDS)
# The fields a record shares with its attempt line, fetched from each at once.
_AS_LINE = ("household", "arm", "pass", "lane", "start", "end", "cost_nusd")
_SHARED_FIELDS = operator.itemgetter(*_AS_LINE)
_CALL_GET = operator.itemgetter("kind", "start", "end", "cost_nusd", "error")


_open, _read, _close, _fstat, _is_regular = os.open, os.read, os.close, os.fstat, stat.S_ISREG
_RDONLY = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the open
_FIRST_READ = 1 << 16  # a record's first read: most records fit (see ModelCheck.read_record)


def parse_object(data: bytes) -> Any:
    """``json.loads(data)``, or None where json.loads raises (the fast
    parser's object where it provably equals it: ``chain.parse_document``)."""
    try:
        return parse_document(data)
    except (ValueError, RecursionError):
        return None


def _regular(fd: int, rel: str) -> None:
    if not _is_regular(_fstat(fd).st_mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", rel)


def record_problem(r: dict[str, Any]) -> str:
    """What a record lacks of its fields, or what is wrong with its error (for the message)."""
    missing = [k for k in RECORD_FIELDS if k not in r]
    if missing:
        return f"record lacks {', '.join(missing)}"
    return f"record error is not null or an object with {', '.join(ERROR_FIELDS)} (type a string, mro a list)"


def call_problem(c: Any) -> str:
    if type(c) is not dict:
        return f"a call that is not an object ({type(c).__name__})"
    missing = [k for k in CALL_FIELDS if k not in c]
    if missing:
        return f"call lacks {', '.join(missing)}"
    if c["kind"] not in CALL_KINDS:
        return f"call kind {c['kind']!r} is not one of {list(CALL_KINDS)}"
    return f"call error is not null or an object with {', '.join(ERROR_FIELDS)} (type a string, mro a list)"


class AttemptChecks:
    """`model.ModelCheck`'s checks of each attempt: its record, its calls, its times."""

    # what model.ModelCheck sets (and the other families define) that these checks read
    ctx: RunContext
    f: Findings
    st: ModelState
    log: str
    root: Path
    root_s: str
    root_fd: int | None
    listed: set[str]
    any_back: bool
    ceiling_cut: float
    ceiling_top: float
    deadline_s: float
    deadline_short: float
    deadline_over: float
    halt_any: float
    pauses_kept: list[tuple[float, float]]
    pause_at: list[float]
    pause_until: list[float]
    deadline_keys: set[tuple[Any, ...]]

    if TYPE_CHECKING:

        def back_through(self, t: float) -> float: ...
        def past_deadline_excused(self, start: float, end: float) -> bool: ...
        def classify(
            self, seq: int, a: dict[str, Any], r: dict[str, Any], reruns: int, start: float, end: float
        ) -> rules.Decision | None: ...

    def attempt(self, seq: int, a: dict[str, Any], reruns: int) -> None:
        # The hot path: one record file per attempt. Messages are built only
        # for violations; checks are counted in bulk; the line's start and
        # end, read by most checks, are looked up once (and handed to classify).
        f, st, log = self.f, self.st, self.log
        checked = f.checked
        checked[1] += 2
        rel = a["record"]
        rnd = a.get("round", 0)
        if rel != (
            f"records/{a['household']}/{a['arm']}/{a['pass']}.json"
            if not rnd
            else record_relpath(a["household"], a["arm"], a["pass"], rnd)
        ):
            f.fail(
                1,
                log,
                seq,
                f"record path {rel} is not "
                f"{record_relpath(a['household'], a['arm'], a['pass'], rnd if type(rnd) is int else 0)}",
            )
        want = a["record_sha256"]
        try:
            data = self.read_record(rel, False)
            digest = sha256(data).hexdigest()
            if digest != want and len(data) < _FIRST_READ:
                data = self.read_record(rel, True)  # perhaps a short read: once more, to the end
                digest = sha256(data).hexdigest()
        except NotRegularFile:
            f.fail(1, log, seq, f"record {rel} is not a regular file")
            return
        except (OSError, TypeError, ValueError):
            f.fail(1, log, seq, f"record {rel} missing")
            return
        if digest != want:
            f.fail(1, log, seq, f"record {rel} does not hash as its line says")
            return
        r = parse_object(data)
        if not isinstance(r, dict):
            f.fail(1, f"models/{st.name}/{rel}", None, "record is not a JSON object")
            return
        checked[1] += 2
        start, end = a["start"], a["end"]
        if r.keys() >= _RECORD_FIELD_SET:
            # the common record: its fields fetched at once (the line's were
            # known to be there when the household was read)
            if r["error"] is not None and not is_error_object(r["error"]):
                f.fail(1, f"models/{st.name}/{rel}", None, record_problem(r))
            agrees = r["model"] == st.name and _SHARED_FIELDS(r) == _SHARED_FIELDS(a)
        else:
            f.fail(1, f"models/{st.name}/{rel}", None, record_problem(r))
            agrees = r.get("model") == st.name and tuple(r.get(k) for k in _AS_LINE) == _SHARED_FIELDS(a)
        if not agrees or r.get("round", 0) != a.get("round", 0):
            f.fail(1, f"models/{st.name}/{rel}", None, "record disagrees with its attempt line")
        calls = r.get("calls")
        if type(calls) is not list:
            if "calls" in r:  # (a record without it failed above)
                f.fail(1, f"models/{st.name}/{rel}", None, "record calls is not a list")
            calls = []
        # An attempt is an interval: its end is never before its start (the
        # runner reads both from the never-backwards clock, the end after).
        if not end >= start:
            f.fail(5, log, seq, f"attempt ends at {end}, before its start {start}")
        # Call times are raw time.time(); attempt times are the never-backwards
        # clock's. A wall clock that stepped back (the host log shows by how
        # much) can put raw times, even a call's end before its start, that
        # much earlier: widen the slack by the steps reported up to the sample
        # that completes this attempt, as the host rules do (DESIGN.md "Host
        # evidence"); a step reported later cannot excuse this attempt.
        back = self.back_through(a["end"]) if self.any_back else 0.0
        slack = CALL_SLACK_S + back
        lo, hi = start - slack, end + slack
        n_calls = len(calls)
        cost = known = upper = 0
        cut, top = self.ceiling_cut, self.ceiling_top
        for c in calls:
            if type(c) is dict and c.keys() >= _CALL_FIELD_SET:
                kind, cs, ce, cc, err = _CALL_GET(c)  # the common call: its fields at once
                if kind not in CALL_KINDS or (err is not None and not is_error_object(err)):
                    f.fail(1, f"models/{st.name}/{rel}", None, call_problem(c))
            else:
                f.fail(1, f"models/{st.name}/{rel}", None, call_problem(c))
                if type(c) is not dict:
                    continue
                cs, ce, cc = c.get("start"), c.get("end"), c.get("cost_nusd")
            # A call's end may precede its start by the step back and the
            # same slack: the clock measures a step from its own last
            # reading (confirmatory.runtime.clock), so a call begun after that
            # reading is set back further than host.jsonl reports (by the
            # time between them; a clean run fell short by 60 us)
            if not (
                isinstance(cs, (int, float))
                and isinstance(ce, (int, float))
                and lo <= cs <= hi
                and lo <= ce <= hi
                and cs <= ce + slack
            ):
                f.fail(
                    5,
                    f"models/{st.name}/{rel}",
                    None,
                    f"call {c.get('kind')} {cs}..{ce} outside the attempt {start}..{end}",
                )
            if type(cc) is not int:
                f.fail(7, f"models/{st.name}/{rel}", None, f"call cost_nusd {cc!r} is not an integer")
                cc = int(cc) if isinstance(cc, (int, float)) else 0
            elif cc < 0:  # spend.Spend.add refuses it: counted spend never goes down
                f.fail(7, f"models/{st.name}/{rel}", None, f"call cost_nusd {cc} is negative")
            cost += cc
            if type(ce) is float or type(ce) is int:
                if ce < cut:
                    known += cc
                if not ce > top:  # (a NaN end is taken, as a non-numeric one)
                    upper += cc
            else:
                upper += cc
        st.ceiling_known_nusd += known
        st.ceiling_upper_nusd += upper
        # the record's checks above and below, counted at once
        checked[1] += n_calls
        checked[5] += 1 + n_calls
        checked[7] += 1 + n_calls
        if cost != r.get("cost_nusd") or type(r.get("cost_nusd")) is not int:
            f.fail(7, f"models/{st.name}/{rel}", None, f"record cost {r.get('cost_nusd')} is not its calls' {cost}")
        d = self.classify(seq, a, r, reruns, start, end)
        # Invariant 2, the record's status against the rules it claims:
        # "deadline" (class harness) only for an attempt that reached its
        # deadline, any other only for one the watcher had not yet abandoned
        # (Run._tick: abandoned once time.monotonic() passes the deadline
        # after its start); "budget_stop" (class stopped: the runner ended the
        # conversation) only once its model or the run had stopped or the
        # ceiling was crossed.
        status = r.get("status")
        checked[2] += 1
        if status == "deadline":
            if not end - start >= self.deadline_s - self.deadline_short - back:
                f.fail(
                    2,
                    log,
                    seq,
                    f"a deadline record for an attempt of {end - start:.3f} s, under the "
                    f"deadline of {self.deadline_s:g} s",
                )
        elif end - start > self.deadline_over and not self.past_deadline_excused(start, end):
            f.fail(
                2,
                log,
                seq,
                f"attempt of {end - start:.3f} s, past the deadline of {self.deadline_s:g} s, "
                f"ended {status!r}, not abandoned",
            )
        if status == "budget_stop":
            checked[2] += 1
            if not end + CALL_SLACK_S >= self.halt_any:
                f.fail(
                    2,
                    log,
                    seq,
                    f"budget_stop at {end}, but its model had not stopped, nor the run, nor was the ceiling crossed",
                )
        checked[6] += 1 + len(st.pauses)
        checked[9] += 1
        if start > st.halt_t:
            f.fail(6, log, seq, f"attempt starts at {start} after a stop or the ceiling ({st.halt_t})")
        for crash_t, resumed_t in self.ctx.crash_windows:
            if crash_t < start < resumed_t:
                f.fail(
                    6,
                    log,
                    seq,
                    f"attempt starts at {start}, while its runner was dead (from the crash at "
                    f"{crash_t} to the continuation at {resumed_t})",
                )
        if self.pause_at and start == start:
            j = bisect.bisect_left(self.pause_at, start)  # the pauses begun before start
            i = bisect.bisect_right(self.pause_until, start, 0, j)  # ... from the first to end after it
            # the ends rise: every pause in [i, j) ends after start, so j - i
            # violations, only those the report keeps built (in a log of
            # pauses never resumed every later attempt is in each)
            k = i
            while k < j and f.keeps(6):
                p, resumed = self.pauses_kept[k]
                f.fail(6, log, seq, f"attempt starts at {start} during the pause from {p} to {resumed}")
                k += 1
            f.tally(6, j - k)
        if start > st.trigger_t:
            f.fail(9, log, seq, f"attempt starts at {start} after a trigger at {st.trigger_t}")
        cause = None if d is None else d.stop_cause
        if cause is not None or a["action"] == "stop":
            key = (line_hkey(a), a["arm"], a["pass"])
            if cause == "deadline":
                self.deadline_keys.add(key)
            if a["action"] == "stop":
                if cause is None and d is not None and d.cls is _INCONCLUSIVE:
                    cause = "inconclusive"
                st.stop_attempts[key] = (seq, a["class"], end, cause)

    def read_record(self, rel: str, to_eof: bool) -> bytes:
        """A record file's bytes, relative to the model folder: open, read,
        close, the fewest system calls. A first read shorter than its buffer
        is taken as the whole file (on Linux a regular file's read is short
        only at its end) unless ``to_eof``, which reads on until a read
        returns nothing: the caller asks again so when the bytes do not hash
        as their line says, for a read a signal cut short.

        Whatever reads on first makes sure it reads a regular file
        (`NotRegularFile` if not): a device never ends (/dev/zero), a FIFO
        may block. The open itself never blocks, and the first read of a
        FIFO returns at once (with nothing, with what it holds, or with
        BlockingIOError); only the bytes of a regular file can then pass."""
        if self.root_fd is None:
            fd = _open(os.path.join(self.root_s, rel), _RDONLY)
        else:
            fd = _open(rel, _RDONLY, dir_fd=self.root_fd)
        try:
            if to_eof:
                _regular(fd, rel)
            try:
                data = _read(fd, _FIRST_READ)
            except (BlockingIOError, IsADirectoryError):  # never so for a regular file
                _regular(fd, rel)
                raise
            if data and (to_eof or len(data) == _FIRST_READ):
                if not to_eof:
                    _regular(fd, rel)
                parts = [data]
                while chunk := _read(fd, 1 << 20):
                    parts.append(chunk)
                if len(parts) > 1:
                    data = b"".join(parts)
        finally:
            _close(fd)
        return data

    def dir_matches(self, h: str, listed: set[str], seq: int) -> None:
        """No file under records/<h>/ lacks an attempt line (a write's
        temporary file inside an arm folder, left by a crash, excepted).
        Each household's folder is listed once: a repeated household line
        (reported by its own check) does not list and report it again."""
        if h in self.listed:
            return
        self.listed.add(h)
        base = os.path.join(self.root_s, "records", h)
        extra = []
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            entries = []
        prefix = f"records/{h}/"
        for arm in entries:
            if arm.is_dir():
                folder = f"{prefix}{arm.name}/"
                for n in os.listdir(arm.path):
                    if folder + n not in listed and not (n[:1] == "." and _TMP_NAME.fullmatch(n)):
                        extra.append(folder + n)
            elif prefix + arm.name not in listed:
                extra.append(prefix + arm.name)
        self.f.checked[1] += 1
        for rel in sorted(extra):
            where, message = f"models/{self.st.name}/{rel}", "record file without an attempt line"
            if self.ctx.logs.stage == UNDER_WAY and self._round_under_way(h, rel):
                # a round with no household line yet: the crash's if h was under
                # way at it (verification._check_one), whichever round it is
                self.st.cut_short_records.append((h, where, None, message))
            else:
                self.f.fail(1, where, None, message)

    def _round_under_way(self, h: str, rel: str) -> bool:
        """Whether ``rel`` is a record of the round of ``h`` that has no
        household line while every round before it was cut short by a crash:
        the only round a crash can have left under way."""
        m = _RECORD_NAME.fullmatch(rel.rpartition("/")[2])
        if m is None:
            return False
        rnd = int(m.group(1) or 0)
        ends = self.st.ends
        if hkey(h, rnd) in ends:
            return False
        return all((e := ends.get(hkey(h, r))) is not None and e.crash for r in range(rnd))

    def orphans(self) -> None:
        base = self.root / "records"
        if base.is_dir():
            for h in sorted(os.listdir(base)):
                if h not in self.st.ends and self.ctx.logs.stage == UNDER_WAY:
                    self.st.cut_short_records.append(
                        (
                            h,
                            f"models/{self.st.name}/records/{h}",
                            None,
                            "records of a household without a household line",
                        )
                    )
                elif h not in self.st.ends:
                    self.f.fail(
                        1, f"models/{self.st.name}/records/{h}", None, "records of a household without a household line"
                    )
