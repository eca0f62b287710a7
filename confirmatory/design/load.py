"""Loading a design: the TOML, its households file, its harness pins, and
whether its harness, engine and commands can start at all.

Owns turning a path into a ``LoadedDesign`` or a ``DesignError`` that lists
*every* problem at once, one line each, naming the dotted key: a person fixing
a design should not have to rerun ``confirmatory check`` once per typo. So each
stage below keeps going after a problem and only the end decides.

Relative paths (households, pins, evidence paths; the evidence and anchor
commands run there) are relative to the design file's directory, so a design
folder can be moved or cloned as a whole.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from confirmatory.core.redaction import HEADER_KEYS, find_secrets, is_secret_name
from confirmatory.design.crosscheck import cross_problems
from confirmatory.design.evidence import verify_tsa_pins
from confirmatory.design.model import (
    ENTRY_RE,
    MAX_DURATION_S,
    SHA256_RE,
    Design,
    DesignError,
    Household,
    LoadedDesign,
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
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DesignError([f"design: not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    # Before the TOML: a design that cannot be read must not hide a credential.
    raw_problems = raw_credential_problems(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DesignError([*raw_problems, f"design: not valid TOML: {exc}"]) from None

    base_dir = path.resolve().parent
    # Field problems first: a cross-entry problem is often their consequence
    # (a model whose name is missing is then "named nobody" by matched_with).
    problems: list[str] = []
    design: Design | None = None
    try:
        design = Design.model_validate(data)
    except ValidationError as exc:
        problems.extend(validation_problems(exc))
    problems.extend(cross_problems(data))

    engine: Any = data.get("engine") if isinstance(data.get("engine"), dict) else {}
    declared_workers = engine.get("workers_per_model", 2)
    if workers is not None and workers != declared_workers:
        problems.append(f"engine.workers_per_model: the design says {declared_workers!r}, --workers says {workers}")

    problems.extend(credential_problems(data))
    problems.extend(raw_problems)
    households = _read_households(data.get("households"), base_dir, problems)
    pins = _verify_pins(data.get("harness"), base_dir, problems)
    verify_tsa_pins(data.get("anchors"), base_dir, problems)
    _check_entries(data, base_dir, problems)
    _check_commands(data, base_dir, problems)
    if households is not None:
        _check_fault_households(data, {h.id for h in households}, problems)

    # The same cross-entry problem can come from the raw check and the model's own.
    problems = list(dict.fromkeys(problems))
    if problems or design is None:
        raise DesignError(problems or ["design: invalid"])
    for evidence in design.host.evidence:
        # A relative evidence path (or command) is the design directory's, like the pins.
        evidence._base_dir = base_dir
    return LoadedDesign(
        design=design,
        path=path,
        base_dir=base_dir,
        raw=raw,
        sha256=hashlib.sha256(raw).hexdigest(),
        households=households or (),
        pins=pins,
    )


_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
_NOT_CREDENTIALS = ("prompt_cache_key",)  # OpenAI's cache routing key: study data, not a secret
_PUBLISHED = (
    "a credential must not be in the design: design.toml is copied byte for byte into the run "
    "directory, which is published; give it in the environment instead (litellm reads "
    "OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)"
)


def credential_problems(data: Any) -> list[str]:
    """Credentials written in the design, which the run directory would
    publish byte for byte: a model parameter whose name says it is one
    (``api_key``, ``token``, ...; ``redaction.is_secret_name``), a header of
    such a name (or Authorization, Cookie) in a header table, and anywhere in
    the design a string holding a token's shape (``sk-...``, ``Bearer ...``)
    or the value of a secret-named environment variable
    (``redaction.find_secrets``, as ``raw_credential_problems`` finds them in
    the text)."""
    problems: list[str] = []
    models = data.get("models") if isinstance(data, dict) else None
    for i, spec in enumerate(models if isinstance(models, list) else []):
        params = spec.get("params") if isinstance(spec, dict) else None
        for key, value in params.items() if isinstance(params, dict) else ():
            if key in HEADER_KEYS and isinstance(value, dict):
                for name in value:
                    if is_secret_name(str(name)) or str(name).lower() in _CREDENTIAL_HEADERS:
                        problems.append(f"models[{i}].params.{key}.{name}: {_PUBLISHED}")
            elif is_secret_name(str(key)) and key not in _NOT_CREDENTIALS:
                problems.append(f"models[{i}].params.{key}: {_PUBLISHED}")

    def walk(value: Any, key: str) -> None:
        if isinstance(value, str):
            if find_secrets(value) and not any(p.startswith(f"{key}:") for p in problems):
                problems.append(f"{key}: holds what looks like a credential; {_PUBLISHED}")
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for j, v in enumerate(value):
                walk(v, f"{key}[{j}]")

    walk(data, "")
    return problems


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
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "tuple_type": "an array",
    "list_type": "an array",
}


def _message(err: Mapping[str, Any]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in _KINDS:
        return f"must be {_KINDS[kind]} (got {got!r})"
    if kind == "finite_number":
        return f"must be a finite number (got {got!r})"
    bounds = {
        "greater_than_equal": (">=", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("<=", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        op, name = bounds[kind]
        if name == "le" and ctx[name] == MAX_DURATION_S:
            return f"must be at most {MAX_DURATION_S} s (30 days), the longest duration a design may give (got {got!r})"
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
    errors = exc.errors()
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "too_short" and any(
            tuple(o["loc"])[: len(loc)] == loc and len(o["loc"]) > len(loc) for o in errors
        ):
            # An array whose only item failed is also reported as empty
            # by pydantic: the item's own problem says it all.
            continue
        key, msg = key_of(loc), _message(err)
        for line in msg.splitlines():
            # Root-level checks (cross_problems) already name their keys.
            lines.append(f"{key}: {line}" if key else line)
    return lines


def raw_credential_problems(text: str) -> list[str]:
    """Credentials anywhere in the design's text, one problem per line that
    holds one: design.toml is published byte for byte, so a comment or a key
    name is published as a value is, and ``credential_problems`` (which reads
    the parsed values) sees neither. Found as redaction finds them
    (``redaction.find_secrets``: token shapes, secret-named environment
    variables' values); the message names the line, never the secret."""
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if found := find_secrets(line):
            problems.append(
                f"line {number}: holds {' and '.join(found)}; remove it: the design file is copied byte "
                "for byte, comments and key names included, into the run directory, which is published; "
                "give a credential in the environment instead"
            )
    return problems


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_households_file(path: Path, sha256: str | None) -> tuple[tuple[Household, ...], list[str]]:
    """A households file read as ``run`` reads it (its households sorted by id)
    and the problems found in it, against ``sha256`` (the design's pin; None:
    not compared). ``verify --households`` checks a run's draw with it."""
    problems: list[str] = []
    found = _read_households({"path": path.name, "sha256": sha256}, path.parent, problems)
    return found or (), problems


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
    folded: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f'households.path: "{rel}" line {number}'
        try:
            obj = json.loads(
                line, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
            )
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg})")
            continue
        except RecursionError:
            problems.append(f"{where}: nested deeper than Python's JSON reader allows (about 1,000 levels)")
            continue
        except ValueError as exc:  # NaN, Infinity: Python reads them, JSON has none
            problems.append(f"{where}: not JSON ({exc})")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        if "id" not in obj:
            problems.append(f'{where}: "id" is missing')
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
        if hid.casefold() in folded:
            other, other_line = folded[hid.casefold()]
            problems.append(
                f'{where}: household id "{hid}" differs from "{other}" (line {other_line}) only in case;'
                " as paths they collide on a case-insensitive filesystem"
            )
            continue
        folded[hid.casefold()] = (hid, number)
        found[hid] = Household(id=hid, payload=obj)
    if not found:
        problems.append(f'households.path: "{rel}" holds no households')
    return tuple(found[k] for k in sorted(found))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys without a word; the household
    # the harness would see is then not the line a reviewer reads.
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f'the key "{key}" appears twice in one object')
        obj[key] = value
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a finite number")
    return value


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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or "(no message)"


def import_entry(entry: str, base_dir: Path | None = None) -> tuple[Any, Any, str | None]:
    """Import ``"package.module:callable"`` as the runner will: (callable, module, None) or (None, None, problem).

    ``base_dir`` (the design's directory) must already be first on ``sys.path``.
    Every way this can fail is a problem line, never an exception: a missing
    module, a module or parent package that raises (a SyntaxError included)
    while it is imported, a top-level module of the design's directory shadowed
    by one Python has already imported under that name (``json.py``), a
    missing attribute, an attribute that is not callable.
    """
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        return None, None, f'must be "package.module:callable" (got {entry!r})'
    top = module_name.split(".", 1)[0]
    local = None
    if base_dir is not None:
        try:  # finds, without running anything
            local = importlib.machinery.PathFinder.find_spec(top, [str(base_dir)])
        except (ImportError, ValueError):
            local = None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            where = f"on sys.path and in {base_dir}" if base_dir is not None else "on sys.path"
            return None, None, f'no module named "{module_name}" (looked {where})'
        return None, None, f'importing "{module_name}" raised ModuleNotFoundError: {_one_line(exc)}'
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the study's code: any failure is the design's problem
        return None, None, f'importing "{module_name}" raised {type(exc).__name__}: {_one_line(exc)}'
    if local is not None and local.origin and local.has_location:
        loaded = getattr(sys.modules.get(top), "__file__", None)
        if loaded is None or Path(loaded).resolve() != Path(local.origin).resolve():
            return (
                None,
                None,
                (
                    f'"{top}" is already imported from {loaded or "Python itself"}, so {local.origin}'
                    " in the design's directory would not run; give the module a name of its own"
                ),
            )
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return None, None, f'module "{module_name}" has no attribute "{attr}"'
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ may raise anything
            return None, None, f'looking up "{attr}" in "{module_name}" raised {type(exc).__name__}: {_one_line(exc)}'
    if not callable(obj):
        return None, None, f'"{attr}" in module "{module_name}" is not callable (it is a {type(obj).__name__})'
    return obj, module, None


# How to install what backend = "ray" needs (pyproject's optional extra).
RAY_EXTRA = "pip install -e '.[ray]' (or pip install 'confirmatory[ray]')"


def ray_installed() -> bool:
    """Whether ray can be imported here, found without importing it (3 s)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _check_entries(data: dict[str, Any], base_dir: Path, problems: list[str]) -> None:
    """The harness and engine callables import and exist; the harness module is itself pinned.

    This imports both modules (it calls nothing), exactly as the runner will,
    so a module that cannot be imported is refused by ``check`` as well as by
    ``run``. A harness module must not import litellm at import time (the
    reference harness imports it lazily), or ``check`` stops being light.
    """
    engine = data.get("engine")
    if isinstance(engine, dict) and engine.get("backend") == "ray" and not ray_installed():
        problems.append(f'engine.backend: "ray" needs the ray package, which is not installed here: {RAY_EXTRA}')
    for table, key in (("harness", "entry"), ("engine", "factory"), ("engine", "target")):
        section: Any = data.get(table)
        entry = section.get(key) if isinstance(section, dict) else None
        if not isinstance(entry, str) or not ENTRY_RE.fullmatch(entry):
            continue  # the field checks report it
        added = _add_path(base_dir)
        try:
            _, module, problem = import_entry(entry, base_dir)
        finally:
            if added and str(base_dir) in sys.path:  # the module may have removed it itself
                sys.path.remove(str(base_dir))
        if problem:
            problems.append(f"{table}.{key}: {problem}")
            continue
        origin = getattr(module, "__file__", None)
        if table == "harness" and origin and isinstance(section.get("pins"), dict):
            pinned = {(base_dir / rel).resolve() for rel in section["pins"] if isinstance(rel, str) and rel}
            # Pins that leave out the code that runs would pin nothing.
            if Path(origin).resolve() not in pinned:
                problems.append(f"harness.entry: its module is loaded from {origin}, which harness.pins does not pin")


# What the runner substitutes in anchors.command (confirmatory.records.rundir.expand_command).
ANCHOR_PLACEHOLDERS = ("python", "run_dir")
# "{name}", but not a shell's "${name}" (left for the shell the command may start).
_PLACEHOLDER_RE = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def executable_problem(program: str, base_dir: Path) -> str | None:
    """Why ``program`` (a command's first word) cannot be started from ``base_dir``, or None.

    A program with a slash is a path, relative to ``base_dir`` (the commands
    run there); a bare name is looked up on PATH, as ``subprocess`` will.
    """
    if "/" in program:
        path = base_dir / program
        if not path.is_file():
            return f'executable "{program}" not found ({path} is not a file)'
        if not os.access(path, os.X_OK):
            return f'"{program}" is not executable ({path})'
        return None
    if shutil.which(program) is None:
        return f'executable "{program}" not found on PATH'
    return None


def _check_commands(data: dict[str, Any], base_dir: Path, problems: list[str]) -> None:
    """Evidence commands and the anchor command can start; the anchor command's placeholders are known."""
    host: Any = data.get("host") if isinstance(data.get("host"), dict) else {}
    evidence = host.get("evidence")
    for i, item in enumerate(evidence if isinstance(evidence, list) else []):
        command = item.get("command") if isinstance(item, dict) else None
        if isinstance(command, list) and command and isinstance(command[0], str) and command[0]:
            problem = executable_problem(command[0], base_dir)
            if problem:
                problems.append(f"host.evidence[{i}].command: {problem}")

    anchors: Any = data.get("anchors") if isinstance(data.get("anchors"), dict) else {}
    command = anchors.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        return  # absent, or the field checks report it
    unknown = False
    for j, arg in enumerate(command):
        for match in _PLACEHOLDER_RE.finditer(arg):
            if match.group(1) not in ANCHOR_PLACEHOLDERS:
                unknown = True
                problems.append(
                    f'anchors.command[{j}]: unknown placeholder "{match.group(0)}" (the runner'
                    f" substitutes {', '.join('{' + p + '}' for p in ANCHOR_PLACEHOLDERS)})"
                )
    program = command[0].replace("{python}", sys.executable)
    if not unknown and program and "{run_dir}" not in program:  # a program inside the run dir cannot exist yet
        problem = executable_problem(program, base_dir)
        if problem:
            problems.append(f"anchors.command: {problem}")


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


def resolve_entry(entry: str, base_dir: Path | None = None, key: str | None = None) -> Any:
    """Import ``"package.module:callable"`` and return the callable.

    ``base_dir`` (the design's directory) goes first on ``sys.path`` and stays
    there: a harness may import its sibling modules lazily, mid-run. Raises
    ``DesignError`` (never the import's own exception), naming ``key``
    (``harness.entry``) when given, else the entry.
    """
    if base_dir is not None:
        base_dir = Path(base_dir).resolve()
        _add_path(base_dir)
    obj, _, problem = import_entry(entry, base_dir)
    if problem:
        raise DesignError([f"{key or json.dumps(entry)}: {problem}"])
    return obj


def entry_module(entry: str, base_dir: Path | None = None) -> Any:
    """The imported module of ``"package.module:callable"`` (for its ``DESCRIBE``)."""
    module_name = entry.partition(":")[0]
    if base_dir is not None:
        _add_path(Path(base_dir).resolve())
    return importlib.import_module(module_name)
