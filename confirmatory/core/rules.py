"""The runner's decisions, as pure functions and tables (docs/RULES.md).

Owns: admission, an attempt's class (from its record, the class lists and
the host evidence), its action, the plan of the next pass, the inconclusive
stop rule, and which stops end a model or the whole run.

Two callers, one set of answers: the lanes call these functions and write
down what they returned; ``verify`` calls them again on what was written and
must get the same answers. Nothing here reads a clock, a file or the
environment, and nothing imports litellm: an error is known only by the
qualified names its record stores (``type``, ``mro``), its ``status_code``
and, for the few failures a provider states only in words (an exhausted
quota or credit balance), its recorded ``message``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Cls(StrEnum):
    OK = "ok"
    MODEL = "model"
    PROVIDER = "provider"
    HOST = "host"
    OPERATOR = "operator"
    HARNESS = "harness"
    STOPPED = "stopped"
    INCONCLUSIVE = "inconclusive"


class Action(StrEnum):
    KEEP = "keep"
    RERUN = "rerun"
    PAUSE = "pause"
    STOP = "stop"


DEFAULT_PRECEDENCE: tuple[str, ...] = (
    "harness",
    "stopped",
    "operator",
    "host",
    "provider",
    "model",
    "inconclusive",
    "ok",
)

DEADLINE_TYPE = "confirmatory.AttemptDeadline"

# Which exceptions say whose fault a failure was.  Classification walks the
# recorded MRO from the raised type to its bases and stops at the first name
# found in any list, so a subclass listed anywhere wins over its base; each
# list is still kept subclasses-first so that it reads in match order.
# Why each entry sits where it does: docs/RULES.md "Class lists".
CLASS_LISTS: dict[str, Any] = {
    "operator": [
        # a person must act: credentials, permissions, a name that resolves to
        # nothing, money, an unpriced model, a request the design cannot make
        "litellm.exceptions.CallerCredentialAuthenticationError",
        "litellm.exceptions.AuthenticationError",
        "openai.OAuthError",
        "openai.AuthenticationError",
        "litellm.exceptions.PermissionDeniedError",
        "openai.PermissionDeniedError",
        "litellm.exceptions.NotFoundError",
        "openai.NotFoundError",
        "litellm.exceptions.LiteLLMUnknownProvider",
        "litellm.exceptions.PaymentRequiredError",
        "litellm.exceptions.BudgetExceededError",
        # a reply litellm could not price (confirmatory.engine.llm raises it; it
        # subclasses ModelNotMappedError, so older class lists agree)
        "confirmatory.engine.llm.UnpricedCall",
        "litellm.exceptions.ModelNotMappedError",
        "litellm.exceptions.UnsupportedParamsError",
        "litellm.exceptions.UnsupportedEndpointError",
        "litellm.exceptions.EndpointNotSupportedByModelError",
        "litellm.exceptions.MalformedRequestFieldError",
        "httpx.UnsupportedProtocol",
        "httpx.InvalidURL",
    ],
    "provider": [
        # the service failed this time; the same request may well succeed
        "litellm.exceptions.CallerCredentialRateLimitError",
        "litellm.exceptions.RateLimitError",
        "openai.RateLimitError",
        "litellm.types.router.RouterRateLimitError",
        "litellm.types.router.RouterRateLimitErrorBasic",
        "litellm.exceptions.InternalServerError",
        "openai.InternalServerError",
        "litellm.exceptions.MidStreamFallbackError",
        "litellm.exceptions.ServiceUnavailableError",
        "litellm.exceptions.BadGatewayError",
        "openai.ConflictError",
        "litellm.exceptions.Timeout",
        "openai.APITimeoutError",
        "litellm.exceptions.APIConnectionError",
        "openai.APIConnectionError",
        "litellm.exceptions.APIResponseValidationError",
        "openai.APIResponseValidationError",
        "litellm.exceptions.ImageFetchError",
        "litellm.exceptions.VectorStoreSearchError",
        "litellm.exceptions.MockException",
        "litellm.exceptions.APIError",
        "openai.WebSocketConnectionClosedError",
        "httpx.TimeoutException",
        "httpx.NetworkError",
        "httpx.RemoteProtocolError",
        "httpx.ProxyError",
        "httpx.TransportError",
    ],
    "model": [
        # the model's own doing (or the content it was given): rerunning the
        # same request would observe the same behaviour again
        "litellm.exceptions.ContextWindowExceededError",
        "litellm.exceptions.ContentPolicyViolationError",
        "litellm.exceptions.RejectedRequestError",
        "litellm.exceptions.JSONSchemaValidationError",
        "litellm.exceptions.InvalidRequestError",
        "litellm.exceptions.BadRequestError",
        "openai.BadRequestError",
        "litellm.exceptions.UnprocessableEntityError",
        "openai.UnprocessableEntityError",
        "openai.ContentFilterFinishReasonError",
        "openai.LengthFinishReasonError",
        "litellm.exceptions.GuardrailRaisedException",
        "litellm.exceptions.BlockedPiiEntityError",
        "litellm.exceptions.ModifyResponseException",
        "litellm.exceptions.SensitiveDataRouteException",
        "litellm.tool_loop.ToolLoopMaxRoundsExceeded",
        "confirmatory.core.errors.TruncationSurvived",
        "confirmatory.core.errors.EscalatedTimeout",
        "confirmatory.core.errors.UnparseableAnswer",
        "confirmatory.core.errors.ModelFault",
    ],
    # litellm reports 401/403/404 (and a 409) as a plain APIError: the status
    # decides (LITELLM.md).
    "status_overrides": {
        "litellm.exceptions.APIError": {
            "401": "operator",
            "402": "operator",
            "403": "operator",
            "404": "operator",
            "429": "provider",
        },
    },
    # Money, said only in words: a provider reports an exhausted quota or
    # credit balance under the class and status of an ordinary failure (a 429
    # rate limit, a 400 bad request).  A rule applies when one of its ``names``
    # is in the recorded MRO, the recorded ``status_code`` is one of its
    # ``status_codes``, and the recorded message contains one of its
    # ``markers`` (case-insensitive); it is checked before the lists.  Each
    # marker is the provider's documented text, as measured through litellm
    # (docs/RULES.md "Class lists"); a per-minute rate limit matches none.
    # Two Gemini rules, first, keep a failure ``provider`` where its words
    # (OpenAI's quota text) or litellm's status (a 422) would mislead.
    "message_overrides": [
        {
            "class": "provider",
            "why": "Gemini: a per-minute rate quota, worded as an exhausted quota (429 RESOURCE_EXHAUSTED)",
            "names": ["litellm.exceptions.RateLimitError", "openai.RateLimitError"],
            "status_codes": [429],
            # the body's QuotaFailure names the quota: ...PerMinute... (GenerateRequestsPerMinutePerProjectPerModel)
            "markers": ["perminute", "per_minute"],
        },
        {
            "class": "provider",
            "why": "Gemini: a 200 reply litellm could not read arrives as a 422 BadRequestError",
            "names": ["litellm.exceptions.BadRequestError"],
            "status_codes": [422],
            "markers": ["error converting to valid response block"],
        },
        {
            "class": "operator",
            "why": "OpenAI: the account's quota or credit is used up (error code insufficient_quota)",
            "names": ["litellm.exceptions.RateLimitError", "openai.RateLimitError", "litellm.exceptions.APIError"],
            "status_codes": [429],
            # chat carries only the message; the Responses API the whole body with its code
            "markers": ["insufficient_quota", "you exceeded your current quota"],
        },
        {
            "class": "operator",
            "why": "Anthropic: the organisation's prepaid credit balance is too low",
            "names": ["litellm.exceptions.BadRequestError", "openai.BadRequestError"],
            "status_codes": [400],
            "markers": ["your credit balance is too low"],
        },
    ],
}

# Exception classes litellm exports that are deliberately in no list, and why.
NOT_LISTED: dict[str, str] = {
    "litellm.exceptions.OpenAIError": "the root of every openai error: an error known only by it is 'any other error' (inconclusive)",
    "pydantic_core._pydantic_core.ValidationError": "pydantic's, re-exported by litellm; raised by code, not by a provider: harness",
    "zoneinfo._common.ZoneInfoNotFoundError": "the standard library's, re-exported by litellm: harness",
}

# Errors of these packages that no list names are "any other error".
PROVIDER_PACKAGES: tuple[str, ...] = ("litellm.", "openai.", "httpx.")

# What each class does (docs/RULES.md "Actions").
ACTION_OF: dict[Cls, Action] = {
    Cls.HARNESS: Action.STOP,
    Cls.STOPPED: Action.KEEP,
    Cls.OPERATOR: Action.PAUSE,
    Cls.HOST: Action.RERUN,
    Cls.PROVIDER: Action.RERUN,
    Cls.INCONCLUSIVE: Action.RERUN,
    Cls.MODEL: Action.KEEP,
    Cls.OK: Action.KEEP,
}

# Which stops end one model and which end every lane.
STOP_SCOPE: dict[str, str] = {
    "harness": "model",
    "inconclusive": "model",
    "deadline": "model",
    "pool": "model",
    "runner-error": "run",
    "interrupt": "run",
    "sampler": "run",
    # written by a continuation at the last durable instant of a runner that
    # died (docs/RUN.md "Continuing a crashed run"): it ends nothing after
    # the continuation, which carries the run on
    "crash": "run",
}

TRIGGER_CAUSES: tuple[str, ...] = ("harness", "deadline", "inconclusive")


def admit(*, refused_before: bool, finished_nusd: int, under_way: int, reserve_nusd: int, cap_nusd: int) -> bool:
    """The admission rule: never after a refusal; else the reserve of every
    household under way, this one included, must fit under the cap with what
    finished households spent.  (No decision at all after the ceiling: the
    caller's business.)"""
    if refused_before:
        return False
    return finished_nusd + reserve_nusd * (under_way + 1) <= cap_nusd


_LOOKUP_CACHE: dict[int, tuple[Mapping[str, Any], dict[str, Cls]]] = {}


def _lookup(class_lists: Mapping[str, Any]) -> dict[str, Cls]:
    """name -> class for a class-lists mapping; memoised per object (the lanes
    and verify pass the same mapping for every attempt)."""
    hit = _LOOKUP_CACHE.get(id(class_lists))
    if hit is not None and hit[0] is class_lists:
        return hit[1]
    table = {name: Cls(c) for c in ("operator", "provider", "model") for name in class_lists.get(c, ())}
    if len(_LOOKUP_CACHE) > 64:
        _LOOKUP_CACHE.clear()
    _LOOKUP_CACHE[id(class_lists)] = (class_lists, table)
    return table


def _message_class(
    error: Mapping[str, Any], names: Sequence[str], overrides: Sequence[Mapping[str, Any]]
) -> Cls | None:
    """The class of the first message rule the recorded error matches, or None.

    Reads only what the record holds (MRO names, ``status_code``, the
    redacted and cut ``message``), so verify gets the same answer from the
    run directory alone: the rules themselves are in the manifest's
    ``class_lists``.
    """
    if not overrides:
        return None
    message = str(error.get("message") or "").lower()
    if not message:
        return None
    status = error.get("status_code")
    for rule in overrides:
        if status not in rule["status_codes"]:
            continue
        if not any(name in rule["names"] for name in names):
            continue
        if any(str(marker).lower() in message for marker in rule["markers"]):
            return Cls(rule["class"])
    return None


def _error_class(error: Mapping[str, Any] | None, class_lists: Mapping[str, Any]) -> Cls:
    if not error:
        # status "error" with no error object: the harness broke the contract
        return Cls.HARNESS
    etype = str(error.get("type") or "")
    if etype == DEADLINE_TYPE:
        return Cls.HARNESS
    names = list(error.get("mro") or ()) or [etype]
    if names[0] != etype:
        names.insert(0, etype)
    by_message = _message_class(error, names, class_lists.get("message_overrides") or ())
    if by_message is not None:
        return by_message
    lookup = _lookup(class_lists)
    for name in names:
        cls = lookup.get(name)
        if cls is None:
            continue
        override = class_lists.get("status_overrides", {}).get(name, {})
        status = error.get("status_code")
        if status is not None and str(status) in override:
            return Cls(override[str(status)])
        return cls
    return Cls.INCONCLUSIVE if etype.startswith(PROVIDER_PACKAGES) else Cls.HARNESS


def record_class(record: Mapping[str, Any], *, class_lists: Mapping[str, Any] = CLASS_LISTS) -> Cls:
    """The class a record says by itself, before host evidence."""
    status = record.get("status")
    if status == "budget_stop":
        return Cls.STOPPED
    if status == "deadline":
        return Cls.HARNESS
    if status == "ok":
        return Cls.OK if not record.get("error") else _error_class(record["error"], class_lists)
    if status == "error":
        return _error_class(record.get("error"), class_lists)
    raise ValueError(f"record status {status!r} is none of ok/error/budget_stop/deadline")


def classify(
    record: Mapping[str, Any],
    host_reasons: Sequence[str],
    *,
    precedence: Sequence[str] = DEFAULT_PRECEDENCE,
    class_lists: Mapping[str, Any] = CLASS_LISTS,
) -> Cls:
    """The attempt's class: of the classes that match (the record's own, and
    ``host`` when the host evidence gave reasons), the first in precedence."""
    matches = {record_class(record, class_lists=class_lists)}
    if host_reasons:
        matches.add(Cls.HOST)
    for name in precedence:
        if name in matches:
            return Cls(name)
    raise ValueError(f"precedence {list(precedence)} names none of {sorted(matches)}")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEXID = re.compile(r"\b(?:0x)?(?=[0-9a-f_-]*\d)[0-9a-f][0-9a-f_-]{7,}\b")
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")
SIGNATURE_MESSAGE_CHARS = 200
# _HEXID tries every word start in a run of its characters and looks ahead
# to the run's end for a digit: in a long run with many word starts and no
# digit ("a-a-a-..."), that is quadratic (40 kB: 8 s). Where such a run is
# long enough to matter, _sub_hex_ids gives the same result in linear time.
_HEX_RUN = re.compile(r"[0-9a-f_-]+")
_LONG_HEX_RUN = re.compile(r"[0-9a-f_-]{64,}")
_HEX_START = re.compile(r"\b[0-9a-f]")
_WORD = re.compile(r"\w")
_DIGIT = re.compile(r"\d")


def _sub_hex_ids(msg: str) -> str:
    """``_HEXID.sub("#", msg)`` in linear time.

    A match lies inside one maximal run of ``[0-9a-f_-]`` (after an optional
    ``0x`` that starts at a word boundary): it starts at a word start ``q``
    of the run holding a hex digit; the lookahead holds when a digit
    (``\\d``) follows ``q`` in the run or just after it; and the greedy tail
    ends at the run's last word boundary, which must be 8 or more characters
    past ``q``. When the ``0x`` form fails the form without it fails too (the
    ``x`` ends the run after the ``0``). Searching resumes at a match's end.
    Each run's last digit and last boundary are found once.
    """
    spans = [m.span() for m in _HEX_RUN.finditer(msg)]
    starts = [a for a, _ in spans]
    runs: dict[int, tuple[int, int, int]] = {}  # run index -> (end, last ASCII digit, last word boundary)
    n, out, keep = len(msg), [], 0
    for m in _HEX_START.finditer(msg):
        p = m.start()
        if p < keep:
            continue
        q = p + 2 if msg.startswith("0x", p) else p
        if q >= n or msg[q] not in "0123456789abcdef":
            continue
        k = bisect.bisect_right(starts, q) - 1
        run = runs.get(k)
        if run is None:
            a, r = spans[k]
            text = msg[a:r]
            digit = max(text.rfind(c) for c in "0123456789")
            if (text[-1] != "-") != bool(r < n and _WORD.match(msg, r)):
                edge = r  # a boundary at the run's end
            elif text[-1] == "-":  # ... else where its trailing dashes begin
                edge = a + len(text.rstrip("-"))  # (a: there is none; it never matches)
            else:  # ... or after its last dash
                edge = a + text.rfind("-") + 1
            run = runs[k] = (r, a + digit if digit >= 0 else -1, edge)
        r, digit, edge = run
        if (digit >= q or (r < n and _DIGIT.match(msg, r))) and edge >= q + 8:
            out.append(msg[keep:p])
            out.append("#")
            keep = edge
    out.append(msg[keep:])
    return "".join(out)


def error_signature(error: Mapping[str, Any] | None) -> str | None:
    """``type: message`` with the message normalised so that one failure
    repeated with other ids, counts or times gives one signature."""
    if not error:
        return None
    msg = str(error.get("message") or "").lower()
    msg = _UUID.sub("#", msg)
    msg = _sub_hex_ids(msg) if _LONG_HEX_RUN.search(msg) else _HEXID.sub("#", msg)
    msg = _DIGITS.sub("#", msg)
    msg = _SPACE.sub(" ", msg).strip()[:SIGNATURE_MESSAGE_CHARS]
    return f"{error.get('type')}: {msg}"


def action_for(cls: Cls, *, reruns_used: int, max_reruns: int) -> Action:
    """The class's action; a rerun the arm can no longer have is ``keep``
    (the last attempt stands).  A pause stays a pause at the limit: the model
    still waits for a person, the next pass just has no attempt for it."""
    action = ACTION_OF[Cls(cls)]
    if action is Action.RERUN and reruns_used >= max_reruns:
        return Action.KEEP
    return action


def stop_cause_for(cls: Cls, record: Mapping[str, Any]) -> str | None:
    """The stop a harness-class attempt triggers: ``deadline`` or ``harness``."""
    if Cls(cls) is not Cls.HARNESS:
        return None
    error = record.get("error") or {}
    if record.get("status") == "deadline" or error.get("type") == DEADLINE_TYPE:
        return "deadline"
    return "harness"


def next_pass_arms(
    arm_order: Sequence[str],
    actions: Mapping[str, Action],
    *,
    reruns_used: Mapping[str, int] | None = None,
    max_reruns: int | None = None,
) -> list[str]:
    """The arms of the next pass, in arm order: those whose action was rerun
    or pause.  Given ``reruns_used`` (before the pass just decided) and
    ``max_reruns``, a paused arm that has used every rerun gets none."""
    arms = []
    for arm in arm_order:
        action = actions.get(arm)
        if action not in (Action.RERUN, Action.PAUSE):
            continue
        if (
            action == Action.PAUSE
            and reruns_used is not None
            and max_reruns is not None
            and reruns_used.get(arm, 0) >= max_reruns
        ):
            continue
        arms.append(arm)
    return arms


# The classes whose arm result is an observation: the model's own answer, or
# its own failure. A model with none (every result a provider, operator,
# host, inconclusive or stopped one) is said so by the runner's end summary
# (cli.run.result_lines) and by verify's outcome line (verify.outcome.model_outcome).
OBSERVED_CLASSES = (Cls.OK.value, Cls.MODEL.value)


# The longest a provider's Retry-After lengthens a lane's wait before a
# rerun pass: a day's quota asks for hours (and is an operator failure).
RETRY_AFTER_CAP_S = 600.0


def rerun_wait_s(rerun_wait_base_s: float, pass_index: int, retry_after_s: float = 0.0) -> float:
    """How long a lane waits, from the end of pass ``pass_index - 1``'s
    classification, before it starts pass ``pass_index`` (a rerun pass):
    ``rerun_wait_s`` of the design, doubled for each later pass (15 s, 30 s,
    ...), or longer when a provider asked for longer (``retry_after_s``,
    the most any attempt to rerun was asked for, at most
    ``RETRY_AFTER_CAP_S``). A provider that refused a call (a rate limit,
    an outage) is not asked again at once: a rerun an instant later mostly
    fails alike and spends the arm's reruns for nothing. Pass 0 waits for
    nothing. The design's part is a lower bound verify checks; a longer
    wait breaks no rule."""
    if pass_index <= 0:
        return 0.0
    wait = float(rerun_wait_base_s) * 2.0 ** (pass_index - 1) if rerun_wait_base_s > 0 else 0.0
    return max(wait, min(float(retry_after_s), RETRY_AFTER_CAP_S)) if retry_after_s > 0 else wait


def inconclusive_trigger(households_by_signature: Mapping[str, set[str]], limit: int) -> str | None:
    """A signature that has ended attempts in more than ``limit`` households
    (the alphabetically first, if several), or None."""
    over = sorted(sig for sig, hh in households_by_signature.items() if len(hh) > limit)
    return over[0] if over else None


@dataclass(frozen=True, slots=True)
class Decision:
    cls: Cls
    action: Action
    signature: str | None
    stop_cause: str | None  # "harness" / "deadline" / "inconclusive" when action is stop


def decide(
    record: Mapping[str, Any],
    host_reasons: Sequence[str],
    *,
    reruns_used: int,
    max_reruns: int,
    precedence: Sequence[str] = DEFAULT_PRECEDENCE,
    class_lists: Mapping[str, Any] = CLASS_LISTS,
    inconclusive_households: Mapping[str, set[str]] | None = None,
    inconclusive_limit: int | None = None,
) -> Decision:
    """Class, action, signature and stop cause of one attempt, all rules at once.

    ``inconclusive_households``: per signature, the model's households with an
    inconclusive attempt so far, *including this attempt's household* if it
    is inconclusive.  An inconclusive attempt whose signature is then in more
    than ``inconclusive_limit`` households gets ``stop`` (cause inconclusive).
    """
    cls = classify(record, host_reasons, precedence=precedence, class_lists=class_lists)
    signature = error_signature(record.get("error"))
    action = action_for(cls, reruns_used=reruns_used, max_reruns=max_reruns)
    cause = stop_cause_for(cls, record)
    if (
        cls is Cls.INCONCLUSIVE
        and inconclusive_households is not None
        and inconclusive_limit is not None
        and signature is not None  # an inconclusive attempt has an error, so a signature
        and len(inconclusive_households.get(signature, ())) > inconclusive_limit
    ):
        action, cause = Action.STOP, "inconclusive"
    return Decision(cls, action, signature, cause)
