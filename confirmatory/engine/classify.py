"""How a lane classifies its attempts and acts on the class (a mixin of
confirmatory.engine.lanes.Lane): the pure rules (``rules.classify``,
``rules.decide``) on the attempt's record and the pass's host evidence, then
the consequence: a harness failure stops the model, an operator failure
pauses it, an inconclusive signature past its limit stops it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from confirmatory.core import rules
from confirmatory.core.rules import Cls, Decision
from confirmatory.engine.modelstate import Attempt, ModelState

if TYPE_CHECKING:  # pragma: no cover
    from confirmatory.design.model import Rules
    from confirmatory.engine.run import Run


class Classifier:
    """The classification half of a lane; ``Lane`` sets these attributes."""

    run: Run
    m: ModelState
    if TYPE_CHECKING:  # set by Lane.__init__; declared here for the type checker
        rules: Rules

    def decide_attempt(self, a: Attempt, host_reasons: tuple[str, ...]) -> Decision:
        r = self.rules
        with self.m.cond:
            households = {sig: set(hh) for sig, hh in self.m.inconclusive.items()}
        return rules.decide(
            a.record,
            host_reasons,
            reruns_used=a.reruns_used,
            max_reruns=r.max_reruns_per_arm,
            precedence=r.precedence,
            class_lists=self.run.class_lists,
            inconclusive_households=households,
            inconclusive_limit=r.inconclusive_household_limit,
        )

    def _early_consequence(self, a: Attempt) -> bool:
        """Act at once on a class the host evidence cannot change.

        A harness failure stops the model and an operator failure pauses it
        as soon as the attempt ends, not after the pass's host evidence
        (which can take ~3 sample intervals): no attempt should start on a
        broken harness or a revoked key meanwhile. Returns True when the
        household must end now.
        """
        with_host = rules.classify(
            a.record, ("probe",), precedence=self.rules.precedence, class_lists=self.run.class_lists
        )
        without = rules.classify(a.record, (), precedence=self.rules.precedence, class_lists=self.run.class_lists)
        if with_host != without:
            return False
        return self._consequence(a, without)

    def _consequence(self, a: Attempt, cls: Cls) -> bool:
        if a.acted:
            return cls == rules.Cls.HARNESS
        if cls == rules.Cls.HARNESS:
            a.acted = True
            cause = rules.stop_cause_for(cls, a.record) or "harness"
            if cause == "harness":  # a deadline was triggered by the watcher already
                self.run.trigger(
                    self.m,
                    "harness",
                    a.household,
                    a.arm,
                    a.pass_index,
                    detail=a.failure(self.m.name),
                    round_index=a.round_index,
                )
            return True
        if cls == rules.Cls.OPERATOR:
            a.acted = True
            self.run.pause(
                self.m, a.household, a.arm, a.pass_index, detail=a.failure(self.m.name), round_index=a.round_index
            )
        return False

    def classify_pass(self, ended: list[Attempt]) -> None:
        last_end = max(a.end for a in ended)
        monitor = self.run.host
        # When the model is stopping the wait is short (host.HALT_WAIT_S): the
        # lane stops fast, and classifies on the evidence written by then,
        # normally the sample it asked for. Each attempt line
        # says how many host.jsonl lines that was (`host_lines`), so verify
        # judges it on the same prefix; a prefix without a sample after the
        # attempt makes it `host` (its window is not known to be clean).
        monitor.wait_complete(last_end, self.m.halt)
        n = monitor.line_count()
        for a in ended:
            verdict = monitor.verdict(a.start, a.end, limit=n)
            a.host_lines = n
            self.classify_with(a, tuple(verdict.reasons))

    def classify_with(self, a: Attempt, host_reasons: tuple[str, ...]) -> None:
        rec_cls = rules.classify(
            a.record, host_reasons, precedence=self.rules.precedence, class_lists=self.run.class_lists
        )
        if rec_cls == rules.Cls.INCONCLUSIVE:
            sig = cast(str, rules.error_signature(a.record.get("error")))  # (inconclusive: it has an error)
            with self.m.cond:
                self.m.inconclusive.setdefault(sig, set()).add(a.household)
        d = self.decide_attempt(a, host_reasons)
        a.cls, a.action, a.signature = str(d.cls), str(d.action), d.signature
        if d.stop_cause == "inconclusive":
            with self.m.cond:
                n = len(self.m.inconclusive.get(cast(str, rules.error_signature(a.record.get("error"))), ()))
            detail = (
                f"{n} households failed inconclusively with one error signature (limit "
                f"{self.rules.inconclusive_household_limit}); the last: {a.failure(self.m.name)}"
            )
            self.run.trigger(
                self.m, "inconclusive", a.household, a.arm, a.pass_index, detail=detail, round_index=a.round_index
            )
        else:
            self._consequence(a, d.cls)
