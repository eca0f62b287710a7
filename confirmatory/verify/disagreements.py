"""A listing, not an invariant: every call whose record carries a ``cost_disagreement``.

The runner counts its own cost of each call (the usage by kind times the
model's frozen table, docs/LITELLM.md "What a call costs"); litellm's
``response_cost`` is kept beside it, and a call where the two differ by
more than 1 % (or litellm gives none) carries a ``cost_disagreement``
(docs/RECORDS.md). The spend is the runner's, so a disagreement breaks no
invariant; it is what a reviewer asks about litellm's price map, and verify
lists it: the count, and each call by the attempt line that names its record
(``models/<model>/run.jsonl:N``, 1-based), the record and the call's index.

Cheap on a run without any: a record's bytes are searched for a
disagreement object before anything is parsed, and a model's run.jsonl is
read only when one of its records has one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confirmatory.records.chain import open_regular

# a disagreement object, as the runner writes records (compact) or as a person would
_MARKS = (b'"cost_disagreement":{', b'"cost_disagreement": {')


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file, else None (a FIFO
    planted among the records is verify's to report, never to block on)."""
    try:
        with open_regular(path) as fh:
            return fh.readall()
    except OSError:  # NotRegularFile among them
        return None


def _attempt_lines(root: Path, model: str) -> dict[str, int]:
    """Each record path named by an attempt line of the model's run.jsonl -> its 1-based line (the last)."""
    where: dict[str, int] = {}
    text = _read_regular(root / "models" / model / "run.jsonl")
    if text is None:
        return where
    for n, raw in enumerate(text.splitlines(), 1):
        if b'"event":"attempt"' not in raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("record"), str):
            where[line["record"]] = n
    return where


def cost_disagreements(root: Path, models: Iterable[str]) -> dict[str, Any]:
    """``{"count": n, "calls": [...]}``: every call with a ``cost_disagreement``,
    in model, then record order. Each entry: ``model``, ``where`` (the attempt
    line, ``models/<m>/run.jsonl:N``, or the record when no line names it),
    ``record``, ``call`` (its index in the record's ``calls``), ``kind``,
    ``runner_nusd``, ``litellm_nusd``, ``reason``."""
    calls: list[dict[str, Any]] = []
    for model in models:
        records = root / "models" / model / "records"
        found: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = []
        for path in sorted(records.glob("*/*/*.json")):
            data = _read_regular(path)
            if data is None:
                continue
            if not any(mark in data for mark in _MARKS):
                continue
            try:
                record = json.loads(data)
            except ValueError:
                continue
            rel = path.relative_to(root / "models" / model).as_posix()
            for i, call in enumerate(record.get("calls") or [] if isinstance(record, dict) else []):
                gap = call.get("cost_disagreement") if isinstance(call, dict) else None
                if isinstance(gap, dict):
                    found.append((rel, i, call, gap))
        if not found:
            continue
        lines = _attempt_lines(root, model)
        for rel, i, call, gap in found:
            n = lines.get(rel)
            calls.append(
                {
                    "model": model,
                    "where": f"models/{model}/run.jsonl:{n}" if n is not None else f"models/{model}/{rel}",
                    "record": f"models/{model}/{rel}",
                    "call": i,
                    "kind": call.get("kind"),
                    "runner_nusd": gap.get("runner_nusd"),
                    "litellm_nusd": gap.get("litellm_nusd"),
                    "reason": gap.get("reason"),
                }
            )
    return {"count": len(calls), "calls": calls}


def listing_lines(listing: dict[str, Any] | None, shown: int = 3) -> list[str]:
    """verify's text: a line with the count, then the first ``shown`` calls."""
    if not listing:
        return []
    n = listing.get("count", 0)
    if not n:
        return ["cost disagreements: none (litellm's cost is within 1 % of the runner's on every call)"]
    rows = [
        f"cost disagreements (not violations: the spend counts the runner's cost): {n} call(s) where litellm's "
        "cost differs from the runner's by more than 1 % or is missing"
    ]
    for c in listing["calls"][:shown]:
        theirs = "none" if c["litellm_nusd"] is None else f"{c['litellm_nusd']} nUSD"
        rows.append(
            f"  {c['where']}: {c['record']} call {c['call']} ({c['kind']}): runner {c['runner_nusd']} nUSD, "
            f"litellm {theirs}"
        )
    if n > shown:
        rows.append(f"  ... {n} in all (verify --json lists every one)")
    return rows
