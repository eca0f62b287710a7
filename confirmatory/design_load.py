"""Loading a design: the TOML, its households file and its harness pins.

Owns turning a path into a ``LoadedDesign`` or a ``DesignError`` that lists
*every* problem at once, one line each, naming the dotted key: a person fixing
a design should not have to rerun ``confirmatory check`` once per typo. So each
stage below keeps going after a problem and only the end decides.

Relative paths (households, pins) are relative to the design file's directory,
so a design folder can be moved or cloned as a whole.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from confirmatory.design import (
    SHA256_RE,
    Design,
    DesignError,
    Household,
    LoadedDesign,
    cross_problems,
    slug_problem,
)


def load_design(path: Path | str, *, workers: int | None = None) -> LoadedDesign:
    """Validate the design at ``path``; raise ``DesignError`` listing every problem."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DesignError([f"design: cannot read {path}: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DesignError([f"design: not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise DesignError([f"design: not valid TOML: {exc}"]) from None

    base_dir = path.resolve().parent
    problems = cross_problems(data)
    design: Design | None = None
    try:
        design = Design.model_validate(data)
    except ValidationError as exc:
        problems.extend(validation_problems(exc))

    engine = data.get("engine") if isinstance(data.get("engine"), dict) else {}
    declared_workers = engine.get("workers_per_model", 2)
    if workers is not None and workers != declared_workers:
        problems.append(f"engine.workers_per_model: the design says {declared_workers!r}, --workers says {workers}")

    households = _read_households(data.get("households"), base_dir, problems)
    pins = _verify_pins(data.get("harness"), base_dir, problems)
    _check_entries(data, base_dir, problems)
    if households is not None:
        _check_fault_households(data, {h.id for h in households}, problems)

    # The same cross-entry problem can come from the raw check and the model's own.
    problems = list(dict.fromkeys(problems))
    if problems or design is None:
        raise DesignError(problems or ["design: invalid"])
    return LoadedDesign(
        design=design,
        path=path,
        base_dir=base_dir,
        raw=raw,
        sha256=hashlib.sha256(raw).hexdigest(),
        households=households or (),
        pins=pins,
    )


def key_of(loc: tuple[Any, ...]) -> str:
    """A pydantic location as the dotted key a person writes: ``models[2].cap_usd``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).isidentifier():
            out += f".{part}" if out else str(part)
        else:
            out += f'["{part}"]' if out else f'"{part}"'
    return out


_KINDS = {
    "int_type": "an integer", "int_from_float": "an integer", "int_parsing": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string", "bool_type": "true or false",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
    "tuple_type": "an array", "list_type": "an array",
}


def _message(err: dict[str, Any]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in _KINDS:
        return f"must be {_KINDS[kind]} (got {got!r})"
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, name = bounds[kind]
        return f"must be {op} {ctx[name]} (got {got!r})"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']} (got {got!r})"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']} (got {got!r})"


def validation_problems(exc: ValidationError) -> list[str]:
    """One line per pydantic error, keyed by the dotted key."""
    lines: list[str] = []
    for err in exc.errors():
        key, msg = key_of(err["loc"]), _message(err)
        for line in msg.splitlines():
            # Root-level checks (cross_problems) already name their keys.
            lines.append(f"{key}: {line}" if key else line)
    return lines


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_households(table: Any, base_dir: Path, problems: list[str]) -> tuple[Household, ...] | None:
    if not isinstance(table, dict) or not isinstance(table.get("path"), str) or not table["path"]:
        return None  # the field checks have reported it
    rel = table["path"]
    file = base_dir / rel
    try:
        data = file.read_bytes()
    except OSError as exc:
        problems.append(f"households.path: cannot read {file}: {exc.strerror or exc}")
        return None
    expected, actual = table.get("sha256"), hashlib.sha256(data).hexdigest()
    if isinstance(expected, str) and SHA256_RE.fullmatch(expected) and expected != actual:
        problems.append(f'households.sha256: "{rel}" has sha256 {actual}, the design expects {expected}')
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        problems.append(f'households.path: "{rel}" is not UTF-8')
        return None

    found: dict[str, Household] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f'households.path: "{rel}" line {number}'
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg})")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        hid = obj.get("id")
        if not isinstance(hid, str):
            problems.append(f'{where}: "id" must be a string slug (got {hid!r})')
            continue
        if (why := slug_problem(hid)) is not None:
            problems.append(f'{where}: "id" {why}')
            continue
        if hid in found:
            problems.append(f'{where}: duplicate household id "{hid}"')
            continue
        found[hid] = Household(id=hid, payload=obj)
    if not found:
        problems.append(f'households.path: "{rel}" holds no households')
    return tuple(found[k] for k in sorted(found))


def _verify_pins(table: Any, base_dir: Path, problems: list[str]) -> dict[str, str]:
    pins = table.get("pins") if isinstance(table, dict) else None
    verified: dict[str, str] = {}
    if not isinstance(pins, dict):
        return verified
    for rel, expected in pins.items():
        if not isinstance(expected, str) or not SHA256_RE.fullmatch(expected) or not rel:
            continue  # malformed pins are the field checks' to report
        key = f'harness.pins["{rel}"]'
        file = base_dir / rel
        if not file.is_file():
            problems.append(f"{key}: pinned file {file} not found (expected sha256 {expected}, actual: none)")
            continue
        actual = sha256_file(file)
        if actual != expected:
            problems.append(f"{key}: {file} has drifted: expected sha256 {expected}, actual {actual}")
        else:
            verified[rel] = actual
    return verified


def _module_origin(module: str, base_dir: Path) -> tuple[str | None, str | None]:
    """Where ``module`` would be imported from, without running it: (origin, problem)."""
    if "." not in module:
        # resolve_entry puts base_dir first on sys.path, so a top-level module
        # there wins; ask that folder directly, not sys.modules' cached copy.
        local = importlib.machinery.PathFinder.find_spec(module, [str(base_dir)])
        if local is not None:
            return local.origin, None
    added = _add_path(base_dir)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return None, f'cannot find module "{module}": {exc}'
    finally:
        if added:
            sys.path.remove(str(base_dir))
    if spec is None:
        return None, f'no module named "{module}" (looked on sys.path and in {base_dir})'
    return spec.origin, None


def _check_entries(data: dict[str, Any], base_dir: Path, problems: list[str]) -> None:
    """The harness and engine modules exist; the harness module is itself pinned.

    Finding a module does not execute it (check must stay light), but the
    parent packages of a dotted name are imported.
    """
    for table, key in (("harness", "entry"), ("engine", "factory")):
        section = data.get(table)
        entry = section.get(key) if isinstance(section, dict) else None
        if not isinstance(entry, str) or ":" not in entry:
            continue
        origin, problem = _module_origin(entry.split(":", 1)[0], base_dir)
        if problem:
            problems.append(f"{table}.{key}: {problem}")
            continue
        if table == "harness" and origin and isinstance(section.get("pins"), dict):
            pinned = {(base_dir / rel).resolve() for rel in section["pins"] if isinstance(rel, str) and rel}
            # Pins that leave out the code that runs would pin nothing.
            if Path(origin).resolve() not in pinned:
                problems.append(f"harness.entry: its module is loaded from {origin}, which harness.pins does not pin")


def _check_fault_households(data: dict[str, Any], ids: set[str], problems: list[str]) -> None:
    sim = data.get("simulator")
    faults = sim.get("faults") if isinstance(sim, dict) else None
    for i, fault in enumerate(faults if isinstance(faults, list) else []):
        hid = fault.get("household") if isinstance(fault, dict) else None
        if isinstance(hid, str) and hid not in ids:
            problems.append(f'simulator.faults[{i}].household: no household has id "{hid}"')


def _add_path(base_dir: Path) -> bool:
    entry = str(base_dir)
    if entry in sys.path:
        return False
    sys.path.insert(0, entry)
    return True


def resolve_entry(entry: str, base_dir: Path | None = None) -> Any:
    """Import ``"package.module:callable"`` and return the callable.

    ``base_dir`` (the design's directory) goes first on ``sys.path`` and stays
    there: a harness may import its sibling modules lazily, mid-run.
    """
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise DesignError([f'"{entry}": must be "package.module:callable"'])
    if base_dir is not None:
        _add_path(Path(base_dir).resolve())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise DesignError([f'"{entry}": cannot import {module_name}: {exc}']) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise DesignError([f'"{entry}": {module_name} has no attribute {attr}']) from None
    if not callable(obj):
        raise DesignError([f'"{entry}": {attr} is not callable'])
    return obj


def entry_module(entry: str, base_dir: Path | None = None) -> Any:
    """The imported module of ``"package.module:callable"`` (for its ``DESCRIBE``)."""
    module_name = entry.partition(":")[0]
    if base_dir is not None:
        _add_path(Path(base_dir).resolve())
    return importlib.import_module(module_name)
