"""``confirmatory probe-seed``: measure whether a model's seed makes it reproducible.

Sends two identical temperature-0 requests with the same seed and records in
the hand-kept registry (``models.json``) whether the replies matched. The run
config reads that entry to say, in ``not_pinned_down``, that a seed was
measured not to reproduce, or never measured.

The registry is a JSON object keyed by the litellm model string; the probe
adds or replaces only ``seed_reproducible`` and ``seed_probe`` in that entry
and keeps everything else. (A registry shaped ``{"models": {...}}`` is
updated inside ``"models"``.) The file is replaced atomically.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from confirmatory.engine.llm import AdHocModel  # no litellm: confirmatory.engine.llm imports it lazily

if TYPE_CHECKING:
    from confirmatory.engine.llm import ModelLike

PROBE_SEED = 20240611
PROBE_TIMEOUT_S = 60.0
PROBE_MESSAGES = (
    {"role": "system", "content": "Answer briefly."},
    {
        "role": "user",
        "content": (
            "A household has one adult with employment_income 31250 and one child. "
            'Estimate its annual net income. Reply with {"net_income": <number>} '
            "and one sentence of reasoning."
        ),
    },
)


PROBE_PARAMS = {"temperature": 0.0, "seed": PROBE_SEED, "max_tokens": 128}


def _probe_model(model: str, api_base: str | None) -> AdHocModel:
    return AdHocModel(
        name=model, litellm_model=model, api_base=api_base, timeout_s=PROBE_TIMEOUT_S, params=dict(PROBE_PARAMS)
    )


@dataclass(frozen=True)
class ProbeResult:
    matched: bool
    t: float
    first: str | None
    second: str | None


def probe(model: str, api_base: str | None) -> ProbeResult:
    """Two identical seeded temperature-0 calls; litellm's exceptions propagate."""
    from confirmatory.engine import llm  # noqa: PLC0415 - litellm loads only when a probe runs

    # cast: the frozen AdHocModel's fields are read-only, ModelLike's members settable (mypy tells them apart)
    spec = _probe_model(model, api_base)
    replies = [llm.chat(cast("ModelLike", spec), [dict(m) for m in PROBE_MESSAGES]) for _ in range(2)]

    def shape(reply: Any) -> tuple[Any, ...]:
        calls = tuple((c["name"], c["arguments"]) for c in reply.tool_calls)
        return (reply.content, calls, reply.finish_reason)

    first, second = replies
    # An empty reply proves nothing about determinism: count it as no match.
    matched = shape(first) == shape(second) and bool(first.content or first.tool_calls)
    return ProbeResult(matched=matched, t=time.time(), first=first.content, second=second.content)


def record(registry: Path, model: str, result: ProbeResult) -> dict[str, Any]:
    """Write the probe's outcome into ``registry`` under ``model``; returns the entry."""
    data: dict[str, Any] = {}
    if registry.exists():
        data = json.loads(registry.read_text(encoding="utf-8") or "{}")
        if not isinstance(data, dict):
            raise ValueError(f"{registry}: expected a JSON object keyed by model")
    table = data["models"] if isinstance(data.get("models"), dict) else data
    entry = table.get(model)
    if not isinstance(entry, dict):
        entry = {}
        table[model] = entry
    entry["seed_reproducible"] = result.matched
    entry["seed_probe"] = {"t": result.t, "matched": result.matched}
    _write_atomic(registry, data)
    return entry


def _write_atomic(path: Path, obj: dict[str, Any]) -> None:
    # The registry is kept by hand: indented, but replaced whole so that a
    # crash leaves the old file or the new one, never half of one.
    payload = (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def probe_seed_command(model: str, api_base: str | None = None, registry: Path = Path("models.json")) -> int:
    """Run the probe and record it. ``--api-base simulator`` probes the built-in
    simulated provider (started for the probe). Exit 0 when recorded (whatever
    the outcome), 3 when a key is missing, 1 when a call failed."""
    from confirmatory.engine import llm  # noqa: PLC0415

    sim = None
    try:
        if api_base == "simulator":
            from confirmatory.sim import SIM_PRICES, SimProvider  # noqa: PLC0415

            sim = SimProvider(None, 0).start()
            api_base = sim.url
            llm.prepare([cast("ModelLike", _probe_model(model, api_base))], SIM_PRICES)
        else:
            llm.prepare([])
        missing = llm.missing_keys(model, api_base)
        if missing:
            print(f"probe-seed: {model} needs {', '.join(missing)} in the environment", file=sys.stderr)
            return 3
        # Before the two paid requests: a registry the outcome cannot be written into.
        from confirmatory.engine.config import registry_problem  # noqa: PLC0415

        problem = registry_problem(Path(registry))
        if problem is not None:
            print(f"probe-seed: the registry {problem}; nothing was sent", file=sys.stderr)
            return 3
        try:
            result = probe(model, api_base)
        except Exception as exc:  # a provider failure is reported, not recorded as a verdict
            print(f"probe-seed: {model}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        record(Path(registry), model, result)
    finally:
        if sim is not None:
            sim.stop()
    verdict = "reproducible" if result.matched else "NOT reproducible"
    print(f"{model}: seed {verdict} (recorded in {registry})")
    return 0
