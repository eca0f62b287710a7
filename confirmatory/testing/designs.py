"""Write small fake designs for tests and benchmarks: real TOML, real pins, real files.

``write_design(dir, ...)`` lays out ``design.toml``, ``households.jsonl`` and
a pinned copy of the fake harness, and returns the design's path. Every
argument maps onto a key of the public design format (docs/DESIGN-FILE.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import confirmatory.testing.fakes as fakes_module


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _table(name: str, values: Mapping[str, Any]) -> str:
    lines = [f"[{name}]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


def write_design(
    directory: Path,
    *,
    households: Sequence[Mapping[str, Any]] | int = 6,
    models: Sequence[Mapping[str, Any]] | int = 2,
    arms: Sequence[str] = ("alone", "calculator"),
    seed: int = 20261129,
    overall_cap_usd: float = 100.0,
    margin_usd: float = 25.0,
    spend_before_stage_usd: float = 0.0,
    rules: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    anchors: Mapping[str, Any] | None = None,
    engine_factory: str = "confirmatory.testing.fakes:engine",
    workers: int = 1,
    household_defaults: Mapping[str, Any] | None = None,
    engine: Mapping[str, Any] | None = None,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(households, int):
        households = [{"id": f"hh-{i:03d}"} for i in range(households)]
    rows = [dict(household_defaults or {}) | dict(h) for h in households]
    hh_path = directory / "households.jsonl"
    hh_path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    hh_sha = hashlib.sha256(hh_path.read_bytes()).hexdigest()
    # The pin names the harness module's own file, relative to the design.
    harness_file = Path(fakes_module.__file__).resolve()
    pin_rel = os.path.relpath(harness_file, directory.resolve())
    pin = hashlib.sha256(harness_file.read_bytes()).hexdigest()
    if isinstance(models, int):
        models = [{"name": f"m{i}"} for i in range(models)]
    parts = [
        _table("study", {"id": "fake-study", "seed": seed, "spend_before_stage_usd": spend_before_stage_usd}),
        _table("ceiling", {"overall_cap_usd": overall_cap_usd, "margin_usd": margin_usd}),
        _table("harness", {"entry": "confirmatory.testing.fakes:harness"}),
        _table("harness.pins", {pin_rel: pin}),
        _table(
            "engine", dict(engine) if engine is not None else {"factory": engine_factory, "workers_per_model": workers}
        ),
        _table("households", {"path": "households.jsonl", "sha256": hh_sha}),
    ]
    for a in arms:
        features = {"tools": ["double"]} if a != "alone" else {"tools": []}
        parts.append("[[arms]]\n" + f"name = {json.dumps(a)}\nfeatures = {_toml_value(features)}\n")
    for m in models:
        spec = {
            "litellm_model": f"openai/fake-{m['name']}",
            "cap_usd": 10.0,
            "reserve_usd": 0.01,
            "lanes": 2,
            "timeout_s": 5.0,
            "params": {"temperature": 0.0, "seed": 1},
            # The fake harness calls no provider; a loopback base needs no
            # key, and a price of the design's own lets `run` count it.
            # A key given as None is left out.
            "api_base": "http://127.0.0.1:9/v1",
            "price_usd_per_mtok": {"input": 1.0, "output": 4.0, "cached_input": 0.5},
        } | dict(m)
        if spec.get("api_base") == "simulator" and "price_usd_per_mtok" not in m:
            del spec["price_usd_per_mtok"]  # the simulator's own prices
        parts.append("[[models]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in spec.items() if v is not None))
    # no wait before a rerun pass (rules.rerun_wait_s): a test that wants one says so
    parts.append(_table("rules", {"attempt_deadline_s": 30, "rerun_wait_s": 0, **(rules or {})}))
    parts.append(_table("host", {"sample_interval_s": 0.05, "max_gap_s": 1.0, "sampler_failure_s": 10, **(host or {})}))
    if anchors is None or "command" not in anchors:
        from confirmatory.anchors.witness import init_local_witness

        clone = init_local_witness(directory / "witness")
        anchors = {
            "command": ["{python}", "-m", "confirmatory.anchors.witness", "--clone", str(clone)],
            **(anchors or {}),
        }
    parts.append(_table("anchors", {"interval_s": 0.5, **anchors}))
    path = directory / "design.toml"
    path.write_text("\n".join(parts))
    return path
