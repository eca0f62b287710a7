"""The lines a Run writes for one attempt's money and its record: ``RecordLines``,
a part of ``Run`` (its base class): the record file, a late cost, the spend
journal's call-cost line (docs/RUN.md "The spend journal").
"""

from __future__ import annotations

from typing import Any

from confirmatory.engine.modelstate import ModelState
from confirmatory.records.chain import ChainError
from confirmatory.records.writer import write_json_durable


class RecordLines:
    """Needs the Run's ``clock``, ``guard`` and ``fatal``."""

    def write_record(self, m: ModelState, record: dict[str, Any]) -> tuple[str, str]:
        from confirmatory.records.layout import record_relpath

        rel = record_relpath(record["household"], record["arm"], record["pass"], record.get("round", 0))
        sha = write_json_durable(m.model_dir / rel, record, guard=self.guard)
        return rel, sha

    def late_cost(self, m: ModelState, household: str, arm: str, pass_index: int, nusd: int,
                  *, reason: str | None = None, round_index: int = 0) -> None:
        """A cost outside any record: spent after a deadline, or by an attempt whose record was lost."""
        t = self.clock.now()
        line = {"event": "late-cost", "household": household, "arm": arm, "pass": pass_index,
                "cost_nusd": nusd, "t": t, **_round(round_index)}
        if reason:
            line["reason"] = reason
        m.run_log.append(line)

    def journal_cost(self, m: ModelState, household: str, arm: str, pass_index: int, nusd: int,
                     round_index: int = 0) -> None:
        """The spend journal: a cost is on disk (a fsynced ``call-cost`` line)
        before it counts toward the ceiling or its reply reaches the harness,
        so a runner killed mid-attempt loses no counted dollar (a continuation
        adds the journaled cost of every attempt the crash left without a
        record). A journal that cannot be written is the runner's failure:
        the run stops (runner-error); the cost is still counted."""
        line = {"event": "call-cost", "household": household, "arm": arm, "pass": pass_index,
                "cost_nusd": nusd, "t": self.clock.now(), **_round(round_index)}
        try:
            m.run_log.append(line)
        except (ChainError, OSError) as exc:
            self.fatal("runner-error", f"the spend journal models/{m.name}/run.jsonl could not be written: {exc}")


def _round(round_index: int) -> dict[str, int]:
    """The ``round`` field of a line of a household's later run (none for its first)."""
    return {"round": round_index} if round_index else {}
