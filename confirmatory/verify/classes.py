"""Invariant 2 recomputed: each attempt's class, action and signature as the rules give them.

Owns `ClassChecks`, the part of `model.ModelCheck` that runs `rules.decide`
again on each record, judged on the host.jsonl prefix its lane decided on
(its answer kept per distinct status, error, host verdict and reruns, at
most `DECIDED_KEPT` of them); the inconclusive stop, bounded by what the
lanes could have known when they decided (`known_counts`); and an attempt
classified on a host prefix without its completing sample only in the last
pass of its lane, in a model that had halted.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confirmatory.core import rules

if TYPE_CHECKING:
    from confirmatory.verify.context import RunContext
    from confirmatory.verify.report import Findings
    from confirmatory.verify.state import ModelState

DECIDED_KEPT = 4096
_INCONCLUSIVE = rules.Cls.INCONCLUSIVE


def rule_key(record: dict[str, Any]) -> tuple[Any, ...] | None:
    """What `rules.decide` reads of a record, as a hashable key (None: not cacheable)."""
    err, status = record.get("error"), record.get("status")
    if err is None:
        key: tuple[Any, ...] = (status, None)
    elif type(err) is not dict:
        return None
    elif not err:
        key = (status, 0)
    else:
        mro = err.get("mro")
        key = (
            status,
            err.get("type"),
            tuple(mro) if type(mro) is list else mro,
            err.get("status_code"),
            err.get("message"),
        )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def known_counts(attempts: list[tuple[str, float]], ended: dict[str, float]) -> list[tuple[int, int]]:
    """For the attempts of one inconclusive signature, (household, end) each,
    and the end time of each of their households: per attempt, how many of
    the households had ended before the attempt ended (its own counted: at
    most what its lane could have known when it decided), and how many had
    an attempt end before its own household ended (its own counted: at
    least that). ``len({h} | {x's household: ended[x's] < end})`` and
    ``len({h} | {x's household: x's end < ended[h]})``, by bisection over
    the households' end times and earliest attempt ends instead of a set
    per attempt (quadratic in a run whose runner never stopped); NaN is
    before and after nothing, as in those comparisons."""
    first_end: dict[str, float] = {}
    for h, end in attempts:
        if end == end and not first_end.get(h, end) < end:
            first_end[h] = end
    ends = sorted(t for t in (ended[h] for h in {h for h, _ in attempts}) if t == t)
    earliest = sorted(first_end.values())
    out = []
    for h, end in attempts:
        own = ended[h]
        lower = (bisect.bisect_left(ends, end) if end == end else 0) + (not own < end)
        upper = (bisect.bisect_left(earliest, own) if own == own else 0) + (not first_end.get(h, float("inf")) < own)
        out.append((lower, upper))
    return out


class ClassChecks:
    """`model.ModelCheck`'s checks of each attempt's class, action and signature."""

    # what model.ModelCheck sets that these checks read
    ctx: RunContext
    f: Findings
    st: ModelState
    log: str
    host_is: Callable[[float, float, int | None], bool]
    completion: Callable[[float], int | None]
    # (seq, attempt line, decision, reruns) of each inconclusive attempt
    incon: list[tuple[Any, ...]]
    decided: dict[tuple[Any, ...], rules.Decision]
    short: list[tuple[Any, ...]]  # (seq, lane, household, pass) of each judged on a short prefix
    lane_last: dict[int, tuple[str, int]]

    def classify(
        self, seq: int, a: dict[str, Any], r: dict[str, Any], reruns: int, start: float, end: float
    ) -> rules.Decision | None:
        """Class, action and signature recomputed with the rules. The rules read
        only the record's status and error and whether the host gave reasons,
        so their answer is kept per distinct (status, error, host, reruns).
        Returns the rules' decision (None: the record could not be classified)."""
        f, rl = self.f, self.ctx.rules
        d: rules.Decision | None
        try:
            # Judged on the host.jsonl prefix the lane decided on (its line
            # says how many lines); a prefix can only add "no sample after".
            limit = a.get("host_lines")
            if type(limit) is not int:
                limit = None
            host = self.host_is(start, end, limit)
            if host and limit is not None:
                # A prefix cut before the sample that completes the attempt:
                # allowed only at a halt (see short_prefixes) when the whole
                # log would have found the attempt clean.
                done = self.completion(end)
                if done is not None and done >= limit and not self.host_is(start, end, None):
                    if a.get("replaced") is not True:  # a continuation classified it on what the crash left
                        self.short.append((seq, a["lane"], a["household"], a["pass"]))
            key = rule_key(r)
            if key is None:
                d = rules.decide(
                    r,
                    ("host",) if host else (),
                    reruns_used=reruns,
                    max_reruns=rl.max_reruns,
                    precedence=rl.precedence,
                    class_lists=rl.class_lists,
                )
            else:
                key = (key, host, reruns)
                d = self.decided.get(key)
                if d is None:
                    d = rules.decide(
                        r,
                        ("host",) if host else (),
                        reruns_used=reruns,
                        max_reruns=rl.max_reruns,
                        precedence=rl.precedence,
                        class_lists=rl.class_lists,
                    )
                    if len(self.decided) >= DECIDED_KEPT:
                        self.decided.clear()  # bounded: distinct error messages must not grow memory
                    self.decided[key] = d
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            f.fail(2, self.log, seq, f"cannot classify: {exc}")
            return None
        f.checked[2] += 3
        if a["class"] != d.cls:
            # the host's reasons only for a violation the report keeps (the
            # verdict lists every mark in the window: thousands, in a forged log)
            reasons = list(self.ctx.host_verdict(start, end).reasons) if f.keeps(2) else "..."
            f.fail(2, self.log, seq, f"class {a['class']}, the rules give {d.cls} (host: {reasons})")
        if a["signature"] != d.signature:
            f.fail(2, self.log, seq, "signature is not the error's")
        if d.cls is _INCONCLUSIVE:
            self.incon.append((seq, a, d, reruns))
        elif a["action"] != d.action:
            f.fail(2, self.log, seq, f"action {a['action']}, the rules give {d.action}")
        return d

    def inconclusive(self) -> None:
        """The inconclusive stop, bounded by what the lanes could have known when they decided."""
        rl, ends = self.ctx.rules, self.st.ends
        by_sig: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for item in self.incon:
            by_sig[item[2].signature].append(item)
        for items in by_sig.values():
            counts = known_counts(
                [(a["household"], a["end"]) for _, a, _, _ in items],
                {x[1]["household"]: ends[x[1]["household"]].t for x in items},
            )
            for (seq, a, d, reruns), (lower, upper) in zip(items, counts):
                keep = rules.action_for(d.cls, reruns_used=reruns, max_reruns=rl.max_reruns)
                if lower > rl.inconclusive_limit:
                    allowed = {"stop"}
                elif upper <= rl.inconclusive_limit:
                    allowed = {str(keep)}
                else:
                    allowed = {"stop", str(keep)}
                self.f.expect(
                    2,
                    a["action"] in allowed,
                    self.log,
                    seq,
                    f"action {a['action']}, the inconclusive rule allows {sorted(allowed)}",
                )

    def short_prefixes(self) -> None:
        """A lane classifies on a host.jsonl prefix without the sample after
        its pass only when its model has halted (lanes.classify_pass), and
        then runs nothing more: so such an attempt is in its lane's last pass."""
        for seq, lane, h, pass_index in self.short:
            last = self.lane_last.get(lane)
            self.f.expect(
                2,
                self.st.halt_t < float("inf") and last == (h, pass_index),
                self.log,
                seq,
                "classified without a host sample after the attempt, yet the model had not stopped or its lane ran on",
            )
