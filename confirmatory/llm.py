"""The one boundary to litellm: every import of it happens in this module, lazily.

A cold litellm import costs seconds and ~190 MB, tries the network unless
``LITELLM_OFFLINE_MODE`` is set first, and starts background threads; so the
import happens inside functions, and ``prepare`` sets litellm's globals once,
before any lane thread starts (docs/LITELLM.md).
"""

from __future__ import annotations

import os
import threading
from typing import Any

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
    try:
        result = lib.validate_environment(model=litellm_model, api_base=api_base)
    except Exception:
        return []
    return sorted(result.get("missing_keys") or [])
