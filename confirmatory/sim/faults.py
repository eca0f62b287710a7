"""The simulated provider's fault plan: which call fails, and how.

A plan is read from the design's ``[simulator]`` table (or any object with the
same attributes, such as the design module's pydantic model) so this module
does not depend on the design loader. Deciding is pure: a fault applies to a
call when every selector it names matches and a seeded draw falls below its
rate, so the same seed, model, attempt and call index always get the same
fault, whichever thread serves the request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# A hang sleeps past the client's timeout, but never for ever: a server thread
# stuck in sleep would outlive the test or run that started it.
DEFAULT_HANG_S = 5.0
MAX_HANG_S = 30.0


class FaultKind(StrEnum):
    RATE_LIMIT = "rate_limit"  # 429 with Retry-After
    SERVER_ERROR = "server_error"  # 500
    BAD_GATEWAY = "bad_gateway"  # 502
    UNAVAILABLE = "unavailable"  # 503
    HANG = "hang"  # sleep past the client's timeout
    TRUNCATE = "truncate"  # finish_reason "length" / Responses "incomplete"
    MALFORMED = "malformed"  # 200 with a body that is not JSON
    BAD_ANSWER = "bad_answer"  # a final answer that does not parse
    AUTH = "auth"  # 401
    QUOTA = "quota"  # 429, OpenAI's insufficient_quota: the account's money is used up
    CREDIT = "credit"  # 400, Anthropic's "credit balance is too low"
    EMPTY_CHOICES = "empty_choices"  # 200 with "choices": [] (Responses "output": []) and a billed usage
    NULL_CHOICES = "null_choices"  # 200 with "choices": null (Responses: no "output") and a billed usage
    OVERLOADED = "overloaded"  # Anthropic 529 overloaded_error, Gemini 503 UNAVAILABLE, OpenAI 503
    BAD_REQUEST = "bad_request"  # 400: a request the provider refuses (invalid_request_error, INVALID_ARGUMENT)
    SAFETY = "safety"  # 200, the reply stopped by a safety filter (content_filter, SAFETY, refusal)
    BLOCKED_PROMPT = "blocked_prompt"  # 200, Gemini's promptFeedback.blockReason; elsewhere as safety


# HTTP status for the kinds that answer with an error status and no completion.
STATUS_OF: dict[FaultKind, int] = {
    FaultKind.RATE_LIMIT: 429,
    FaultKind.SERVER_ERROR: 500,
    FaultKind.BAD_GATEWAY: 502,
    FaultKind.UNAVAILABLE: 503,
    FaultKind.AUTH: 401,
    FaultKind.QUOTA: 429,
    FaultKind.CREDIT: 400,
    FaultKind.OVERLOADED: 503,
    FaultKind.BAD_REQUEST: 400,
}

# What a provider says for the kinds whose text matters (the rules read it:
# an exhausted quota or credit balance is an operator failure); the others
# answer "simulated <kind>". (message, error type and code)
ERROR_TEXT: dict[FaultKind, tuple[str, str]] = {
    FaultKind.QUOTA: (
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
    ),
    FaultKind.CREDIT: (
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
        "invalid_request_error",
    ),
}

_SELECTORS = ("model", "household", "arm", "pass", "call")


def draw(seed: int, model: str, attempt: str, call: int, salt: str) -> float:
    """A uniform number in [0, 1) fixed by its inputs (the plan's seeded draw)."""
    digest = hashlib.sha256(f"{seed}:{model}:{attempt}:{call}:{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_attempt(attempt: str) -> tuple[str | None, str | None, int | None]:
    """``"<household>/<arm>/<pass>"`` -> its parts; anything else -> Nones."""
    parts = attempt.split("/")
    if len(parts) != 3:
        return None, None, None
    household, arm, pass_text = parts
    try:
        pass_no: int | None = int(pass_text)
    except ValueError:
        pass_no = None
    return household or None, arm or None, pass_no


def served_name(model: str) -> str:
    """``"openai/sim-careful"`` and ``"sim-careful"`` both select the served name."""
    return model.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    model: str | None = None
    household: str | None = None
    arm: str | None = None
    pass_: int | None = None
    call: int | None = None
    rate: float = 1.0
    hang_s: float | None = None

    def selects(self, model: str, attempt: str, call: int) -> bool:
        """Every selector this fault names matches the call (no draw)."""
        household, arm, pass_no = split_attempt(attempt)
        return (
            (self.model is None or served_name(self.model) == served_name(model))
            and (self.household is None or self.household == household)
            and (self.arm is None or self.arm == arm)
            and (self.pass_ is None or self.pass_ == pass_no)
            and (self.call is None or self.call == call)
        )


def _number(value: Any, convert: Any, key: str) -> Any:
    """``convert(value)``, or a ValueError naming the key (not int()'s bare
    "invalid literal", nor a TypeError for a list or a table)."""
    try:
        return convert(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{key}: {value!r} is not a number") from None


def _get(entry: Any, key: str) -> Any:
    if isinstance(entry, Mapping):
        return entry.get(key)
    # "pass" is a keyword: a pydantic model may spell the attribute pass_.
    if key == "pass":
        return getattr(entry, "pass_", getattr(entry, "pass", None))
    return getattr(entry, key, None)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    seed: int = 0
    faults: tuple[Fault, ...] = ()
    hang_s: float = DEFAULT_HANG_S

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | Any | None) -> FaultPlan:
        """Build a plan from the ``[simulator]`` table (a dict) or an object with its attributes.

        Raises ``ValueError`` naming the entry for an unknown kind or a rate
        outside [0, 1].
        """
        if table is None:
            return cls()
        seed = _get(table, "seed")
        hang_s = _get(table, "hang_s")
        entries: Iterable[Any] = _get(table, "faults") or ()
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Iterable):
            raise ValueError(f"simulator.faults: {entries!r} is not a list of tables ([[simulator.faults]])")
        faults = []
        for i, entry in enumerate(entries):
            kind_text = _get(entry, "kind")
            try:
                kind = FaultKind(str(getattr(kind_text, "value", kind_text)))
            except ValueError:
                known = ", ".join(k.value for k in FaultKind)
                raise ValueError(f"simulator.faults[{i}].kind: {kind_text!r} is not one of {known}") from None
            rate = _get(entry, "rate")
            rate = 1.0 if rate is None else _number(rate, float, f"simulator.faults[{i}].rate")
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"simulator.faults[{i}].rate: {rate} is outside [0, 1]")
            fields = {name: _get(entry, name) for name in _SELECTORS}
            entry_hang = _get(entry, "hang_s")
            faults.append(
                Fault(
                    kind=kind,
                    model=fields["model"],
                    household=fields["household"],
                    arm=fields["arm"],
                    pass_=None
                    if fields["pass"] is None
                    else _number(fields["pass"], int, f"simulator.faults[{i}].pass"),
                    call=None
                    if fields["call"] is None
                    else _number(fields["call"], int, f"simulator.faults[{i}].call"),
                    rate=rate,
                    hang_s=None if entry_hang is None else _number(entry_hang, float, f"simulator.faults[{i}].hang_s"),
                )
            )
        return cls(
            seed=_number(seed or 0, int, "simulator.seed"),
            faults=tuple(faults),
            hang_s=DEFAULT_HANG_S if hang_s is None else _number(hang_s, float, "simulator.hang_s"),
        )

    def fault_for(self, model: str, attempt: str, call: int, *, seed: int | None = None) -> Fault | None:
        """The first fault of the plan that applies to this call, or None."""
        use_seed = self.seed if seed is None else seed
        for fault in self.faults:
            if not fault.selects(model, attempt, call):
                continue
            # rate 1.0 needs no draw; the draw is salted by the kind so two
            # faults of one call are drawn independently.
            if fault.rate >= 1.0 or draw(use_seed, served_name(model), attempt, call, fault.kind.value) < fault.rate:
                return fault
        return None

    def hang_seconds(self, fault: Fault) -> float:
        chosen = self.hang_s if fault.hang_s is None else fault.hang_s
        return max(0.0, min(chosen, MAX_HANG_S))
