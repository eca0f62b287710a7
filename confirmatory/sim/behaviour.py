"""What a simulated model says: the conversation policy of the sim models.

Pure and deterministic: the reply is a function of the seed, the served model
name, the attempt key, the call index and the request. The server (server.py)
turns a ``Turn`` into the body of whichever API shape was asked for.

Policy, shared by every sim model (the reference study's conversation):
* tools offered and no tool result yet -> call ``calculate`` with
  ``{"household": <the household from the first user message>}``;
* a tool result present -> answer ``{"net_income": <its net_income>}``;
* no tools -> answer with a rule of thumb (0.75 x the household's incomes).
``sim-sloppy`` sometimes perturbs or garbles the answer; ``sim-truncates``
often stops at the length limit the first time it sees a request.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from confirmatory.core.simulated import SIM_MODELS as SIM_MODELS  # noqa: E402,F401 - the catalogue, kept in core
from confirmatory.core.simulated import SIM_PRICES as SIM_PRICES  # noqa: E402,F401
from confirmatory.core.simulated import SIM_THINKS
from confirmatory.sim.faults import draw

SLOPPY_GARBLED_RATE = 0.15  # answer that does not parse
SLOPPY_WRONG_RATE = 0.20  # a parseable but perturbed number
TRUNCATES_RATE = 0.6  # first sight of a request ends at the length limit

_CODE_BLOCK = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def count_tokens(text: str) -> int:
    """A crude, deterministic token count: about four characters a token."""
    return max(1, (len(text) + 3) // 4)


@dataclass(frozen=True, slots=True)
class Conversation:
    """A request reduced to what the policy reads, whichever API shape carried it."""

    texts: tuple[tuple[str, str], ...]  # (role, text) in order; tool results have role "tool"
    tool_names: tuple[str, ...]  # function tools offered
    tool_results: tuple[str, ...]  # text of each tool result, in order
    json_mode: bool  # a JSON object response format was asked for
    tools_text: str = ""  # the tool schemas as sent (they count as prompt tokens)

    def prompt_tokens(self) -> int:
        # A few tokens per message for the role framing, as real tokenisers charge.
        total = sum(count_tokens(text) + 3 for _role, text in self.texts)
        if self.tools_text:
            total += count_tokens(self.tools_text)
        return total

    def segments(self) -> tuple[list[str], list[int]]:
        """The prompt as a provider's cache sees it: the tool schemas, then
        each message, in order, with each one's tokens (they sum to
        ``prompt_tokens()``)."""
        segments = [f"{role}\0{text}" for role, text in self.texts]
        sizes = [count_tokens(text) + 3 for _role, text in self.texts]
        if self.tools_text:
            segments.insert(0, "tools\0" + self.tools_text)
            sizes.insert(0, count_tokens(self.tools_text))
        return segments, sizes

    def first_user_text(self) -> str:
        for role, text in self.texts:
            if role == "user":
                return text
        return ""


@dataclass(frozen=True, slots=True)
class Turn:
    """One reply of a sim model, before it is given an API shape."""

    content: str | None
    tool_call: tuple[str, str] | None  # (name, arguments as a JSON string)
    finish_reason: str  # "stop", "tool_calls" or "length"
    prompt_tokens: int  # all of the prompt, cached and cache-written tokens included
    completion_tokens: int  # the visible output (reasoning tokens are counted apart)
    notes: dict[str, Any] = field(default_factory=dict)
    cached_tokens: int = 0  # of prompt_tokens, read from the prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens, written to it (Anthropic's cache_control)
    reasoning_tokens: int = 0  # a thinking model's hidden reasoning
    thought: str = ""  # its text (Anthropic's thinking block)


def text_of(content: Any) -> str:
    """Text of a message content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or part.get("output") or ""))
            else:
                parts.append(str(part))
        return "".join(parts)
    return json.dumps(content, sort_keys=True)


def household_from(text: str) -> Any:
    """The household object in a user message: a fenced JSON block, the whole
    message, or the first JSON object found in it; ``{}`` when there is none."""
    candidates = [m.group(1) for m in _CODE_BLOCK.finditer(text)] + [text]
    for candidate in candidates:
        try:
            return json.loads(candidate.strip())
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            obj, _end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        return obj
    return {}


def _income_total(obj: Any, under_income: bool = False) -> float:
    """Sum of the numbers under any key that mentions income."""
    if isinstance(obj, bool):
        return 0.0
    if isinstance(obj, (int, float)):
        return float(obj) if under_income else 0.0
    if isinstance(obj, dict):
        return sum(_income_total(v, under_income or "income" in str(k).lower()) for k, v in obj.items())
    if isinstance(obj, list):
        return sum(_income_total(v, under_income) for v in obj)
    return 0.0


def rule_of_thumb(household: Any) -> float:
    """The answer a model gives without a calculator: three quarters of the incomes."""
    return round(0.75 * _income_total(household), 2)


def _tool_net_income(result_text: str) -> float | None:
    try:
        result = json.loads(result_text)
    except ValueError:
        return None
    if isinstance(result, dict) and isinstance(result.get("net_income"), (int, float)):
        return float(result["net_income"])
    return None


def _answer_text(answer: dict[str, Any], json_mode: bool) -> str:
    body = json.dumps(answer, sort_keys=True)
    return body if json_mode else f"Answer: {body}"


def decide(conv: Conversation, *, model: str, seed: int, attempt: str, call: int, first_try: bool) -> Turn:
    """The reply of sim ``model`` to ``conv`` (see the module docstring)."""
    prompt = conv.prompt_tokens()
    tool_call: tuple[str, str] | None = None
    content: str | None = None
    if conv.tool_names and not conv.tool_results:
        name = "calculate" if "calculate" in conv.tool_names else conv.tool_names[0]
        household = household_from(conv.first_user_text())
        tool_call = (name, json.dumps({"household": household}, sort_keys=True))
    else:
        number = _tool_net_income(conv.tool_results[-1]) if conv.tool_results else None
        if number is None:
            number = rule_of_thumb(household_from(conv.first_user_text()))
        content = _answer_text({"net_income": number}, conv.json_mode)
        if model == "sim-sloppy":
            d = draw(seed, model, attempt, call, "sloppy")
            if d < SLOPPY_GARBLED_RATE:
                content = f"The net income comes to roughly {number:,.0f}, give or take."
            elif d < SLOPPY_GARBLED_RATE + SLOPPY_WRONG_RATE:
                wrong = round(number * 1.1 + 250.0, 2)
                content = _answer_text({"net_income": wrong}, conv.json_mode)

    out_text = content if content is not None else (tool_call[1] if tool_call else "")
    if model == "sim-truncates" and first_try and draw(seed, model, attempt, call, "truncates") < TRUNCATES_RATE:
        return truncated(out_text, prompt)
    return Turn(
        content=content,
        tool_call=tool_call,
        finish_reason="tool_calls" if tool_call else "stop",
        prompt_tokens=prompt,
        completion_tokens=count_tokens(out_text),
    )


def truncated(full_text: str, prompt_tokens: int) -> Turn:
    """The reply cut at the length limit: half the text, no tool call."""
    partial = full_text[: len(full_text) // 2]
    return Turn(
        content=partial,
        tool_call=None,
        finish_reason="length",
        prompt_tokens=prompt_tokens,
        completion_tokens=count_tokens(partial),
    )


def thinking(turn: Turn, model: str) -> Turn:
    """``turn`` with the reasoning a thinking model (``SIM_THINKS``) did
    before it: a deterministic thought, about twice the reply's length."""
    if model not in SIM_THINKS:
        return turn
    said = turn.content if turn.content is not None else (turn.tool_call[1] if turn.tool_call else "")
    thought = f"The household's incomes first, then the rule, then the check: {said} {said}"
    return dataclasses.replace(turn, reasoning_tokens=count_tokens(thought), thought=thought)


def refused(prompt_tokens: int) -> Turn:
    """A reply stopped by the provider's safety filter: no content, no call."""
    return Turn(
        content=None, tool_call=None, finish_reason="content_filter", prompt_tokens=prompt_tokens, completion_tokens=0
    )


def unparseable(prompt_tokens: int) -> Turn:
    """A final answer that no JSON parser accepts (the ``bad_answer`` fault)."""
    text = "I would estimate the net income at somewhere around forty thousand."
    return Turn(
        content=text,
        tool_call=None,
        finish_reason="stop",
        prompt_tokens=prompt_tokens,
        completion_tokens=count_tokens(text),
    )
