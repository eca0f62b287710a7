"""Fakes that ship with the package: a fake harness, a fault plan, a fake engine.

They drive real Runs in the tests and benchmarks: the harness follows the
protocol (``spend.checkpoint`` before each turn, ``spend.add_call`` as each
call ends), raises the exception classes litellm really raises, and calls a
real engine pool of worker processes. The *fault plan* travels in the
household payload, so a design names every planted failure:

    {"id": "hh-003", "plan": {"calculator/0": "provider", "alone/*": "model"}}

keys are ``"<arm>/<pass>"`` (``*`` for any pass), optionally prefixed
``"<model>:"`` to plant for one model only; values are fault kinds
(``FAULT_KINDS``) or lists of them (one per call). Payload keys ``cost_usd``
(per call, default 0.001) and ``latency_s`` (default 0) shape the calls.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from confirmatory.core.errors import TruncationSurvived, UnparseableAnswer

# Set by a test to let "stuck" conversations return.
STUCK_RELEASE = threading.Event()

FAULT_KINDS = (
    "ok",
    "provider",
    "unavailable",
    "timeout",
    "model",
    "truncated",
    "operator",
    "forbidden",
    "harness",
    "inconclusive",
    "hang",
    "interrupt",
    "expensive",
    "pool-kill",
    "slow",
    "echo-key",
    "stuck",
    "engine-hang",
    # harness contract breaches: an answer JSON cannot hold, a result without
    # an answer, a SystemExit out of the harness, a call timed with the wrong clock
    "nan-answer",
    "no-answer",
    "system-exit",
    "monotonic-times",
)

# What a litellm call raises for each planted provider-side fault.
_LITELLM_RAISES = {
    "provider": ("RateLimitError", 429),
    "unavailable": ("ServiceUnavailableError", 503),
    "timeout": ("Timeout", 408),
    "operator": ("AuthenticationError", 401),
    "forbidden": ("APIError", 403),
}


def _litellm_exception(kind: str, model: str) -> BaseException:
    from confirmatory.engine.llm.boundary import _lib

    lib = _lib()
    name, status = _LITELLM_RAISES[kind]
    cls: Callable[..., BaseException] = getattr(lib.exceptions, name)
    msg = f"planted {kind} fault"
    if name == "APIError":
        return cls(status_code=status, message=msg, llm_provider="openai", model=model)
    if name == "Timeout":
        return cls(message=msg, model=model, llm_provider="openai")
    return cls(message=msg, llm_provider="openai", model=model)


def planned_kinds(payload: Mapping[str, Any], model: str, arm: str, pass_index: int) -> list[str]:
    """The kinds planted for this attempt: ``model:arm/pass`` beats ``arm/pass`` beats ``arm/*``."""
    plan = payload.get("plan") or {}
    kinds = "ok"
    for key in (f"{model}:{arm}/{pass_index}", f"{model}:{arm}/*", f"{arm}/{pass_index}", f"{arm}/*"):
        if key in plan:
            kinds = plan[key]
            break
    return [kinds] if isinstance(kinds, str) else list(kinds)


def harness(model: Any, household: Any, arm: Any, pool: Any, spend: Any, clock: Any) -> dict[str, Any]:
    """One fake conversation: a chat call per planned kind, then an answer."""
    payload = household.payload
    cost = float(payload.get("cost_usd", 0.001))
    latency = float(payload.get("latency_s", 0.0))
    answer = None
    for kind in planned_kinds(payload, model.name, arm.name, spend.pass_index):
        spend.checkpoint()
        start = time.time()
        if latency:
            time.sleep(latency)
        if kind in _LITELLM_RAISES:
            exc = _litellm_exception(kind, model.litellm_model)
            spend.add_call("chat", start, time.time(), cost_usd=0.0, error=exc)
            raise exc
        if kind == "inconclusive":
            import openai

            exc = openai.OpenAIError("an upstream failure nobody listed (request 4711)")
            spend.add_call("chat", start, time.time(), error=exc)
            raise exc
        if kind == "harness":
            raise KeyError("the harness broke: no such field")
        if kind == "monotonic-times":  # a call timed with the wrong clock
            spend.add_call("chat", time.monotonic(), time.monotonic(), cost_usd=cost, finish_reason="stop")
        if kind == "system-exit":
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
            raise SystemExit(1)
        if kind == "nan-answer":
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
            return {"answer": float("nan")}
        if kind == "no-answer":
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
            return {"result": 1}
        if kind == "echo-key":
            # A provider that echoes the caller's credentials in its error message.
            from confirmatory.engine.llm.boundary import _lib

            # The token is placed across the 2000th character of the message,
            # where records cut it: redaction must come before the cut.
            token = os.environ.get("MY_SERVICE_TOKEN") or ""

            def rate_limited(pad: int) -> BaseException:
                return cast(
                    BaseException,
                    _lib().exceptions.RateLimitError(
                        message=f"Rate limited for API key {os.environ.get('OPENAI_API_KEY')}; {'.' * pad}"
                        f"token {token} and more",  # noqa: B023 - called in this iteration
                        llm_provider="openai",
                        model=model.litellm_model,
                    ),
                )

            at = str(rate_limited(0)).find(f"token {token}") + len("token ")  # litellm prefixes the text
            exc = rate_limited(max(0, 2000 - len(token) // 2 - at))
            # ... and echoed again where nothing redacts it on purpose.
            spend.add_call("chat", start, time.time(), error=exc, echoed_headers=f"x-token: {token}")
            raise exc
        if kind == "slow":
            time.sleep(float(payload.get("slow_s", 0.2)))
        if kind == "expensive":
            spend.add_call(
                "chat", start, time.time(), cost_usd=float(payload.get("expensive_usd", 10.0)), finish_reason="stop"
            )
            continue
        if kind == "stuck":
            # A call that never returns and never reaches a next turn (a server
            # trickling bytes defeats per-phase timeouts). Tests release it.
            STUCK_RELEASE.wait(float(payload.get("stuck_s", 60.0)))
            spend.add_call("chat", start, time.time(), cost_usd=0.0, finish_reason="stop")
            continue
        if kind == "hang":
            # A conversation that keeps going (and spending) until the runner ends it.
            while True:
                spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
                spend.checkpoint()
                time.sleep(0.01)
                start = time.time()
        if kind == "interrupt":
            # The signal arrives while a provider call is under way; the
            # conversation then goes on turn by turn until the runner ends it.
            os.kill(os.getpid(), signal.SIGINT)
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
            while True:
                spend.checkpoint()
                time.sleep(0.005)
        if kind == "pool-kill":
            pool.call("die", {}, dict(arm.features))
        if kind == "engine-hang":
            # An engine call that runs past the attempt's deadline (engine_hang_s, default 30 s).
            pool.call("double", {"x": 1, "sleep_s": float(payload.get("engine_hang_s", 30.0))}, dict(arm.features))
        if kind == "truncated":
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="length")
            raise TruncationSurvived("still truncated after escalation")
        if kind == "model":
            spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
            raise UnparseableAnswer("the final answer is not JSON")
        spend.add_call("chat", start, time.time(), cost_usd=cost, finish_reason="stop")
        if arm.features.get("tools"):
            t0 = time.time()
            result = pool.call(
                "double", {"x": len(household.id), "sleep_s": float(payload.get("engine_s", 0.0))}, dict(arm.features)
            )
            spend.add_call("tool", t0, time.time())
            answer = {"value": result}
        else:
            answer = {"value": len(household.id)}
    return {"answer": answer}


# -- the fake engine: real worker processes -----------------------------------


def engine_op(op: str, payload: Mapping[str, Any], features: Mapping[str, Any]) -> Any:
    """The fake engine's worker function (runs in a pool process)."""
    if op == "double":
        if not features.get("tools"):
            raise ValueError("this arm offers no tools")
        if payload.get("sleep_s"):
            time.sleep(float(payload["sleep_s"]))  # an engine call that takes a while
        return 2 * int(payload["x"])
    if op == "die":
        os._exit(17)
    raise ValueError(f"unknown op {op!r}")


def engine(workers: int) -> Any:
    """Engine factory for fake designs: a real process pool running ``engine_op``."""
    from confirmatory.engine.pool import ProcessEnginePool

    return ProcessEnginePool("confirmatory.testing.fakes:engine_op", workers)


class NullPool:
    """An engine pool with no processes, for benchmarks of the runner alone."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def call(self, op: str, payload: Any, features: Mapping[str, Any]) -> Any:
        return engine_op(op, payload, features) if op != "die" else None

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        self._closed.set()


def null_engine(workers: int) -> NullPool:
    return NullPool()


def unusable_engine(workers: int) -> Any:
    """An engine factory that returns something that is not a pool (a harness author's slip)."""
    return engine_op


def broken_engine(workers: int) -> Any:
    """An engine factory that cannot start its pool (its model stops, cause pool)."""
    from confirmatory.engine.pool import ProcessEnginePool

    return ProcessEnginePool("confirmatory.testing.fakes:no_such_function", workers)
