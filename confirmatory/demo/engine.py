"""The reference study's engine factory and the function its worker processes run.

``start(workers)`` is the design's ``[engine] factory``: one
``ProcessEnginePool`` per model, whose workers run ``serve``. ``serve`` checks
each call against the features of the arm it was made under, which travel in
the call frame: an arm that does not offer a tool cannot use it, even by
accident of a harness bug, because the engine refuses it.

Ops: ``calculate`` (needs ``"calculate"`` in ``features["tools"]``) and
``explain`` (needs ``features["explain"]`` true); payload ``{"household": {...}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confirmatory.demo import calculator
from confirmatory.engine.pool import ProcessEnginePool

TARGET = "confirmatory.demo.engine:serve"


class FeatureNotOffered(Exception):
    """An engine call that the calling arm's features do not allow."""


def start(workers: int) -> ProcessEnginePool:
    """Start one model's engine pool (the reference design's engine factory)."""
    return ProcessEnginePool(TARGET, workers)


def serve(op: str, payload: Mapping[str, Any], features: Mapping[str, Any]) -> dict[str, Any]:
    """Run one engine call in a worker process."""
    tools = features.get("tools") or []
    if op == "calculate":
        if "calculate" not in tools:
            raise FeatureNotOffered(f"this arm does not offer the calculate tool (tools: {list(tools)})")
        return calculator.calculate(_household(payload))
    if op == "explain":
        if not features.get("explain"):
            raise FeatureNotOffered("this arm does not offer explain traces")
        return calculator.explain(_household(payload))
    raise ValueError(f"unknown engine op {op!r}")


def _household(payload: Any) -> Any:
    if not isinstance(payload, Mapping) or "household" not in payload:
        raise calculator.InvalidHousehold('the payload must be {"household": {...}}')
    return payload["household"]
