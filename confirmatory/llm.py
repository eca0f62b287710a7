"""The one boundary to litellm: every import of it happens in this module, lazily.

A cold litellm import costs seconds and ~190 MB, tries the network unless
``LITELLM_OFFLINE_MODE`` is set first, and starts background threads; so the
import happens inside functions, and ``prepare`` sets litellm's globals once,
before any lane thread starts (docs/LITELLM.md).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

_import_lock = threading.Lock()
_litellm: Any = None


def _lib() -> Any:
    """Import litellm once, offline, quiet."""
    global _litellm
    with _import_lock:
        if _litellm is None:
            # Without offline mode the import fetches the price list from the
            # internet and keeps a thread that can replace model_cost mid-run.
            os.environ["LITELLM_OFFLINE_MODE"] = "true"
            saved_tiktoken = os.environ.get("TIKTOKEN_CACHE_DIR")
            import litellm  # noqa: PLC0415 - the whole point of this module

            # The import overwrites TIKTOKEN_CACHE_DIR; give the user theirs back.
            if saved_tiktoken is not None:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved_tiktoken
            litellm.suppress_debug_info = True
            litellm.num_retries = None
            _litellm = litellm
            # Whoever imports litellm through this module (prepare, a harness's
            # first call): litellm calls made around it are told to the attempt.
            _install_direct_call_hook(litellm)
        return _litellm


def provider_of(litellm_model: str) -> str:
    """The provider litellm routes ``litellm_model`` to (``"openai"``, ``"anthropic"``, ...)."""
    lib = _lib()
    try:
        _model, provider, _key, _base = lib.get_llm_provider(litellm_model)
    except Exception:  # litellm raises BadRequestError for an unknown provider
        return "unknown"
    return str(provider)


def supported_params(litellm_model: str) -> list[str]:
    """Parameters litellm knows the provider accepts ([] when it does not know the model)."""
    lib = _lib()
    try:
        params = lib.get_supported_openai_params(model=litellm_model)
    except Exception:
        params = None
    return sorted(params or [])


def missing_keys(litellm_model: str, api_base: str | None = None) -> list[str]:
    """Environment variables litellm needs for this model and does not find.

    A model served by the simulated provider, or any explicit loopback
    ``api_base``, needs none.
    """
    if api_base == "simulator" or (api_base or "").startswith(("http://127.0.0.1", "http://localhost")):
        return []
    lib = _lib()
    # A key set to "" or blanks is missing (litellm counts it as set, and
    # every call then fails with "Missing credentials"): hidden from the
    # check. Called before any thread starts; the environment is restored.
    blank = {k: v for k, v in os.environ.items() if not v.strip()}
    for k in blank:
        del os.environ[k]
    try:
        result = lib.validate_environment(model=litellm_model, api_base=api_base)
    except Exception:
        return []
    finally:
        os.environ.update(blank)
    return sorted(result.get("missing_keys") or [])


def route_problem(litellm_model: str, api_base: str | None) -> str | None:
    """Why litellm cannot tell which provider serves ``litellm_model``, or None.

    A model string without a provider litellm knows (``my-model`` for a local
    server instead of ``openai/my-model``, ``opnai/gpt-4o``) fails every
    call with a BadRequestError, which would be recorded as the model's own
    failure (class ``model``): refused before the run instead.
    """
    lib = _lib()
    try:
        lib.get_llm_provider(model=litellm_model, api_base=api_base)
    except Exception as exc:  # noqa: BLE001 - litellm raises BadRequestError, and others on odd input
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (f"litellm cannot route {litellm_model!r} to a provider ({first[:160]}); "
                "write it as provider/model, e.g. openai/<name> for an OpenAI-compatible server")
    return None


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
        return (f"litellm cannot price {litellm_model} ({type(exc).__name__}: {str(exc)[:200]}); "
                "the spend ceiling cannot be enforced")
    if not (prompt_usd > 0 or completion_usd > 0):
        return (f"litellm prices {litellm_model} at $0 per token; every call would count as free "
                "and the spend ceiling cannot be enforced")
    return None


_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def prepare(
    models: Sequence[ModelLike], sim_prices: Mapping[str, tuple[float, float]] | None = None
) -> None:
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
    design_price = getattr(model, "price_usd_per_mtok", None)
    if design_price is not None:
        return design_price.per_token()
    prices = _sim_prices_for(model, sim_prices)
    if prices is None:
        return None
    in_cost, out_cost = (float(p) for p in prices)
    return {"input_cost_per_token": in_cost, "output_cost_per_token": out_cost,
            "cache_read_input_token_cost": in_cost, "cache_creation_input_token_cost": in_cost}


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
        return (f"litellm prices {litellm_model} at {got[0]:g} / {got[1]:g} USD per million input / output "
                f"tokens, not the {want[0]:g} / {want[1]:g} registered; calls would be counted wrong")
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
    before = {i: _lookup(m.litellm_model) for i, (m, e) in enumerate(zip(models, entries)) if e is None}
    problems: list[str] = []
    first: dict[str, tuple[int, tuple[float, float]]] = {}
    for i, (m, e) in enumerate(zip(models, entries)):
        if e is None:
            continue
        if m.litellm_model in first and not _same(first[m.litellm_model][1], _wanted(e)):
            problems.append(f"models[{i}].price_usd_per_mtok: models[{first[m.litellm_model][0]}] names the same "
                            f"litellm_model {m.litellm_model!r} at another price; litellm keeps one price per "
                            "model string, so one of them would be counted at the other's price")
        first.setdefault(m.litellm_model, (i, _wanted(e)))
        _register(m.litellm_model, e)
    for i, (m, e) in enumerate(zip(models, entries)):
        if e is not None:
            problem = _readback_problem(m.litellm_model, e)
            if problem and not any(p.startswith(f"models[{i}].") for p in problems):
                problems.append(f"models[{i}].price_usd_per_mtok: {problem} (another model's price shares "
                                "litellm's entry for it?)")
        elif not _same(now := _lookup(m.litellm_model), was := before[i]):
            problems.append(
                f"models[{i}].litellm_model: registering the other models' prices changed litellm's price for "
                f"{m.litellm_model} (from {was} to {now} USD per million input / output tokens: they share a "
                "price entry); give it a price_usd_per_mtok of its own, the same as the other's, or name it apart")
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
    return {"source": source, "input_usd_per_mtok": prices[0], "output_usd_per_mtok": prices[1]}


def _sim_prices_for(
    model: ModelLike, sim_prices: Mapping[str, tuple[float, float]] | None
) -> tuple[float, float] | None:
    served = model.litellm_model.rsplit("/", 1)[-1]
    if sim_prices is not None:
        return sim_prices.get(served) or sim_prices.get(model.litellm_model)
    if getattr(model, "api_base", None) == "simulator":
        from confirmatory.sim.behaviour import SIM_PRICES  # noqa: PLC0415 - stdlib-only, small

        return SIM_PRICES.get(served)
    return None


# ---------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------

# An api_base on loopback is the simulated provider, a local stand-in or a
# local gateway. The simulated provider needs a non-empty key but no real one:
# it is sent SIM_API_KEY, never the environment's. Any other loopback server
# (an ssh tunnel to a provider, a litellm proxy, vLLM with --api-key) gets the
# key litellm finds in the environment, and SIM_API_KEY only when there is none
# (a local server that checks no key).
_LOOPBACK = ("http://127.0.0.1", "http://localhost", "http://[::1]")
SIM_API_KEY = "sim-no-key"
_sim_bases: set[str] = set()
_env_key_found: dict[tuple[str, str], bool] = {}


def serve_as_simulator(api_base: str, serving: bool = True) -> None:
    """Mark ``api_base`` as the simulated provider's (``SimProvider`` does,
    while it serves): calls to it carry SIM_API_KEY, never a real key."""
    (_sim_bases.add if serving else _sim_bases.discard)(api_base.rstrip("/"))


def _loopback_key(model: Any, api_base: str) -> str | None:
    """SIM_API_KEY for the simulated provider, or for a loopback server when
    the environment holds no key for the model; else None (litellm's own key)."""
    if api_base.rstrip("/") in _sim_bases:
        return SIM_API_KEY
    key = (model.litellm_model, api_base)
    if key not in _env_key_found:
        try:
            found = not _lib().validate_environment(model=model.litellm_model).get("missing_keys")
        except Exception:  # noqa: BLE001 - a provider litellm cannot check: no key of its own
            found = False
        _env_key_found[key] = found
    return None if _env_key_found[key] else SIM_API_KEY


class ModelLike(Protocol):
    """What a call needs of a design's ``ModelSpec`` (duck-typed).

    An optional ``require_price`` attribute (``AdHocModel``'s) may turn the
    price check off; without it, a reply litellm cannot price raises
    ``UnpricedCall``.
    """

    name: str
    litellm_model: str
    params: Mapping[str, Any]
    timeout_s: float
    api_base: str | None


@dataclass(frozen=True)
class AdHocModel:
    """A ``ModelLike`` for a model outside any design (probes, tests).

    ``require_price``: whether a reply litellm cannot price raises
    ``UnpricedCall``. A design's models always require one (a ``ModelLike``
    without this attribute does); an ad-hoc model is counted against no cap
    or ceiling, so by default its unpriced reply comes back with
    ``cost_usd=None`` (``probe-seed`` on a model litellm has no price for).
    """

    name: str
    litellm_model: str
    api_base: str | None = None
    timeout_s: float = 120.0
    params: Mapping[str, Any] = field(default_factory=dict)
    require_price: bool = False
    price_usd_per_mtok: Any = None  # a design.Price, registered by prepare / register_prices


@dataclass(frozen=True, slots=True)
class Reply:
    """One model call that returned.

    ``finish_reason`` is ``"length"`` for a truncated turn in either API
    (a Responses ``incomplete`` with reason ``max_output_tokens``).
    ``cost_usd`` is litellm's float: convert it once, with
    ``money.to_nusd``, where it is counted. It is never None for a design's
    model: ``chat``/``responses`` raise ``UnpricedCall`` instead (None only
    for an ``AdHocModel`` that does not ``require_price``).
    ``usage`` holds ``input_tokens``, ``output_tokens``, ``total_tokens``
    in both APIs. ``start``/``end`` are raw ``time.time()``.
    """

    kind: str  # "chat" or "responses"
    content: str | None
    tool_calls: tuple[dict[str, str], ...]  # {"id", "name", "arguments" (a JSON string)}
    finish_reason: str | None
    cost_usd: float | None
    usage: dict[str, int] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0


def is_loopback(api_base: str | None) -> bool:
    """Whether ``api_base`` is a server on this machine (the simulated provider
    started by hand, a local stand-in or a local model)."""
    return bool(api_base) and str(api_base).startswith(_LOOPBACK)


_is_loopback = is_loopback


def _route(model: ModelLike) -> dict[str, Any]:
    api_base = getattr(model, "api_base", None)
    if api_base == "simulator":
        # The runner replaces this marker with the running simulator's URL.
        raise ValueError(f"model {model.name!r}: api_base 'simulator' must be resolved to the simulator's URL first")
    kwargs: dict[str, Any] = {
        "model": model.litellm_model,
        # Retries belong to the runner's rules, and num_retries>0 loses the
        # exception class (LITELLM.md): every failure reaches the caller once.
        "num_retries": 0,
        "timeout": float(model.timeout_s),
    }
    if api_base:
        kwargs["api_base"] = api_base
    if _is_loopback(api_base):
        api_key = _loopback_key(model, api_base)
        if api_key is not None:
            kwargs["api_key"] = api_key
    return kwargs


def _cost(response: Any) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    return float(cost) if cost is not None else None


_unpriced_lock = threading.Lock()
_unpriced_cls: type[Exception] | None = None


def _unpriced_class() -> type[Exception]:
    """``UnpricedCall``, made on first use: it subclasses litellm's
    ``ModelNotMappedError`` (litellm's own word for "no price for this
    model"), so it can exist only once litellm is imported."""
    global _unpriced_cls
    with _unpriced_lock:
        if _unpriced_cls is None:
            base = _lib().exceptions.ModelNotMappedError

            class UnpricedCall(base):  # type: ignore[misc, valid-type]
                """A call returned, but litellm put no cost on it (the model is
                unpriced). Its spend cannot be counted, so no cap or ceiling
                can hold: the runner classifies it ``operator`` (the model
                pauses until a person prices it). ``reply`` is the call's
                ``Reply`` (usage, times, content); ``call_start``/``call_end``
                are its times, like any failed call's."""

                # Defaults, so that the class rebuilds from its args alone (pickle, copy).
                def __init__(self, message: str = "", *, reply: Reply | None = None,
                             litellm_model: str | None = None) -> None:
                    super().__init__(message)
                    self.reply = reply
                    self.usage = dict(reply.usage) if reply is not None else {}
                    self.litellm_model = litellm_model

            # Recorded as ``confirmatory.llm.UnpricedCall`` (its MRO then names
            # ``litellm.exceptions.ModelNotMappedError``: class ``operator``).
            UnpricedCall.__module__ = __name__
            UnpricedCall.__qualname__ = "UnpricedCall"
            _unpriced_cls = UnpricedCall
        return _unpriced_cls


def __getattr__(name: str) -> Any:
    # ``confirmatory.llm.UnpricedCall`` (imports litellm: it subclasses its error).
    if name == "UnpricedCall":
        return _unpriced_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _priced(model: ModelLike, reply: Reply) -> Reply:
    """``reply``, unless litellm could not price it and the model must be priced.

    litellm's ``response_cost`` is None exactly when it has no price for the
    requested model (a priced model's reply without usage costs 0.0, not
    None), so a None is never "free": counting it as $0 would let the
    model's cap and the spend ceiling pass unnoticed (docs/LITELLM.md).
    """
    _note_reply(reply)
    if reply.cost_usd is not None or not getattr(model, "require_price", True):
        return reply
    usage = reply.usage
    exc = _unpriced_class()(
        f"litellm has no price for {model.litellm_model}: its {reply.kind} call returned "
        f"({usage.get('input_tokens', 0)} input and {usage.get('output_tokens', 0)} output tokens) "
        "without a cost, so its spend cannot be counted and the spend ceiling cannot be enforced; "
        "a person must act before the model runs again",
        reply=reply,
        litellm_model=model.litellm_model,
    )
    _stamp(exc, reply.start, reply.end)
    raise exc


def _tokens(usage: Any, name: str) -> int:
    """A token count of a reply's usage: an object, or a plain dict (litellm
    leaves a Responses usage as a dict when the reply has ``"output": null``)."""
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, 0)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _usage_cost(model: ModelLike, tokens: Mapping[str, int]) -> float | None:
    """What litellm's cost lookup (the one behind ``response_cost``) charges
    for these tokens of ``model``, or None when it cannot price them."""
    try:
        prompt_usd, completion_usd = _lib().cost_per_token(
            model=model.litellm_model, prompt_tokens=tokens["input_tokens"],
            completion_tokens=tokens["output_tokens"])
    except Exception:  # noqa: BLE001 - unpriced
        return None
    return float(prompt_usd) + float(completion_usd)


def _empty_reply(model: ModelLike, kind: str, field_name: str, response: Any, tokens: dict[str, int],
                 start: float, end: float) -> BaseException:
    """The exception for an HTTP 200 reply with nothing in ``choices`` (chat)
    or ``output`` (Responses): a provider failure (litellm's ``APIError``,
    status 200, as litellm itself raises for a 200 whose body it cannot read
    on the Responses API), so the attempt is rerun, not a bare IndexError of
    the harness's that stops the model.

    The reply was billed: its cost is told to the bound attempt (as a
    returned reply's is) and carried on the exception, ``reply`` (a
    ``Reply`` with no content, its usage, cost and times) and ``cost_usd``,
    so that ``spend.add_call(kind, start, end, error=exc)`` counts it
    (docs/HARNESS.md). ``call_start``/``call_end`` are its times. When
    litellm put no cost on the reply, the cost is asked of its cost lookup
    for the reply's tokens (None if it cannot price them)."""
    cost = _cost(response)
    if cost is None and (tokens["input_tokens"] or tokens["output_tokens"]):
        cost = _usage_cost(model, tokens)
    reply = Reply(kind=kind, content=None, tool_calls=(), finish_reason=None, cost_usd=cost,
                  usage=dict(tokens), start=start, end=end)
    _note_reply(reply)
    exc = _lib().exceptions.APIError(
        status_code=200,
        message=(f"the provider replied without {field_name}: HTTP 200 with no {field_name} in its {kind} reply "
                 f"for {model.litellm_model} ({tokens['input_tokens']} input and {tokens['output_tokens']} "
                 "output tokens billed)"),
        llm_provider=provider_of(model.litellm_model),
        model=model.litellm_model,
    )
    exc.reply = reply  # type: ignore[attr-defined]
    exc.cost_usd = cost  # type: ignore[attr-defined]
    exc.usage = dict(tokens)  # type: ignore[attr-defined]
    _stamp(exc, start, end)
    return exc


def _stamp(exc: BaseException, start: float, end: float) -> None:
    """Leave the call's times on the exception: a harness reports failed calls too."""
    try:
        exc.call_start = start  # type: ignore[attr-defined]
        exc.call_end = end  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass


# Set while this module's own litellm call runs in the thread: the pre-call
# hook (``_DirectCalls``) tells a call made around it from one of ours.
_ours = threading.local()


def _timed(call: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``call(**kwargs)`` with its raw start and end times; a raised exception
    carries them too (``call_start``/``call_end``), and propagates unchanged."""
    start = time.time()
    _ours.active = True
    _ours.bodies = []  # the provider's raw replies to this call (_DirectCalls.log_post_api_call)
    try:
        response = call(**kwargs)
    except BaseException as exc:
        _stamp(exc, start, time.time())
        raise
    finally:
        _ours.active = False
    return response, start, time.time()


# Most raw reply bodies kept for one call: litellm reports each once (and,
# when it then fails, its own error text, which is no body).
_MAX_BODIES = 4

# A reply's usage fields, by API: (input, output, total).
_USAGE_FIELDS = {
    "chat": ("prompt_tokens", "completion_tokens", "total_tokens"),
    "responses": ("input_tokens", "output_tokens", "total_tokens"),
}


def _billed_usage(kind: str) -> dict[str, int] | None:
    """The tokens the raw replies to this thread's last call billed, or None.

    litellm reports the provider's raw body to its post-call hook before it
    reads it; when it then fails to read it (``"choices"`` null or missing,
    a body it cannot map), the exception it raises carries no usage, though
    the reply was billed. Only a body that is a JSON object with a usage
    counts."""
    import json  # noqa: PLC0415 - only on a failed call

    names = _USAGE_FIELDS[kind]
    tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for raw in getattr(_ours, "bodies", None) or ():
        try:
            body = json.loads(raw)
        except (TypeError, ValueError):
            continue
        usage = body.get("usage") if isinstance(body, dict) else None
        if not isinstance(usage, dict):
            continue
        for key, name in zip(tokens, names):
            value = usage.get(name, usage.get(key))
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens[key] += value
    return tokens if tokens["input_tokens"] or tokens["output_tokens"] else None


def _carry_billed_usage(model: ModelLike, kind: str, exc: BaseException) -> None:
    """Put on a raised call's exception the cost of a reply it lost (``reply``,
    ``cost_usd``, ``usage``, as ``_empty_reply`` does), so that the documented
    ``spend.add_call(kind, start, end, error=exc)`` counts what was billed.
    The exception and its class stay litellm's."""
    if getattr(exc, "reply", None) is not None:
        return
    tokens = _billed_usage(kind)
    if tokens is None:
        return
    start = getattr(exc, "call_start", None)
    end = getattr(exc, "call_end", None)
    reply = Reply(kind=kind, content=None, tool_calls=(), finish_reason=None,
                  cost_usd=_usage_cost(model, tokens), usage=dict(tokens),
                  start=start if start is not None else time.time(),
                  end=end if end is not None else time.time())
    try:
        exc.reply = reply  # type: ignore[attr-defined]
        exc.cost_usd = reply.cost_usd  # type: ignore[attr-defined]
        exc.usage = dict(tokens)  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return
    _note_reply(reply)


def _note_reply(reply: "Reply") -> None:
    """Tell the attempt bound to this thread (if any) what this reply cost:
    the lane checks that the harness reported it (spend.AttemptSpend.unreported)."""
    from confirmatory.spend import bound_attempt

    attempt = bound_attempt()
    if attempt is not None and reply.cost_usd is not None:
        attempt.note_llm_cost(reply.cost_usd)


_hook_lock = threading.Lock()
_hook_installed = False


def _install_direct_call_hook(lib: Any) -> None:
    """A litellm pre-call hook (run in the calling thread, measured) that
    tells the attempt bound to the thread of every litellm call not made
    through this module: its cost would be counted only if the harness
    reported it, and the runner cannot see that it did."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        from litellm.integrations.custom_logger import CustomLogger  # noqa: PLC0415

        class _DirectCalls(CustomLogger):  # type: ignore[misc, valid-type]
            def log_post_api_call(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
                # The provider's raw body, before litellm reads it: a reply
                # it then fails to read was billed all the same (_billed_usage).
                if not getattr(_ours, "active", False):
                    return
                raw = kwargs.get("original_response") if isinstance(kwargs, dict) else None
                bodies = getattr(_ours, "bodies", None)
                if isinstance(raw, (str, bytes)) and bodies is not None and len(bodies) < _MAX_BODIES:
                    bodies.append(raw)

            def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
                if getattr(_ours, "active", False):
                    return
                from confirmatory.spend import bound_attempt  # noqa: PLC0415

                attempt = bound_attempt()
                if attempt is not None:
                    attempt.note_direct_call()

        lib.callbacks.append(_DirectCalls())
        _hook_installed = True


def chat(
    model: ModelLike,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
    max_tokens: int | None = None,
    extra_headers: dict[str, str] | None = None,
) -> Reply:
    """One chat-completions call; litellm's exceptions propagate unchanged
    (each carries ``call_start``/``call_end``). A reply litellm cannot price
    raises ``UnpricedCall`` (see ``_priced``); a reply without choices raises
    litellm's ``APIError`` carrying its cost (see ``_empty_reply``)."""
    lib = _lib()
    kwargs = _route(model)
    kwargs.update(dict(model.params or {}))
    if max_tokens is not None:
        # Override whichever token parameter the design uses (sending both
        # max_tokens and max_completion_tokens is refused by some providers).
        key = "max_completion_tokens" if "max_completion_tokens" in kwargs else "max_tokens"
        kwargs[key] = max_tokens
    if tools:
        kwargs["tools"] = tools
    if response_format is not None:
        kwargs["response_format"] = response_format
    if extra_headers:
        kwargs["extra_headers"] = dict(extra_headers)
    try:
        response, start, end = _timed(lib.completion, messages=messages, **kwargs)
    except Exception as exc:
        _carry_billed_usage(model, "chat", exc)
        raise
    usage = getattr(response, "usage", None)
    tokens = {
        "input_tokens": _tokens(usage, "prompt_tokens"),
        "output_tokens": _tokens(usage, "completion_tokens"),
        "total_tokens": _tokens(usage, "total_tokens"),
    }
    choices = getattr(response, "choices", None) or []
    if not choices:
        # litellm returns a 200 with "choices": [] as a response (it raises
        # InternalServerError only for choices missing or not a list).
        raise _empty_reply(model, "chat", "choices", response, tokens, start, end)
    choice = choices[0]
    message = choice.message
    calls = tuple(
        {"id": str(tc.id), "name": str(tc.function.name), "arguments": str(tc.function.arguments or "")}
        for tc in (getattr(message, "tool_calls", None) or [])
    )
    return _priced(model, Reply(
        kind="chat",
        content=message.content,
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        cost_usd=_cost(response),
        usage=tokens,
        start=start,
        end=end,
    ))


def responses(
    model: ModelLike,
    input: list[dict[str, Any]] | str,  # noqa: A002 - the Responses API's own name
    *,
    tools: list[dict[str, Any]] | None = None,
    max_output_tokens: int | None = None,
    extra_headers: dict[str, str] | None = None,
    text_format: dict[str, Any] | None = None,
) -> Reply:
    """One Responses-API call (``text_format`` e.g. ``{"type": "json_object"}``);
    litellm's exceptions propagate unchanged (each carries ``call_start``/``call_end``);
    a reply litellm cannot price raises ``UnpricedCall`` (see ``_priced``); a
    reply without output that is not ``incomplete`` raises litellm's
    ``APIError`` carrying its cost (see ``_empty_reply``)."""
    lib = _lib()
    kwargs = _route(model)
    params = dict(model.params or {})
    # The Responses API takes no seed (it answers 400 "Unknown parameter");
    # litellm 1.110.2 leaves it out too, but that is not its promise. The
    # design's seed therefore reaches chat calls only (config.json says so).
    params.pop("seed", None)
    # The Responses API names the output limit differently.
    for key in ("max_tokens", "max_completion_tokens"):
        if key in params:
            params.setdefault("max_output_tokens", params.pop(key))
    kwargs.update(params)
    if max_output_tokens is not None:
        kwargs["max_output_tokens"] = max_output_tokens
    if tools:
        kwargs["tools"] = tools
    if text_format is not None:
        kwargs["text"] = {"format": text_format}
    if extra_headers:
        kwargs["extra_headers"] = dict(extra_headers)
    try:
        response, start, end = _timed(lib.responses, input=input, **kwargs)
    except Exception as exc:
        _carry_billed_usage(model, "responses", exc)
        raise
    usage = getattr(response, "usage", None)
    tokens = {
        "input_tokens": _tokens(usage, "input_tokens"),
        "output_tokens": _tokens(usage, "output_tokens"),
        "total_tokens": _tokens(usage, "total_tokens"),
    }
    status = getattr(response, "status", None)
    output = getattr(response, "output", None) or []
    if not output and status != "incomplete":
        # "output": [] or null: nothing the model said, not even a truncated
        # start (an "incomplete" reply without output stays a truncation).
        raise _empty_reply(model, "responses", "output", response, tokens, start, end)
    texts: list[str] = []
    calls: list[dict[str, str]] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "function_call":
            calls.append({"id": str(item.call_id), "name": str(item.name), "arguments": str(item.arguments or "")})
        elif kind == "message":
            for part in getattr(item, "content", None) or []:
                if getattr(part, "type", None) == "output_text":
                    texts.append(str(part.text))
    if status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        finish = "length" if reason in (None, "max_output_tokens") else str(reason)
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop" if status == "completed" else status
    return _priced(model, Reply(
        kind="responses",
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        finish_reason=finish,
        cost_usd=_cost(response),
        usage=tokens,
        start=start,
        end=end,
    ))
