"""The minimal design's harness: one short tool-using conversation per attempt.

A deliberately small harness (the reference study's harness is the full one)
so that ``minimal.toml`` has real code to pin and to run: it asks for a
household's annual net income, offers the ``calculate`` tool when the arm's
features list it, asks the engine for an explain trace when the arm says
``explain``, and parses ``{"net_income": number}`` from the final reply.

``DESCRIBE`` declares the prompts and the tool schema so that the run config
can record each with its sha256.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from confirmatory.core.errors import TruncationSurvived, UnparseableAnswer

SYSTEM_PROMPT = (
    "You compute a household's annual net income under the study's rules. "
    'Reply with one JSON object: {"net_income": <number>}.'
)
USER_PROMPT = "Household:\n{household}\nWhat is its annual net income?"
CALCULATE_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Compute a household's taxes, benefits and net income.",
        "parameters": {
            "type": "object",
            "properties": {"household": {"type": "object"}},
            "required": ["household"],
        },
    },
}
DESCRIBE = {
    "prompts": {"system": SYSTEM_PROMPT, "user": USER_PROMPT},
    "documents": {},
    "tool_schemas": {"calculate": CALCULATE_TOOL},
}
MAX_TURNS = 4  # a tool call and an answer need two; the rest is slack for a chatty model
ATTEMPT_HEADER = "X-Confirmatory-Attempt"
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def run(model: Any, household: Any, arm: Any, pool: Any, spend: Any, clock: Any) -> dict[str, Any]:
    """Hold one conversation; report every call to ``spend`` as it ends."""
    from confirmatory.engine import llm  # lazily: importing the harness must not load litellm

    features = dict(arm.features)
    tools = [CALCULATE_TOOL] if "calculate" in (features.get("tools") or []) else None
    payload = {k: v for k, v in household.payload.items() if k != "id"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_PROMPT.format(household=json.dumps(payload, sort_keys=True))},
    ]
    explained = None
    for _turn in range(MAX_TURNS):
        spend.checkpoint()
        start = time.time()
        try:
            reply = llm.chat(model, messages, tools=tools, extra_headers={ATTEMPT_HEADER: spend.attempt_key})
        except Exception as exc:
            spend.add_call("chat", start, time.time(), error=exc)
            raise
        spend.add_call("chat", reply.start, reply.end, cost_usd=reply.cost_usd, finish_reason=reply.finish_reason)
        if reply.finish_reason == "length":
            raise TruncationSurvived("the reply stopped at the length limit")
        if not reply.tool_calls:
            return {"answer": _parse(reply.content), "explain": explained}
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.tool_calls]})
        for call in reply.tool_calls:
            result = _engine(pool, spend, "calculate", call["arguments"], features)
            if features.get("explain"):
                explained = _engine(pool, spend, "explain", call["arguments"], features, kind="explain")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    raise UnparseableAnswer(f"no final answer after {MAX_TURNS} turns")


def _engine(pool: Any, spend: Any, op: str, arguments: str, features: dict, kind: str = "tool") -> Any:
    start = time.time()
    try:
        args = json.loads(arguments or "{}")
        result = pool.call(op, {"household": args.get("household")}, features)
    except Exception as exc:
        spend.add_call(kind, start, time.time(), error=exc)
        raise
    spend.add_call(kind, start, time.time())
    return result


def _parse(content: str | None) -> dict[str, float]:
    """``{"net_income": number}`` from the reply: a fenced block, the whole text,
    or the first JSON object in it (models write "Answer: {...}")."""
    text = content or ""
    fenced = _FENCE.search(text)
    chunks = [fenced.group(1)] if fenced else [text]
    decoder = json.JSONDecoder()
    chunks += [text[m.start():] for m in re.finditer(r"\{", text)]
    for chunk in chunks:
        try:
            obj, _ = decoder.raw_decode(chunk.strip())
            value = obj["net_income"]
        except (ValueError, KeyError, TypeError):
            continue
        if type(value) in (int, float) and value == value:
            return {"net_income": float(value)}
    raise UnparseableAnswer(f"final answer is not {{'net_income': number}}: {text[:200]!r}")
