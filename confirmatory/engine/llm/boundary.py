"""The import of litellm and what every call shares: routing, keys, loopback servers, the unpriced-call error.

A cold litellm import costs seconds and ~190 MB, tries the network unless
``LITELLM_OFFLINE_MODE`` is set first, and starts background threads; so
``_lib`` imports it on first use, once, under a lock (docs/LITELLM.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from confirmatory.engine.reply import Reply

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
        return (
            f"litellm cannot route {litellm_model!r} to a provider ({first[:160]}); "
            "write it as provider/model, e.g. openai/<name> for an OpenAI-compatible server"
        )
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


# api_base -> an httpx transport that answers its calls in this process
# (``confirmatory.testing.fakeprovider``): litellm is handed a client on it.
_in_process: dict[str, Any] = {}
_clients: dict[tuple[str, str, float], Any] = {}
_clients_lock = threading.Lock()


def serve_in_process(api_base: str, transport: Any, serving: bool = True) -> None:
    """Answer every call to ``api_base`` with ``transport`` (an
    ``httpx.BaseTransport``), in this process and without a socket: litellm
    is handed a client on it (``client=``), so it builds each request and
    reads each reply exactly as it does over HTTP. The base is the simulated
    provider's too (``serve_as_simulator``): its calls carry SIM_API_KEY."""
    base = api_base.rstrip("/")
    with _clients_lock:
        if serving:
            _in_process[base] = transport
        else:
            _in_process.pop(base, None)
        for key in [k for k in _clients if k[0] == base]:
            del _clients[key]
    serve_as_simulator(api_base, serving)


def _in_process_client(api_base: str, litellm_model: str, kind: str, timeout_s: float) -> Any | None:
    """The client litellm is to call ``api_base`` through, when a transport
    answers it in this process (``serve_in_process``), else None. litellm
    sends an OpenAI chat call through the ``openai`` SDK's client and every
    other (Responses, Anthropic, Gemini) through its own ``HTTPHandler``;
    the Gemini path gives no timeout of its own per request, so the client
    carries the model's, as the one litellm makes for it does (measured,
    docs/LITELLM.md "In-process clients")."""
    base = api_base.rstrip("/")
    with _clients_lock:
        transport = _in_process.get(base)
        if transport is None:
            return None
        sdk = kind == "chat" and provider_of(litellm_model) == "openai"
        key = (base, "openai" if sdk else "litellm", float(timeout_s))
        if key not in _clients:
            import httpx  # noqa: PLC0415 - litellm's own dependency, imported with it

            client = httpx.Client(transport=transport, timeout=float(timeout_s))
            if sdk:
                import openai  # noqa: PLC0415

                # An httpx client, as litellm's own (it hands the SDK one: llms/openai/common_utils.py)
                _clients[key] = openai.OpenAI(
                    api_key=SIM_API_KEY,
                    base_url=base,
                    http_client=client,  # type: ignore[arg-type]  # the SDK's stubs name its vendored httpx
                    max_retries=0,
                )
            else:
                from litellm.llms.custom_httpx.http_handler import HTTPHandler  # noqa: PLC0415

                _clients[key] = HTTPHandler(timeout=float(timeout_s), client=client)
        return _clients[key]


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
    timeout_s: float
    api_base: str | None

    @property
    def params(self) -> Mapping[str, Any]: ...  # read only: a design's dict, an AdHocModel's mapping


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


def is_loopback(api_base: str | None) -> TypeGuard[str]:
    """Whether ``api_base`` is a server on this machine (the simulated provider
    started by hand, a local stand-in or a local model)."""
    return bool(api_base) and str(api_base).startswith(_LOOPBACK)


_is_loopback = is_loopback


def _route(model: ModelLike, kind: str = "chat") -> dict[str, Any]:
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
        client = _in_process_client(api_base, model.litellm_model, kind, model.timeout_s)
        if client is not None:
            kwargs["client"] = client
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
                def __init__(
                    self, message: str = "", *, reply: Reply | None = None, litellm_model: str | None = None
                ) -> None:
                    super().__init__(message)
                    self.reply = reply
                    self.usage = dict(reply.usage) if reply is not None else {}
                    self.litellm_model = litellm_model

            # Recorded as ``confirmatory.engine.llm.UnpricedCall`` (its MRO then names
            # ``litellm.exceptions.ModelNotMappedError``: class ``operator``).
            UnpricedCall.__module__ = "confirmatory.engine.llm"  # its public path (the package re-exports it)
            UnpricedCall.__qualname__ = "UnpricedCall"
            _unpriced_cls = UnpricedCall
        return _unpriced_cls


# Set while a call of ours (``calls._timed``) runs in the thread: the pre-call
# hook (``_DirectCalls``) tells a call made around it from one of ours.
_ours = threading.local()

# Most raw reply bodies kept for one call: litellm reports each once (and,
# when it then fails, its own error text, which is no body).
_MAX_BODIES = 4

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

        class _DirectCalls(CustomLogger):
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
                from confirmatory.engine.spend import bound_attempt  # noqa: PLC0415

                attempt = bound_attempt()
                if attempt is not None:
                    attempt.note_direct_call()

        lib.callbacks.append(_DirectCalls())
        _hook_installed = True
