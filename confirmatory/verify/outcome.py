"""How the run ended, as its chain-valid lines say: the report's outcome line.

A description for the reader of the report, not a check: the close line's
status and the run's stop causes, and per model its households ended of its
draw, how many unfinished, its own stop, and NO OBSERVATION when none of its
arm results is an observation.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, cast

from confirmatory.verify.state import ModelState


def outcome(
    run_events: list[tuple[int, dict[str, Any]]], states: list[ModelState], run_log_broken: bool = False
) -> str:
    """How the run ended, as its chain-valid lines say (a description for the
    reader of the report, not a check): the close line's status, the run's
    stop causes, and per model the households ended of its draw, how many
    unfinished, and its own stop. Where run.jsonl's chain breaks (or the
    run manifest it chains from changed), its lines past the break are not
    read: the close line may be among them, so that is what is said."""
    closes = [o for _, o in run_events if o.get("event") == "close"]
    if not closes and run_log_broken:
        head = (
            "no close line among run.jsonl's chain-valid lines (its chain breaks, or the manifest it "
            "chains from changed: see START HERE)"
        )
    elif not closes:
        head = "no close line (the runner did not end the run: killed, or still running)"
    else:
        head = str(closes[-1].get("status"))
        causes = sorted(
            {str(o.get("cause")) for _, o in run_events if o.get("event") == "stop" and o.get("cause") != "crash"}
        )
        if causes:
            head += f" ({', '.join(causes)})"
    conts = [o for _, o in run_events if o.get("event") == "continuation"]
    if conts:
        head += "; " + "; ".join(
            f"continued after a crash at {_utc(o.get('crash_t'))} ({o.get('reason')!r})" for o in conts
        )
    return "; ".join([head, *(st.outcome for st in states if st.outcome)])


def _utc(t: Any) -> str:
    """UTC ISO 8601 to the millisecond (a raw epoch otherwise means nothing to a reader)."""
    if type(t) not in (int, float) or t != t or abs(t) > 1e11:
        return repr(t)
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def model_outcome(st: ModelState) -> str:
    """One model's part of ``outcome``: households ended of its draw, how many
    unfinished, its own stop, and NO OBSERVATION when none of its ended
    households' arm results (the class of each arm's last attempt) is ok or
    the model's own, as the runner's end summary says it."""
    try:
        draw = cast(list[Any], st.manifest.get("draw")) if isinstance(st.manifest.get("draw"), list) else []
        unfinished = sum(1 for e in st.ends.values() if not e.finished and not e.crash)
        # a household a crash cut short and its next round, one household
        ended = len({h.partition("@")[0] for h, e in st.ends.items() if not e.crash})
        text = f"{st.name}: {ended} of {len(draw)} households ended"
        if unfinished:
            text += f" ({unfinished} unfinished)"
        own = [str(o.get("cause")) for _, o in st.events("stop") if o.get("scope") == "model"]
        if own:
            text += f", stopped ({own[0]})"
        if st.results and not st.observed:
            text += f", NO OBSERVATION: none of its {st.results} arm results is ok or the model's own"
        return text
    except Exception:  # noqa: BLE001 - a description only
        return ""
