"""The design's checks that span entries or free-form values (docs/DESIGN-FILE.md).

The field checks live on the pydantic models (``confirmatory.design.model``);
these read the raw TOML mapping, so they are listed beside the field problems.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time
from typing import Any

from confirmatory.design.backends import engine_problems

# The api_base that names the bundled simulator (docs/SIMULATOR.md).
SIMULATOR = "simulator"


def cross_problems(data: Any) -> list[str]:
    """Checks that span entries or free-form values: unique slugs (also ignoring
    case), matched pairs, fault targets, simulator model names, values that
    cannot be recorded as JSON, and the spend before the stage against the ceiling.

    Works on the raw TOML mapping too (tolerating wrong shapes, which the field
    checks report), so these problems are listed alongside field problems.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        return problems

    def entries(value: Any) -> list[Any]:
        return list(value) if isinstance(value, (list, tuple)) else []

    def names(table: str, items: list[Any]) -> list[str]:
        seen: set[str] = set()
        folded: dict[str, tuple[int, str]] = {}
        for i, item in enumerate(items):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in seen:
                    problems.append(f'{table}[{i}].name: duplicate slug "{name}"')
                elif name.casefold() in folded:
                    j, other = folded[name.casefold()]
                    problems.append(
                        f'{table}[{i}].name: "{name}" differs from {table}[{j}].name "{other}" only in'
                        " case; as paths they collide on a case-insensitive filesystem"
                    )
                seen.add(name)
                folded.setdefault(name.casefold(), (i, name))
        return sorted(seen)

    problems.extend(engine_problems(data.get("engine")))
    arms = entries(data.get("arms"))
    arm_names = names("arms", arms)
    models = entries(data.get("models"))
    model_names = names("models", models)
    host: Any = data.get("host") if isinstance(data.get("host"), dict) else {}
    names("host.evidence", entries(host.get("evidence")))

    for i, item in enumerate(models):
        other = item.get("matched_with") if isinstance(item, dict) else None
        if isinstance(other, str):
            if other == item.get("name"):
                problems.append(f'models[{i}].matched_with: must name another model (got its own name "{other}")')
            elif other not in model_names:
                problems.append(f'models[{i}].matched_with: no model is named "{other}"')

    # Free-form tables travel into the run records as JSON: refuse what JSON cannot hold.
    for i, item in enumerate(models):
        if isinstance(item, dict) and isinstance(item.get("params"), dict):
            problems.extend(json_problems(item["params"], f"models[{i}].params"))
    for i, item in enumerate(arms):
        if isinstance(item, dict) and isinstance(item.get("features"), dict):
            problems.extend(json_problems(item["features"], f"arms[{i}].features"))

    # The simulator answers only the models it serves; any other name is a 404 at every call.
    for i, item in enumerate(models):
        if (
            isinstance(item, dict)
            and item.get("api_base") == SIMULATOR
            and isinstance(item.get("litellm_model"), str)
            and item["litellm_model"]
        ):
            from confirmatory.core.simulated import SIM_MODELS  # stdlib only; only when a model is simulated

            served = item["litellm_model"].rsplit("/", 1)[-1]
            if served not in SIM_MODELS:
                problems.append(
                    f'models[{i}].litellm_model: the simulator serves no model "{served}"'
                    f' (api_base = "simulator" serves {", ".join(SIM_MODELS)})'
                )

    # The simulator matches a fault by served name; the full litellm string selects it too.
    served = {
        m["litellm_model"].rsplit("/", 1)[-1]
        for m in models
        if isinstance(m, dict) and isinstance(m.get("litellm_model"), str)
    }
    sim: Any = data.get("simulator") if isinstance(data.get("simulator"), dict) else {}
    for i, fault in enumerate(entries(sim.get("faults"))):
        if not isinstance(fault, dict) or not served:
            continue  # (no model to serve: `models` is missing or broken, and said so)
        if isinstance(fault.get("model"), str) and fault["model"].rsplit("/", 1)[-1] not in served:
            problems.append(
                f'simulator.faults[{i}].model: no model is served as "{fault["model"]}"'
                f" (served names: {', '.join(sorted(served))})"
            )
        if isinstance(fault.get("arm"), str) and fault["arm"] not in arm_names:
            problems.append(f'simulator.faults[{i}].arm: no arm is named "{fault["arm"]}"')

    problems.extend(_ceiling_problems(data))
    return problems


def _usd(table: Any, key: str, default: float | None) -> float | None:
    """A dollar amount the field checks will accept, else None (they report it)."""
    value = table.get(key, default) if isinstance(table, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return value


def _ceiling_problems(data: dict[str, Any]) -> list[str]:
    """The spend before the stage must leave room under the ceiling.

    The ceiling is crossed when the total spend *exceeds* it (``Spend``), and
    the total starts at the spend before the stage; admission checks only the
    model's cap. So with no room left, the first cost of the stage crosses the
    ceiling and the run ends having spent past it: nothing could run.
    """
    from confirmatory.core.money import format_usd, usd_to_nusd

    before = _usd(data.get("study"), "spend_before_stage_usd", 0.0)
    cap = _usd(data.get("ceiling"), "overall_cap_usd", None)
    margin = _usd(data.get("ceiling"), "margin_usd", 25.0)
    if before is None or cap is None or margin is None:
        return []
    ceiling = usd_to_nusd(cap) + usd_to_nusd(margin)
    spent = usd_to_nusd(before)
    if spent < ceiling:
        return []
    # Amounts as money, not as written: the raw TOML (0) and the model (0.0) must give one line.
    what = (
        f"the ceiling {format_usd(ceiling)} (overall_cap_usd {format_usd(usd_to_nusd(cap))}"
        f" + margin_usd {format_usd(usd_to_nusd(margin))})"
    )
    if spent > 0:
        return [
            f"study.spend_before_stage_usd: {format_usd(spent)} already spent is at or above {what};"
            " the stage's first cost would cross it, so no household could run"
        ]
    return [
        f"ceiling.overall_cap_usd: {what} leaves no room: the stage's first cost would cross it,"
        " so no household could run"
    ]


def _sub_key(key: str, part: Any) -> str:
    if isinstance(part, int):
        return f"{key}[{part}]"
    return f"{key}.{part}" if str(part).isidentifier() else f'{key}["{part}"]'


def json_problems(value: Any, key: str) -> list[str]:
    """Why ``value`` (a free-form design table) cannot be written to the records as JSON."""
    if value is None or isinstance(value, (bool, str, int)):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{key}: must be a finite number (got {value!r})"]
    if isinstance(value, (datetime, date, time)):
        return [
            f"{key}: dates cannot be recorded as JSON (got the TOML {type(value).__name__} "
            f"{value.isoformat()}); write it as a string"
        ]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in json_problems(v, _sub_key(key, k))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in json_problems(v, _sub_key(key, i))]
    return [f"{key}: cannot be recorded as JSON (got a {type(value).__name__})"]
