"""The reference study's harness: one conversation of one model on one household.

It owns the study's prompts, the calculator tool's schema, the conversation
loop of each arm and the parsing of the final answer. It follows the harness
protocol (docs/ARCHITECTURE.md): every model and engine call is reported to
``spend.add_call`` as it ends, ``spend.checkpoint()`` comes before every model
turn, and the model's own failures are raised as ``ModelFault`` subclasses.

What an arm does is read from its features, not its name:

* no ``tools``: one chat turn with a JSON response format;
* ``tools = ["calculate"]``: chat with the tool; each tool call runs in the
  engine pool under the arm's features; the loop ends at a reply without
  tool calls;
* ``explain = true`` as well: the engine's explain trace of the household the
  model last calculated, then a Responses-API turn asking the model to
  confirm or correct its answer given the trace.

Truncation: a turn that ends at the length limit is repeated once with the
output limit doubled; a second truncation is ``TruncationSurvived``, a
timeout on that repeat ``EscalatedTimeout``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from confirmatory.engine import llm
from confirmatory.demo import calculator
from confirmatory.core.errors import EscalatedTimeout, TruncationSurvived, UnparseableAnswer

ATTEMPT_HEADER = "X-Confirmatory-Attempt"
MAX_MODEL_TURNS = 6  # a repeat after a truncation is part of its turn, not a new one
DEFAULT_OUTPUT_LIMIT = 1024  # doubled on escalation when the design names no limit


def _policy() -> str:
    """The rules as the model reads them, written from the calculator's own constants."""
    c = calculator
    return f"""\
Rules (annual amounts; round each component to cents):
1. Personal allowance per adult: {c.PERSONAL_ALLOWANCE:,.0f}, reduced by 1 for every 2 of that adult's
   income (employment plus self-employment) above {c.ALLOWANCE_TAPER_START:,.0f}, never below 0.
2. Income tax per adult on income above the allowance: {c.BASIC_RATE:.0%} on the first {c.BASIC_BAND:,.0f},
   {c.HIGHER_RATE:.0%} up to {c.ADDITIONAL_START:,.0f} of taxable income, {c.ADDITIONAL_RATE:.0%} above that.
3. Social insurance per adult younger than {c.PENSION_AGE}: on employment income {c.SI_EMPLOYED_MAIN:.0%}
   between {c.SI_LOWER:,.0f} and {c.SI_UPPER:,.0f} and {c.SI_UPPER_RATE:.0%} above; on self-employment income
   {c.SI_SELF_MAIN:.0%} and {c.SI_UPPER_RATE:.0%} on the same thresholds, each kind measured on its own.
4. Child benefit for children younger than {c.CHILD_BENEFIT_MAX_AGE}: {c.CB_FIRST:,.2f} for the eldest, {c.CB_OTHER:,.2f}
   for each other; withdrawn at 1% per {c.CB_TAPER_STEP:,.0f} (pro rata) of the highest adult income
   above {c.CB_TAPER_START:,.0f}.
5. Housing support: the housing cost up to the region's cap ({", ".join(f"{k} {v:,.0f}" for k, v in c.HOUSING_CAPS.items())}),
   reduced by {c.HOUSING_TAPER:.0%} of the household's earnings after income tax and social insurance above
   a work allowance ({c.WORK_ALLOWANCE:,.0f} if there are children, else 0); never below 0.
Net income = earnings - income tax - social insurance + child benefit + housing support.
"""


POLICY = _policy()

SYSTEM_PROMPT = (
    "You compute the annual net income of a household under a fictional tax-and-benefit system. "
    "Apply the rules below exactly.\n\n" + POLICY
)
USER_TEMPLATE = (
    "Here is the household:\n\n```json\n{household}\n```\n\n"
    "What is its annual net income? Reply with only a JSON object of the form "
    '{{"net_income": <number>}}.'
)
TOOL_HINT = "\n\nYou may use the calculate tool, which applies these rules exactly."
CONFIRM_TEMPLATE = (
    "The calculator's trace of the computation for the household you calculated:\n\n{trace}\n\n"
    "Check your answer against it. Reply with only a JSON object of the form "
    '{{"net_income": <number>}}: your final answer.'
)

CALCULATE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Compute a household's annual net income and its components under the rules.",
        "parameters": {
            "type": "object",
            "properties": {
                "household": {
                    "type": "object",
                    "description": "The household exactly as given: adults, children, housing_cost, region.",
                }
            },
            "required": ["household"],
        },
    },
}
TOOL_SCHEMAS = {"calculate": CALCULATE_TOOL}


def describe() -> dict[str, Any]:
    """Every prompt, document and tool schema this harness sends (for config.json)."""
    return {
        "prompts": {
            "system": SYSTEM_PROMPT,
            "user_template": USER_TEMPLATE,
            "tool_hint": TOOL_HINT,
            "confirm_template": CONFIRM_TEMPLATE,
        },
        "documents": {"policy": POLICY},
        "tool_schemas": dict(TOOL_SCHEMAS),
    }


def run(model: Any, household: Any, arm: Any, pool: Any, spend: Any, clock: Any) -> dict[str, Any]:
    """The harness entry (``confirmatory.demo.harness:run``)."""
    return _Conversation(model, household, arm, pool, spend).run()


# --- answers -------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_answer(text: str | None) -> dict[str, float]:
    """``{"net_income": float}`` from a reply: the whole text, a fenced block,
    or the first JSON object in it that has a finite number under ``net_income``."""
    if not text or not text.strip():
        raise UnparseableAnswer("the final answer is empty")
    candidates: list[Any] = []
    for chunk in [text.strip()] + [m.group(1) for m in _FENCE.finditer(text)]:
        try:
            candidates.append(json.loads(chunk))
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            candidates.append(decoder.raw_decode(text, m.start())[0])
        except ValueError:
            pass
    for obj in candidates:
        value = obj.get("net_income") if isinstance(obj, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return {"net_income": float(value)}
    raise UnparseableAnswer(f'no {{"net_income": <number>}} in the final answer: {text[:200]!r}')


def _is_timeout(exc: BaseException) -> bool:
    # litellm.Timeout subclasses openai.APITimeoutError; matched by name so
    # that only confirmatory.engine.llm imports litellm.
    for cls in type(exc).__mro__:
        root = cls.__module__.split(".")[0]
        if (root, cls.__name__) in {("litellm", "Timeout"), ("openai", "APITimeoutError")}:
            return True
    return False


def _escalated(exc: Exception) -> Exception:
    # The record's error says whether it followed an escalation; the runner
    # reads this attribute when it describes the exception.
    exc.escalated_after_truncation = True  # type: ignore[attr-defined]
    return exc


def _loopback(api_base: str | None) -> bool:
    if not api_base:
        return False
    if api_base == "simulator":
        return True
    return urlparse(api_base).hostname in ("127.0.0.1", "localhost", "::1")


# --- the conversation ------------------------------------------------------------


class _Conversation:
    def __init__(self, model: Any, household: Any, arm: Any, pool: Any, spend: Any) -> None:
        self.model = model
        self.household = household
        self.features = dict(arm.features)
        self.pool = pool
        self.spend = spend
        self.tools = [TOOL_SCHEMAS[name] for name in self.features.get("tools") or [] if name in TOOL_SCHEMAS]
        self.offered = {t["function"]["name"] for t in self.tools}
        self.headers = {ATTEMPT_HEADER: spend.attempt_key} if _loopback(model.api_base) else None
        params = dict(model.params or {})
        self.limit = int(params.get("max_tokens") or params.get("max_completion_tokens") or DEFAULT_OUTPUT_LIMIT)
        shown = {k: v for k, v in household.payload.items() if k != "id"}
        self.user_text = USER_TEMPLATE.format(household=json.dumps(shown, indent=2, sort_keys=True))
        self.turns = 0
        # The tool exchange, kept to replay it in the Responses turn.
        self.exchange: list[tuple[dict[str, str], str]] = []
        self.last_calculated: Any = None

    def run(self) -> dict[str, Any]:
        if not self.tools:
            reply = self._turn("chat", lambda limit: llm.chat(
                self.model, self._messages(), response_format={"type": "json_object"},
                max_tokens=limit, extra_headers=self.headers))
            return {"answer": parse_answer(reply.content)}
        answer, answer_text = self._tool_loop()
        if not self.features.get("explain"):
            return {"answer": answer}
        final = self._confirm(answer_text)
        return {"answer": final, "answer_before_explain": answer}

    def _messages(self) -> list[dict[str, Any]]:
        system = SYSTEM_PROMPT + (TOOL_HINT if self.tools else "")
        return [{"role": "system", "content": self._system(system)}, {"role": "user", "content": self.user_text}]

    def _system(self, text: str) -> str | list[dict[str, Any]]:
        # Anthropic caches only what a request marks: the system prompt (the
        # policy) is marked, so every turn after the first reads it from the
        # cache. OpenAI and Gemini cache a repeated prefix without being told.
        if str(self.model.litellm_model).startswith("anthropic/"):
            return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        return text

    def _tool_loop(self) -> tuple[dict[str, float], str]:
        messages = self._messages()
        while True:
            reply = self._turn("chat", lambda limit: llm.chat(
                self.model, list(messages), tools=self.tools, max_tokens=limit, extra_headers=self.headers))
            if not reply.tool_calls:
                return parse_answer(reply.content), reply.content or ""
            messages.append({
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {"id": tc["id"], "type": "function",
                     "function": {"name": tc["name"], "arguments": tc["arguments"]}}
                    for tc in reply.tool_calls
                ],
            })
            for tc in reply.tool_calls:
                output = self._run_tool(tc)
                messages.append({"role": "tool", "tool_call_id": tc["id"], "content": output})
                self.exchange.append((tc, output))

    def _run_tool(self, tc: dict[str, str]) -> str:
        """The tool result the model sees. A bad call is the model's to see and
        fix; only a failure of the engine itself ends the conversation."""
        if tc["name"] not in self.offered:
            return json.dumps({"error": f"no tool named {tc['name']!r} is offered"})
        try:
            args = json.loads(tc["arguments"] or "{}")
        except ValueError:
            return json.dumps({"error": "the tool arguments are not valid JSON"})
        if not isinstance(args, dict) or "household" not in args:
            return json.dumps({"error": 'the arguments must be {"household": {...}}'})
        t0 = time.time()
        try:
            result = self.pool.call("calculate", {"household": args["household"]}, self.features)
        except calculator.InvalidHousehold as exc:
            self.spend.add_call("tool", t0, time.time(), error=exc)
            return json.dumps({"error": str(exc)})
        except Exception as exc:
            self.spend.add_call("tool", t0, time.time(), error=exc)
            raise
        self.spend.add_call("tool", t0, time.time())
        self.last_calculated = args["household"]
        return json.dumps(result, sort_keys=True)

    def _confirm(self, answer_text: str) -> dict[str, float]:
        # Explain what the model actually calculated; without a calculation,
        # the study's household.
        subject = self.last_calculated
        if subject is None:
            subject = {k: v for k, v in self.household.payload.items() if k != "id"}
        t0 = time.time()
        try:
            explained = self.pool.call("explain", {"household": subject}, self.features)
        except Exception as exc:
            self.spend.add_call("explain", t0, time.time(), error=exc)
            raise
        self.spend.add_call("explain", t0, time.time())
        items: list[dict[str, Any]] = [
            {"role": "system", "content": self._system(SYSTEM_PROMPT + TOOL_HINT)},
            {"role": "user", "content": self.user_text},
        ]
        for tc, output in self.exchange:
            items.append({"type": "function_call", "call_id": tc["id"], "name": tc["name"],
                          "arguments": tc["arguments"]})
            items.append({"type": "function_call_output", "call_id": tc["id"], "output": output})
        items.append({"role": "assistant", "content": answer_text})
        items.append({"role": "user", "content": CONFIRM_TEMPLATE.format(trace=explained["trace"])})
        reply = self._turn("responses", lambda limit: llm.responses(
            self.model, items, max_output_tokens=limit, extra_headers=self.headers,
            text_format={"type": "json_object"}))
        return parse_answer(reply.content)

    # --- one model turn, with its one escalation ---

    def _turn(self, kind: str, send: Callable[[int | None], Any]) -> Any:
        if self.turns >= MAX_MODEL_TURNS:
            raise UnparseableAnswer(f"no final answer within {MAX_MODEL_TURNS} model turns")
        self.turns += 1
        self.spend.checkpoint()
        reply = self._call(kind, send, None, escalated=False)
        if reply.finish_reason != "length":
            return reply
        self.spend.checkpoint()
        try:
            reply = self._call(kind, send, 2 * self.limit, escalated=True)
        except Exception as exc:
            if _is_timeout(exc):
                raise _escalated(EscalatedTimeout(
                    f"the request escalated after a truncated {kind} turn timed out")) from exc
            raise
        if reply.finish_reason == "length":
            raise _escalated(TruncationSurvived(
                f"a {kind} turn was still truncated at {2 * self.limit} output tokens"))
        return reply

    def _call(self, kind: str, send: Callable[[int | None], Any], limit: int | None, *, escalated: bool) -> Any:
        t0 = time.time()
        try:
            reply = send(limit)
        except Exception as exc:
            # confirmatory.engine.llm leaves the request's own times on the exception.
            start = getattr(exc, "call_start", t0)
            end = getattr(exc, "call_end", None) or time.time()
            self.spend.add_call(kind, start, end, error=exc, escalated_after_truncation=escalated)
            raise
        self.spend.add_call(kind, reply.start, reply.end, cost_usd=reply.cost_usd,
                            finish_reason=reply.finish_reason, escalated_after_truncation=escalated)
        return reply
