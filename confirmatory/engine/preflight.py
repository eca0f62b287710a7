"""The checks a run makes before it starts (``run`` and ``continue`` both):
the design's harness and engine, the model registry, every model's route,
price and keys, the host evidence sources, the run directory and the
witness. Each returns the problems it finds, one line each naming the
design's field and what is wrong; nothing here writes anything.

``preflight`` gathers them for a loaded design and a run directory, as the
library's front door offers it (docs/LIBRARY.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confirmatory.design.model import LoadedDesign

Problem = str  # one line: the design's field (or the file) and what is wrong with it


def registry_path(design_path: Path) -> Path:
    """models.json: beside the design, else in the working directory, else the project's."""
    for candidate in (
        design_path.parent / "models.json",
        Path.cwd() / "models.json",
        Path(__file__).resolve().parents[2] / "models.json",
    ):
        if candidate.is_file():
            return candidate
    return Path.cwd() / "models.json"


def registry_problems(design_path: Path) -> list[str]:
    """The model registry the run would read (``registry_path``), if it cannot be read as one."""
    from confirmatory.engine.config import registry_problem

    problem = registry_problem(registry_path(Path(design_path)))
    return (
        []
        if problem is None
        else [
            f"model registry: {problem} (config.json records each model's identity from it; fix it, or move it "
            "away to record none)"
        ]
    )


def model_problems(loaded: LoadedDesign, *, keys: bool, notes: list[str] | None = None) -> list[str]:
    """What stops the design's real models from being called and counted:
    a model string litellm cannot route, one it cannot price, and (with
    ``keys``) a key missing from the environment. `run` refuses on any of
    them; `check` reports the first two (the keys may be set elsewhere) and,
    in ``notes``, the keys this environment lacks."""
    real = [(i, m) for i, m in enumerate(loaded.design.models) if m.api_base != "simulator"]
    if not real:
        return []
    from confirmatory.engine import llm

    # Every price the design gives, registered together and read back: one
    # model's registration must not change another's (llm.register_prices).
    problems = llm.register_prices(list(loaded.design.models))
    for i, m in real:
        # Keyed as the design's other problems are: models[i].<key>.
        key = f"models[{i}].litellm_model"
        route = llm.route_problem(m.litellm_model, m.api_base)
        if route:
            problems.append(f"{key}: {route}")
            continue
        missing = llm.missing_keys(m.litellm_model, m.api_base) if keys or notes is not None else []
        if missing and keys:
            problems.append(
                f"{key}: {m.litellm_model} needs {', '.join(missing)} in the environment, and it is not set"
            )
        elif missing and notes is not None:
            notes.append(
                f"{key}: {m.litellm_model} needs {', '.join(missing)} in the environment, and it is "
                "not set here: run refuses to start without it"
            )
        # Every dollar must be counted: a model litellm cannot price would
        # be counted as $0 a call, past its cap and the ceiling. A price the
        # design gives is registered and must come back from litellm's
        # lookup as given. (Simulator models are priced by llm.prepare.
        # A server on this machine's loopback is no exception: it may front
        # a paid API, a proxy or a tunnel; and an unpriced reply would pause
        # its model at every call, llm.UnpricedCall, with nothing an
        # operator could change in a frozen design.)
        problems += price_table_problems(i, m)
    return problems


def price_table_problems(i: int, m: Any) -> list[str]:
    """Why the runner could not count every token of model ``i`` at a frozen
    price: its table lacks a kind of token its API can bill, or it has no
    table and does not say ``price = "litellm"`` (then litellm must price it)."""
    from confirmatory.engine import llm
    from confirmatory.engine.llm import cost

    kinds = cost.billed_kinds(m.litellm_model)
    family = cost.api_family(m.litellm_model)
    if m.price_usd_per_mtok is not None:
        missing = cost.missing_kinds(m.litellm_model, m.price_usd_per_mtok.table())
        return [
            f"models[{i}].price_usd_per_mtok: {m.litellm_model}'s API ({family}) can bill {kind} tokens and the "
            f'table has no {kind} price; give it (or price = "litellm" to count at litellm\'s map)'
            for kind in missing
        ]
    key = f"models[{i}].litellm_model"
    if llm.provider_of(m.litellm_model) in llm.PRICED_FROM_RESPONSE:
        return []  # litellm prices each reply by the model the reply names (docs/LITELLM.md)
    if getattr(m, "price", None) != "litellm":
        return [
            f"models[{i}].price_usd_per_mtok: {m.litellm_model} has no price table; give one with "
            f"{', '.join(k for k in kinds if k != 'reasoning')} (USD per million tokens; reasoning "
            'defaults to output), or price = "litellm" to count its calls at litellm\'s map as it stands '
            "at the run's start"
        ]
    # Every dollar must be counted: a model litellm cannot price would be
    # counted as $0 a call, past its cap and the ceiling.
    problem = llm.price_problem(m.litellm_model)
    return [f"{key}: {problem} (give the model a price_usd_per_mtok of the study's own)"] if problem else []


def run_dir_problems(run_dir: Path, *, disk_floor_bytes: int | None = None) -> list[str]:
    """Why a run could not be created at ``run_dir`` (or would stop at once:
    less free disk than the run's floor, ``run.DISK_FLOOR_BYTES``)."""
    import shutil

    from confirmatory.engine.run import DISK_FLOOR_BYTES

    floor = DISK_FLOOR_BYTES if disk_floor_bytes is None else disk_floor_bytes
    if run_dir.exists():
        return [f"{run_dir}: the run directory already exists; a run never writes into an old one"]
    existing = next((p for p in run_dir.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return [f"{run_dir}: cannot be created: {existing} is a file, not a directory"]
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        return [f"{run_dir}: cannot be created: {existing} is not writable"]
    if existing is not None:
        try:
            free = shutil.disk_usage(existing).free
        except OSError:
            free = None
        if free is not None and free < floor:
            return [
                f"{run_dir}: its disk has {free / 2**20:.1f} MiB free, below the {floor / 2**20:g} MiB "
                "the run stops at (it keeps that much to write its stop, close lines and final anchor)"
            ]
    return []


def witness_problems(loaded: LoadedDesign, run_dir: Path) -> list[str]:
    """Why the witness would refuse this run's pushes (a run id that is not a
    slug, one it already holds, a missing clone): said before the run, not
    after hours of unwitnessed work."""
    from confirmatory.anchors.witness import preflight_problems

    try:
        return preflight_problems(loaded.design.anchors.command, loaded.base_dir, run_dir)
    except OSError as exc:  # git itself missing or not runnable
        return [f"anchors.command: the witness clone cannot be checked ({exc}): is git installed?"]


def entry_problems(loaded: LoadedDesign) -> list[str]:
    """The harness and engine modules must import and name callables, and the
    engine factory must start a pool (call, alive, close) that is then closed
    again: a factory that fails would otherwise stop every model at the
    start of the one confirmatory run, its run directory and witness id spent."""
    from confirmatory.design.load import entry_module, resolve_entry
    from confirmatory.design.model import DesignError
    from confirmatory.engine.config import describe_problems, harness_described
    from confirmatory.engine.pool import not_a_pool

    problems: list[str] = []
    factory = None
    engine = loaded.design.engine
    key_of_engine = "engine.factory" if engine.factory is not None else "engine.target"
    for key, entry in (("harness.entry", loaded.design.harness.entry), (key_of_engine, engine.entry)):
        try:
            obj = resolve_entry(entry, loaded.base_dir, key=key)
        except DesignError as exc:
            problems.extend(exc.problems)
            continue
        if key == "engine.target":
            if engine.backend == "processes":  # the pool the run would start, started and closed
                from confirmatory.engine.pool import ProcessEnginePool

                target = str(engine.target)  # key "engine.target": the design gives it
                factory = lambda workers, target=target: ProcessEnginePool(target, workers)  # noqa: E731
            # backend "ray": its target imported (above), the cluster not contacted (docs/ENGINE.md)
        elif key == "engine.factory":
            factory = obj
        else:
            # What the harness declares the model is shown goes to config.json: well formed.
            try:
                problems.extend(describe_problems(harness_described(entry_module(entry, loaded.base_dir))))
            except Exception as exc:  # noqa: BLE001 - describe() itself failed
                problems.append(f"harness describe(): raised {type(exc).__name__}: {exc}")
    if factory is None:
        return problems
    k = key_of_engine
    try:
        pool = factory(loaded.design.engine.workers_per_model)
    except Exception as exc:  # noqa: BLE001 - any failure to start is the design's problem
        return problems + [f"{k}: starting a pool raised {type(exc).__name__}: {exc}"]
    problem = not_a_pool(pool, engine.entry)
    if problem:
        problems.append(f"{k}: {problem}")
    else:
        try:
            if not pool.alive():
                problems.append(f"{k}: the pool it started is not alive")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{k}: the pool's alive() raised {type(exc).__name__}: {exc}")
    if callable(getattr(pool, "close", None)):
        try:
            pool.close()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{k}: closing the pool it started raised {type(exc).__name__}: {exc}")
    return problems


def evidence_problems(loaded: LoadedDesign, notes: list[str] | None = None) -> list[str]:
    """Each `[[host.evidence]]` source read as the sampler will read it (its
    first read and the next, each with the design's read_tries): one that
    cannot be read (a path that is a directory or the run's user may not
    read, a command that fails here) would stop the run with runner-error
    at the sampler's first step, after households were admitted and paid
    for. ``notes`` gets what is worth a word but no refusal (a file that does
    not exist yet: the run reads it from its start once it appears)."""
    from confirmatory.host.sources import command_timeout_s, probe_source, retry_pause_s, sources_from_spec

    host = loaded.design.host
    if not host.evidence:
        return []
    problems: list[str] = []
    sources = sources_from_spec(host.evidence, command_timeout_s=command_timeout_s(host.sample_interval_s))
    for i, (spec, source) in enumerate(zip(host.evidence, sources)):
        where = str(getattr(source, "path", spec.path))  # a path source's resolved path
        what = f"path {where}" if spec.path is not None else f"command {list(spec.command or ())!r}"
        problem = probe_source(source, tries=int(host.read_tries), pause_s=retry_pause_s(host.sample_interval_s))
        if problem is not None:
            problems.append(
                f"host.evidence[{i}]: {spec.name!r} ({what}) cannot be read: {problem}; "
                "the run would stop with runner-error at its first host sample"
            )
        elif notes is not None and spec.path is not None and not os.path.lexists(where):
            notes.append(
                f"host.evidence[{i}]: {spec.name!r}: {where} does not exist (yet); "
                "the run reads it from its start if it appears"
            )
    return problems


def signer_problems(loaded: LoadedDesign) -> list[str]:
    """Why the run could not sign its checkpoints with the key the design
    pins: ``[anchors.signer] key_file`` missing, not a regular file, open to
    others (any group or other permission bit: a key file is 0600), not
    readable, not a study key, or not the key of ``verifier_key``. Said
    before anything is spent; the key's text is never shown."""
    import stat

    from confirmatory.engine.evidence import key_file_path
    from confirmatory.records.keyfile import KeyFileRefused, read_note_signer

    path = key_file_path(loaded)
    signer = loaded.design.anchors.signer
    if path is None or signer is None:
        return []
    key = "anchors.signer.key_file"
    try:
        st = path.stat()
    except FileNotFoundError:
        return [f"{key}: {path} not found (make one with: confirmatory key new NAME --out FILE)"]
    except OSError as exc:
        return [f"{key}: {path} cannot be read: {exc.strerror or exc}"]
    if not stat.S_ISREG(st.st_mode):
        return [f"{key}: {path} is not a regular file"]
    if st.st_mode & 0o077:
        return [
            f"{key}: {path} has mode {stat.S_IMODE(st.st_mode):04o}: a private key file is readable and "
            "writable by its owner alone (chmod 600)"
        ]
    try:
        note_signer = read_note_signer(path)
    except KeyFileRefused as exc:
        return [f"{key}: {exc}"]
    if str(note_signer.verifier) != signer.verifier_key:
        return [
            f"anchors.signer.verifier_key: the key in {path} is {note_signer.verifier}, not the pinned "
            f"{signer.verifier_key}"
        ]
    return []


def preflight(
    loaded: LoadedDesign, run_dir: Path, *, design_path: Path | None = None, keys: bool = True
) -> list[Problem]:
    """Every problem that would make ``run`` refuse to start ``loaded`` into
    ``run_dir`` (a new directory): the run directory, the harness and the
    engine, the model registry (beside ``design_path``, else the working
    directory's), each model (with ``keys``: its API keys in the
    environment), the host evidence, the study's key and the witness. Empty: it may start."""
    problems = run_dir_problems(Path(run_dir))
    problems.extend(entry_problems(loaded))
    problems.extend(registry_problems(Path(design_path) if design_path is not None else loaded.path))
    problems.extend(model_problems(loaded, keys=keys))
    problems.extend(evidence_problems(loaded))
    problems.extend(signer_problems(loaded))
    problems.extend(witness_problems(loaded, Path(run_dir)))
    return problems
