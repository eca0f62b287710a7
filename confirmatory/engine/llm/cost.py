"""The runner's own cost of a call: the usage the provider sent, by kind, times the model's frozen price table.

litellm's ``response_cost`` is kept beside it as a cross-check, never
counted: a call where the two differ by more than 1 % (or litellm gives
none) carries a ``cost_disagreement`` (docs/LITELLM.md "What a call costs").

The usage is read from the provider's own reply body as litellm received it
(its post-call hook, ``boundary._ours.bodies``), in the vendor's field
names; only when no body with a usage is there is litellm's normalised
usage read instead.

Each model's table is frozen when the runner registers the prices
(``pricing.register_prices``): the design's ``price_usd_per_mtok``, the
simulator's catalogue, or (``price = "litellm"``) litellm's map as it stood
then. A later change to litellm's map does not move the runner's cost.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confirmatory.core import billing
from confirmatory.core.billing import PriceTable
from confirmatory.core.money import NUSD_PER_USD, to_nusd
from confirmatory.engine.llm.boundary import ModelLike, _lib, _ours, provider_of

# litellm providers whose replies are billed by Anthropic's or Gemini's rule.
_ANTHROPIC = ("anthropic",)
_GEMINI = ("gemini", "vertex_ai", "vertex_ai_beta")

_tables_lock = threading.Lock()
# litellm_model -> (the frozen table, where it came from)
_tables: dict[str, tuple[PriceTable, str]] = {}


def api_family(litellm_model: str) -> str:
    """``"anthropic"``, ``"gemini"`` or ``"openai"`` (chat and Responses): the
    billing rule a model's replies follow."""
    prefix = litellm_model.split("/", 1)[0] if "/" in litellm_model else ""
    provider = prefix if prefix in ("openai", *_ANTHROPIC, *_GEMINI) else provider_of(litellm_model)
    if provider in _ANTHROPIC:
        return "anthropic"
    if provider in _GEMINI:
        return "gemini"
    return "openai"


def shape_of(litellm_model: str, kind: str) -> str:
    """The billing shape of one call: ``responses`` for a Responses call, else the family's."""
    family = api_family(litellm_model)
    if family == "openai":
        return "responses" if kind == "responses" else "chat"
    return family


def billed_kinds(litellm_model: str) -> tuple[str, ...]:
    """Every kind of token a call to ``litellm_model`` can be billed for."""
    family = api_family(litellm_model)
    shapes = ("chat", "responses") if family == "openai" else (family,)
    return tuple(k for k in billing.KINDS if any(k in billing.BILLED_KINDS[s] for s in shapes))


def missing_kinds(litellm_model: str, table: PriceTable) -> list[str]:
    """The kinds ``litellm_model``'s API can bill that ``table`` has no price for."""
    return [k for k in billed_kinds(litellm_model) if table.price(k) is None]


def litellm_table(litellm_model: str) -> PriceTable | None:
    """litellm's price map for ``litellm_model`` now, as a table (None when
    it cannot price it). Input and output through the lookup behind
    ``response_cost``; cache and reasoning prices from its model info,
    each at the price litellm itself then counts it at (cache reads and
    writes at the input price, reasoning at the output price)."""
    lib = _lib()
    try:
        p_in, p_out = lib.cost_per_token(model=litellm_model, prompt_tokens=1_000_000, completion_tokens=1_000_000)
    except Exception:  # noqa: BLE001 - unpriced
        return None
    try:
        info = lib.get_model_info(litellm_model)
    except Exception:  # noqa: BLE001 - priced, but no info (e.g. an ft: model)
        info = {}

    def per_mtok(key: str, default: float) -> float:
        value = info.get(key) if isinstance(info, Mapping) else None
        return float(value) * 1e6 if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    return PriceTable(
        input=float(p_in),
        output=float(p_out),
        cached_input=per_mtok("cache_read_input_token_cost", float(p_in)),
        cache_write=per_mtok("cache_creation_input_token_cost", float(p_in)),
        reasoning=per_mtok("output_cost_per_reasoning_token", float(p_out)),
    )


def freeze(litellm_model: str, table: PriceTable | None, source: str) -> None:
    """Freeze ``litellm_model``'s table (litellm's map now when ``table`` is None)."""
    if table is None:
        table = litellm_table(litellm_model)
        if table is None:
            with _tables_lock:
                _tables.pop(litellm_model, None)
            return
    with _tables_lock:
        _tables[litellm_model] = (table, source)


def frozen_table(model: ModelLike) -> tuple[PriceTable, str] | None:
    """The table ``model``'s calls are counted at, and its source; a design
    price is the model's own, else the one frozen at registration, else
    (a model never registered) litellm's map now, frozen from then on."""
    design_price = getattr(model, "price_usd_per_mtok", None)
    if design_price is not None:
        return design_price.table(), "design"
    with _tables_lock:
        got = _tables.get(model.litellm_model)
    if got is None:
        freeze(model.litellm_model, None, "litellm")
        with _tables_lock:
            got = _tables.get(model.litellm_model)
    return got


@dataclass(frozen=True)
class Bill:
    """One call's cost: its tokens by kind, the runner's cost (None when it
    has no table for the model), litellm's, and their disagreement."""

    shape: str
    tokens: dict[str, int]
    runner_nusd: int | None
    litellm_nusd: int | None
    disagreement: dict[str, Any] | None

    @property
    def runner_usd(self) -> float | None:
        """The runner's cost as dollars (exact back to nano-dollars under $10**6)."""
        return None if self.runner_nusd is None else self.runner_nusd / NUSD_PER_USD

    def fields(self) -> dict[str, Any]:
        """What a call's record keeps of it (docs/RECORDS.md)."""
        return {
            "billing_shape": self.shape,
            "tokens": dict(self.tokens),
            "runner_cost_nusd": self.runner_nusd,
            "litellm_cost_nusd": self.litellm_nusd,
            "cost_disagreement": self.disagreement,
        }


_USAGE_KEY = {"chat": "usage", "responses": "usage", "anthropic": "usage", "gemini": "usageMetadata"}


def raw_body() -> dict[str, Any] | None:
    """The last reply body (a JSON object) the provider sent this thread's current call, or None."""
    for raw in reversed(getattr(_ours, "bodies", None) or ()):
        try:
            body = json.loads(raw)
        except (TypeError, ValueError):
            continue
        if isinstance(body, dict):
            return body
    return None


def raw_usage(shape: str) -> dict[str, Any] | None:
    """The usage of the last reply body the provider sent this thread's
    current call, in its own field names, or None."""
    key = _USAGE_KEY[shape]
    for raw in reversed(getattr(_ours, "bodies", None) or ()):
        try:
            body = json.loads(raw)
        except (TypeError, ValueError):
            continue
        usage = body.get(key) if isinstance(body, dict) else None
        if isinstance(usage, dict):
            return usage
    return None


def _as_dict(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    if isinstance(usage, Mapping):
        return {
            k: _as_dict(v) if not isinstance(v, (int, float, str, bool, type(None))) else v for k, v in usage.items()
        }
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        try:
            got = dump()
        except Exception:  # noqa: BLE001 - not a pydantic object after all
            got = None
        if isinstance(got, Mapping):
            return dict(got)
    return {k: v for k, v in vars(usage).items() if not k.startswith("_")} if hasattr(usage, "__dict__") else {}


def normalised_usage(shape: str, usage: Any) -> dict[str, Any]:
    """litellm's normalised usage, in the shape's own field names (used only
    when no raw body is there: litellm's chat usage has OpenAI's names for
    every provider, with Anthropic's cache counts beside them)."""
    got = _as_dict(usage)
    if shape == "anthropic":
        write = int(got.get("cache_creation_input_tokens") or 0)
        read = int(got.get("cache_read_input_tokens") or 0)
        return {
            "input_tokens": max(0, int(got.get("prompt_tokens") or 0) - write - read),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "output_tokens": int(got.get("completion_tokens") or 0),
        }
    if shape == "gemini":
        details = got.get("completion_tokens_details") or {}
        reasoning = int((details or {}).get("reasoning_tokens") or 0) if isinstance(details, Mapping) else 0
        cached = got.get("prompt_tokens_details") or {}
        return {
            "promptTokenCount": int(got.get("prompt_tokens") or 0),
            "cachedContentTokenCount": int((cached or {}).get("cached_tokens") or 0)
            if isinstance(cached, Mapping)
            else 0,
            "candidatesTokenCount": max(0, int(got.get("completion_tokens") or 0) - reasoning),
            "thoughtsTokenCount": reasoning,
        }
    return got


def bill(model: ModelLike, kind: str, usage: Any, litellm_cost_usd: float | None) -> Bill:
    """The cost of one reply of ``model`` (``kind`` ``chat`` or ``responses``)."""
    shape = shape_of(model.litellm_model, kind)
    sent = raw_usage(shape)
    tokens = billing.tokens_by_kind(shape, sent if sent is not None else normalised_usage(shape, usage))
    frozen = frozen_table(model)
    runner: int | None = None
    if frozen is not None:
        try:
            runner = billing.cost_nusd(tokens, frozen[0])
        except ValueError:  # a kind the table lacks (refused by the preflight for a design's model)
            runner = None
    try:
        theirs = None if litellm_cost_usd is None else to_nusd(litellm_cost_usd)
    except (TypeError, ValueError):
        theirs = None
    gap = billing.disagreement(runner, theirs) if runner is not None else None
    return Bill(shape=shape, tokens=tokens, runner_nusd=runner, litellm_nusd=theirs, disagreement=gap)
