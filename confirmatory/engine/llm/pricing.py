"""Prices: every model's per-token price registered with litellm before the run, read back, and recorded.

A call litellm cannot price would be an uncounted dollar (the ceiling could
not hold), so ``prepare`` registers the design's prices (and the simulator's),
reads each back and refuses a model whose price does not come back.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confirmatory.core.billing import PriceTable, sim_table
from confirmatory.engine.llm import cost
from confirmatory.engine.llm.boundary import ModelLike, _lib, provider_of

if TYPE_CHECKING:
    from confirmatory.design.model import Price

# Providers whose model string names a deployment, not a model: litellm
# prices their replies by the model the response names, which cannot be
# known before the first call. Their price is checked at each reply instead
# (UnpricedCall pauses the model if one comes back unpriced).
PRICED_FROM_RESPONSE = ("azure", "azure_ai")


def price_problem(litellm_model: str) -> str | None:
    """Why litellm cannot price a call to ``litellm_model``, or None when it can.

    Asks ``litellm.cost_per_token`` with the model string exactly as a call
    requests it: that is the lookup behind a reply's ``response_cost``
    (measured: for every model string tried, it raises ``ModelNotMappedError``
    exactly when ``response_cost`` comes back None, and gives the same
    prices otherwise; ``get_model_info`` differs, e.g. it refuses OpenAI
    ``ft:`` fine-tunes that ``response_cost`` prices from their base model).
    A price of $0 for input and output alike is a problem too: every call
    would be counted as free.
    """
    lib = _lib()
    try:
        prompt_usd, completion_usd = lib.cost_per_token(
            model=litellm_model, prompt_tokens=1_000_000, completion_tokens=1_000_000
        )
    except lib.exceptions.ModelNotMappedError:
        return f"litellm has no price for {litellm_model}; the spend ceiling cannot be enforced"
    except Exception as exc:  # e.g. BadRequestError: no provider in the model string
        return (
            f"litellm cannot price {litellm_model} ({type(exc).__name__}: {str(exc)[:200]}); "
            "the spend ceiling cannot be enforced"
        )
    if not (prompt_usd > 0 or completion_usd > 0):
        return (
            f"litellm prices {litellm_model} at $0 per token; every call would count as free "
            "and the spend ceiling cannot be enforced"
        )
    return None


_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def prepare(models: Sequence[ModelLike], sim_prices: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Set litellm's process-wide state once, before any lane thread starts.

    Imports litellm (offline), silences its banners, stops its loggers from
    also propagating to the root logger (each has its own stderr handler, so
    every line would print twice under an application's logging setup), and
    registers every price litellm is to count calls at: a model's own
    ``price_usd_per_mtok`` from the design, else, for a model served by the
    simulated provider, the simulator's price. ``sim_prices`` maps a served
    name (``"sim-careful"``) to USD per (input, output) token; when None,
    models whose ``api_base`` is ``"simulator"`` get the simulator's own
    ``SIM_PRICES``. Raises ``ValueError`` if a price does not come back from
    litellm's cost lookup as given, or one registration changed another
    model's price (``register_prices``: a run would count calls wrong).
    """
    lib = _lib()
    lib.suppress_debug_info = True
    for name in _LITELLM_LOGGERS:
        logging.getLogger(name).propagate = False
    problems = register_prices(models, sim_prices)
    if problems:
        raise ValueError("; ".join(problems))


def price_entry(
    model: ModelLike, sim_prices: Mapping[str, tuple[float, float]] | None = None
) -> dict[str, float] | None:
    """The litellm price fields (USD per token) the runner registers for
    ``model``, or None when litellm's own table prices it."""
    design_price: Price | None = getattr(model, "price_usd_per_mtok", None)
    if design_price is not None:
        return design_price.per_token()
    table = _sim_table_for(model, sim_prices)
    if table is None:
        return None
    # litellm told the simulator's whole table, so that its response_cost
    # agrees with the runner's (cache reads and writes at their own prices).
    return {
        "input_cost_per_token": table.input / 1e6,
        "output_cost_per_token": table.output / 1e6,
        "cache_read_input_token_cost": (table.cached_input or table.input) / 1e6,
        "cache_creation_input_token_cost": (table.cache_write or table.input) / 1e6,
    }


def _register(litellm_model: str, entry: Mapping[str, float]) -> None:
    lib = _lib()
    fields = {**entry, "litellm_provider": provider_of(litellm_model), "mode": "chat"}
    # Registering a name litellm's table lacks also logs a warning about
    # cache prices; the runner always gives them, so it means nothing here.
    logger = logging.getLogger("LiteLLM")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        lib.register_model({litellm_model: fields})
    finally:
        logger.setLevel(level)


def _lookup(litellm_model: str) -> tuple[float, float] | None:
    """USD per million input / output tokens as litellm's cost lookup gives
    them now (the lookup behind every reply's ``response_cost``); None when
    it cannot price the model string."""
    try:
        got = _lib().cost_per_token(model=litellm_model, prompt_tokens=1_000_000, completion_tokens=1_000_000)
    except Exception:  # noqa: BLE001 - unpriced
        return None
    return float(got[0]), float(got[1])


def _same(got: tuple[float, float] | None, want: tuple[float, float] | None) -> bool:
    if got is None or want is None:
        return got is want
    return all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-15) for g, w in zip(got, want))


def _wanted(entry: Mapping[str, float]) -> tuple[float, float]:
    return entry["input_cost_per_token"] * 1e6, entry["output_cost_per_token"] * 1e6


def _readback_problem(litellm_model: str, entry: Mapping[str, float]) -> str | None:
    got, want = _lookup(litellm_model), _wanted(entry)
    if got is None:
        return f"the price given for {litellm_model} does not reach litellm's cost lookup"
    if not _same(got, want):
        return (
            f"litellm prices {litellm_model} at {got[0]:g} / {got[1]:g} USD per million input / output "
            f"tokens, not the {want[0]:g} / {want[1]:g} registered; calls would be counted wrong"
        )
    return None


def register_prices(
    models: Sequence[ModelLike], sim_prices: Mapping[str, tuple[float, float]] | None = None
) -> list[str]:
    """Register every price the design (or the simulator) gives, then check
    every model's price, each problem keyed ``models[i]...``.

    litellm files a registered price under its own table key, not only the
    string given (registering ``openai/gpt-4o-2024-08-06`` re-prices
    ``gpt-4o-2024-08-06`` too), and keeps one price per key: one model's
    registration can change another's price. So after all are registered,
    each model with a price of its own must read back at that price, and
    each model priced by litellm's table at the price it had before."""
    entries = [price_entry(m, sim_prices) for m in models]
    # The runner's own tables, frozen now (cost.frozen_table): a design's
    # price is the model's own; the simulator's catalogue; else litellm's map.
    for m in models:
        if getattr(m, "price_usd_per_mtok", None) is not None:
            continue
        sim = _sim_table_for(m, sim_prices)
        cost.freeze(m.litellm_model, sim, "litellm" if sim is None else "simulator")
    before = {i: _lookup(m.litellm_model) for i, (m, e) in enumerate(zip(models, entries)) if e is None}
    problems: list[str] = []
    first: dict[str, tuple[int, tuple[float, float]]] = {}
    for i, (m, e) in enumerate(zip(models, entries)):
        if e is None:
            continue
        if m.litellm_model in first and not _same(first[m.litellm_model][1], _wanted(e)):
            problems.append(
                f"models[{i}].price_usd_per_mtok: models[{first[m.litellm_model][0]}] names the same "
                f"litellm_model {m.litellm_model!r} at another price; litellm keeps one price per "
                "model string, so one of them would be counted at the other's price"
            )
        first.setdefault(m.litellm_model, (i, _wanted(e)))
        _register(m.litellm_model, e)
    for i, (m, e) in enumerate(zip(models, entries)):
        if e is not None:
            problem = _readback_problem(m.litellm_model, e)
            if problem and not any(p.startswith(f"models[{i}].") for p in problems):
                problems.append(
                    f"models[{i}].price_usd_per_mtok: {problem} (another model's price shares litellm's entry for it?)"
                )
        elif not _same(now := _lookup(m.litellm_model), was := before[i]):
            problems.append(
                f"models[{i}].litellm_model: registering the other models' prices changed litellm's price for "
                f"{m.litellm_model} (from {was} to {now} USD per million input / output tokens: they share a "
                "price entry); give it a price_usd_per_mtok of its own, the same as the other's, or name it apart"
            )
    return problems


def price_record(model: ModelLike) -> dict[str, Any]:
    """What config.json says a model's calls are counted at: the price
    litellm's lookup now gives for the model string (after ``prepare``), in
    USD per million tokens, and where it comes from: ``"design"`` (the
    model's ``price_usd_per_mtok``), ``"simulator"`` or ``"litellm"`` (its
    own table, of the version the runner identity names), or ``"reply"``
    with no price for an Azure deployment without a design price (litellm
    prices each reply by the model the reply names)."""
    if getattr(model, "price_usd_per_mtok", None) is not None:
        source = "design"
    elif getattr(model, "api_base", None) == "simulator":
        source = "simulator"
    elif provider_of(model.litellm_model) in PRICED_FROM_RESPONSE:
        return {"source": "reply", "input_usd_per_mtok": None, "output_usd_per_mtok": None}
    else:
        source = "litellm"
    prices = _lookup(model.litellm_model) or (None, None)
    record: dict[str, Any] = {"source": source, "input_usd_per_mtok": prices[0], "output_usd_per_mtok": prices[1]}
    frozen = cost.frozen_table(model)
    record["table"] = None if frozen is None else frozen[0].as_dict()
    if source == "litellm":
        from importlib import metadata  # noqa: PLC0415 - only for config.json

        try:
            record["litellm_version"] = metadata.version("litellm")
        except metadata.PackageNotFoundError:
            record["litellm_version"] = None
        record["price_map_source"] = price_map_source()
    return record


def price_map_source() -> str:
    """Where litellm's price map came from in this process."""
    lib = _lib()
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "").lower() == "true" or os.environ.get(
        "LITELLM_OFFLINE_MODE", ""
    ).lower() in ("1", "true"):
        return "litellm's bundled model_prices_and_context_window_backup.json (offline mode)"
    return f"litellm's remote map {getattr(lib, 'model_cost_map_url', '?')}, else its bundled backup"


def _sim_table_for(model: ModelLike, sim_prices: Mapping[str, tuple[float, float]] | None) -> PriceTable | None:
    """The simulator's table for ``model`` (its catalogue's, for a model it serves at its own prices)."""
    prices = _sim_prices_for(model, sim_prices)
    if prices is None:
        return None
    return sim_table(prices, model.litellm_model.rsplit("/", 1)[-1])


def _sim_prices_for(
    model: ModelLike, sim_prices: Mapping[str, tuple[float, float]] | None
) -> tuple[float, float] | None:
    served = model.litellm_model.rsplit("/", 1)[-1]
    if sim_prices is not None:
        return sim_prices.get(served) or sim_prices.get(model.litellm_model)
    if getattr(model, "api_base", None) == "simulator":
        from confirmatory.core.simulated import SIM_PRICES  # noqa: PLC0415 - stdlib-only, small

        return SIM_PRICES.get(served)
    return None


def call_limits(litellm_model: str) -> tuple[int | None, int | None]:
    """The most input and output tokens one call to ``litellm_model`` can
    carry, as litellm's model table gives them (None where it does not):
    what ``confirmatory check`` bounds the costliest single call by."""
    try:
        info = _lib().get_model_info(litellm_model)
    except Exception:  # noqa: BLE001 - not in litellm's table
        return None, None

    def tokens(key: str) -> int | None:
        value = info.get(key) if isinstance(info, Mapping) else getattr(info, key, None)
        return value if type(value) is int and value > 0 else None

    return tokens("max_input_tokens"), tokens("max_output_tokens")


def call_cost_usd(litellm_model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What litellm's cost lookup charges for one call of that many tokens
    (tiered prices included), or None when it cannot price the model."""
    try:
        got = _lib().cost_per_token(
            model=litellm_model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # noqa: BLE001 - unpriced
        return None
    return float(got[0]) + float(got[1])
