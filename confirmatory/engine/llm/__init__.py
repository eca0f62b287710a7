"""The one boundary to litellm, and the harness's way to call a model: ``chat`` and ``responses``.

Every import of litellm happens in this package, lazily (``boundary._lib``):
a cold import costs seconds and ~190 MB, tries the network unless
``LITELLM_OFFLINE_MODE`` is set first, and starts background threads.
``prepare`` sets litellm's globals once, before any lane thread starts
(docs/LITELLM.md).

* ``boundary``: the import, routing, keys, loopback servers, ``UnpricedCall``;
* ``pricing``: every model's price registered, read back and recorded;
* ``calls``: what every call does around litellm's (timing, pricing the reply,
  a failed call's billed usage, reporting the cost to the bound attempt);
* ``chat`` and ``responses``: the two APIs.

What docs/HARNESS.md tells a harness to use is re-exported here:
``from confirmatory.engine import llm`` then ``llm.chat(...)``.
"""

from __future__ import annotations

from typing import Any

from confirmatory.engine.llm.boundary import (
    SIM_API_KEY,
    AdHocModel,
    ModelLike,
    _lib,  # noqa: F401 - the runner's own, named here for its tests
    _loopback_key,  # noqa: F401 - the runner's own, named here for its tests
    _sim_bases,  # noqa: F401 - the runner's own, named here for its tests
    _unpriced_class,
    is_loopback,
    missing_keys,
    provider_of,
    route_problem,
    serve_as_simulator,
    serve_in_process,
    supported_params,
)
from confirmatory.engine.llm.chat import chat
from confirmatory.engine.llm.pricing import (
    PRICED_FROM_RESPONSE,
    _lookup,  # noqa: F401 - the runner's own, named here for its tests
    call_cost_usd,
    call_limits,
    prepare,
    price_entry,
    price_problem,
    price_record,
    register_prices,
)
from confirmatory.engine.llm.responses import responses
from confirmatory.engine.reply import Reply


def __getattr__(name: str) -> Any:
    # ``llm.UnpricedCall`` imports litellm: it subclasses litellm's error.
    if name == "UnpricedCall":
        return _unpriced_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PRICED_FROM_RESPONSE",
    "SIM_API_KEY",
    "AdHocModel",
    "ModelLike",
    "Reply",
    "UnpricedCall",
    "call_cost_usd",
    "call_limits",
    "chat",
    "is_loopback",
    "missing_keys",
    "prepare",
    "price_entry",
    "price_problem",
    "price_record",
    "provider_of",
    "register_prices",
    "responses",
    "route_problem",
    "serve_as_simulator",
    "serve_in_process",
    "supported_params",
]
