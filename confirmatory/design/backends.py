"""The ``[engine]`` keys that choose where an engine pool runs, checked across
the table on the raw TOML mapping (so each problem names its key, listed
alongside the field problems): ``factory`` or ``target``, ``backend``, and
the Ray backend's ``address`` and ``num_cpus`` (docs/DESIGN-FILE.md, docs/ENGINE.md).
"""

from __future__ import annotations

from typing import Any

# Where an engine pool's workers run: processes on the runner's machine, or
# actors on a Ray cluster.
BACKENDS: tuple[str, ...] = ("processes", "ray")
# The most CPUs one Ray actor of an engine pool may ask for: a guard against a slip.
MAX_ACTOR_CPUS = 1024


def engine_problems(engine: Any) -> list[str]:
    """What spans the keys of ``[engine]`` (a raw mapping): one line each, naming the key."""
    if not isinstance(engine, dict):
        return []
    problems: list[str] = []
    backend = engine.get("backend", "processes")
    # None is absent: the model's own check reads its dump, where every key is present.
    has_factory, has_target = engine.get("factory") is not None, engine.get("target") is not None
    if has_factory and has_target:
        problems.append(
            "engine.target: give factory or target, not both (the factory starts its own pool; "
            "a target is run by the pool the runner starts)"
        )
    elif not has_factory and not has_target:
        problems.append(
            'engine.factory: missing (or give engine.target = "package.module:function", '
            "the function every worker runs)"
        )
    if backend == "ray":
        if has_factory:
            problems.append(
                'engine.factory: backend "ray" runs engine.target in Ray actors; a factory starts '
                'a pool of its own: give target = "package.module:function" instead'
            )
        if engine.get("address") is None:
            problems.append(
                'engine.address: missing: backend "ray" needs a cluster address, "auto" '
                '(the cluster this machine is part of) or "local" (a cluster started for the run)'
            )
        address = engine.get("address")
        if isinstance(address, str) and "@" in address.split("//", 1)[-1].split("/", 1)[0]:
            problems.append(
                "engine.address: holds a user or password before '@'; the design file is published: "
                "give the cluster's credentials another way (docs/ENGINE.md)"
            )
    elif backend in BACKENDS:
        for key in ("address", "num_cpus"):
            if engine.get(key) is not None:
                problems.append(f'engine.{key}: only for backend = "ray" (the backend is "{backend}")')
    return problems
