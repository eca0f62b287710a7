"""Exceptions that cross module boundaries, and how an exception is written down.

Two families live here:

* outcomes of a conversation that the harness or the runner raise on purpose
  (``BudgetStop``, ``AttemptDeadline``, the ``ModelFault`` family): the
  classifier recognises them by their recorded qualified names;
* ``describe_exception``: the one function that turns any raised exception
  into the ``error`` object of a record (type, MRO, message, status), so
  that the verifier can classify it again without importing litellm.

Pure: no I/O, no threads, no litellm.
"""

from __future__ import annotations

import re
from typing import Any

from confirmatory.core.redaction import redact


class BudgetStop(Exception):
    """Raised inside a conversation at its next turn once the runner ends it.

    Reasons: the ceiling was crossed, the model or the run stopped, or the
    attempt was abandoned past its deadline. The attempt's record gets
    ``status: budget_stop`` (class ``stopped``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"conversation ended by the runner: {reason}")
        self.reason = reason


class AttemptDeadline(Exception):
    """The attempt ran past ``attempt_deadline_s`` and was abandoned."""


# Recorded as ``confirmatory.AttemptDeadline`` (RECORDS.md), wherever it is defined.
AttemptDeadline.__module__ = "confirmatory"
AttemptDeadline.__qualname__ = "AttemptDeadline"


class ModelFault(Exception):
    """The model's own doing (class ``model``): raised by a harness."""


class TruncationSurvived(ModelFault):
    """A turn was still truncated after the one escalation."""


class EscalatedTimeout(ModelFault):
    """The escalated request after a truncated turn timed out."""


class UnparseableAnswer(ModelFault):
    """The model's final answer could not be parsed."""


class HarnessContractError(Exception):
    """The harness broke the protocol (returned something that is not a result)."""


class UnreportedCall(HarnessContractError):
    """``spend.checkpoint`` found a call whose cost the harness left unreported
    (the lane then counts it and records what it was)."""


def qualified_name(cls: type) -> str:
    """``module.QualName`` with ``builtins.`` kept, as records store it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a provider asked for with its refusal, in seconds: its
    ``retry-after-ms`` header (OpenAI, Azure) or ``retry-after`` given in
    seconds (a date there is not read), from the response headers litellm
    keeps on its exception (``litellm_response_headers``, else the httpx
    ``response``), on ``exc`` or its cause; failing those, the
    ``RetryInfo.retryDelay`` of a Google error body (Gemini sends its wait
    only there, ``"retryDelay": "1s"``), as litellm puts the body in its
    message. None when there is none."""
    for err in (exc, exc.__cause__):
        if err is None:
            continue
        for source in (
            getattr(err, "litellm_response_headers", None),
            getattr(getattr(err, "response", None), "headers", None),
        ):
            get = getattr(source, "get", None)
            if get is None:
                continue
            for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
                try:
                    raw = get(name)
                    value = float(str(raw).strip()) * scale if raw is not None else None
                except (TypeError, ValueError):  # a date, or garbage
                    value = None
                if value is not None and 0 <= value < float("inf"):  # (a NaN is neither)
                    return value
    for err in (exc, exc.__cause__):
        if err is None:
            continue
        found = _RETRY_DELAY.search(str(err))
        if found is not None:
            return float(found.group(1))
    return None


# google.rpc.RetryInfo's retryDelay, a protobuf Duration in JSON ("1s", "0.5s"),
# as it appears in a Gemini error body (quoted, or with escaped quotes).
_RETRY_DELAY = re.compile(r"""retryDelay\\?["']\s*:\s*\\?["'](\d{1,6}(?:\.\d{1,9})?)s\\?["']""")


def describe_exception(exc: BaseException, *, escalated_after_truncation: bool = False) -> dict[str, Any]:
    """The record's ``error`` object for ``exc``.

    ``status_code`` is the HTTP status an API error carries (litellm reports a
    403 as a plain ``APIError`` with status 403; the classifier needs it).
    ``cause`` names the ``__cause__`` chain, which tells a refused connection
    (litellm ``InternalServerError`` caused by ``httpx.ConnectError``) from a
    real 500.
    """
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = None
    causes: list[str] = []
    seen = {id(exc)}
    cur = exc.__cause__ or exc.__context__
    while cur is not None and id(cur) not in seen and len(causes) < 5:
        seen.add(id(cur))
        causes.append(qualified_name(type(cur)))
        cur = cur.__cause__ or cur.__context__
    # Redacted before it is cut: a secret across the cut would no longer match.
    message = redact(str(exc))
    if len(message) > 2000:
        message = message[:2000] + "…"
    out: dict[str, Any] = {
        "type": qualified_name(type(exc)),
        "mro": [qualified_name(c) for c in type(exc).__mro__],
        "message": message,
        "status_code": status,
        "cause": causes,
        "escalated_after_truncation": bool(escalated_after_truncation),
    }
    try:
        asked = retry_after_s(exc)
    except Exception:  # noqa: BLE001 - headers of an unforeseen kind: none asked
        asked = None
    if asked is not None:
        out["retry_after_s"] = asked  # read by the lane's wait before a rerun (rules.rerun_wait_s)
    return out
