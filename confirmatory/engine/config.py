"""The run config (``config.json``): what this run pinned down and what it could not.

Owns the honest account a reader needs to replicate a run: the runner's and
the harness's identity, the design's hash, the prompts and tool schemas the
harness declares, each arm's features, and per model the parameters actually
sent and the model's identity from the hand-kept registry (``models.json``).
Then, in plain sentences, ``not_pinned_down`` (what the provider or the
registry leaves open) and ``known_confounds`` (how a declared matched pair may
differ besides the thing being compared).

Nothing secret is ever written: parameters that can hold credentials are
withheld by name, and every string passes through ``confirmatory.core.redaction``
before it reaches the file.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from confirmatory.core.redaction import HEADER_KEYS, is_secret_name, redact, redact_obj
from confirmatory.core.version import VERSION
from confirmatory.design.load import entry_module
from confirmatory.design.model import ENTRY_RE, LoadedDesign, ModelSpec
from confirmatory.engine import llm
from confirmatory.records.manifests import engine_fields

CONFIG_FORMAT = "confirmatory-config/1"
REGISTRY_FORMAT = "confirmatory-models/1"
PACKAGES = ("litellm", "openai", "httpx", "pydantic", "psutil", "click", "filelock")
# The registry fields that identify a model; "notes" is commentary, not identity.
IDENTITY_FIELDS = (
    "provider",
    "snapshot",
    "serving_precision",
    "quantization",
    "parameter_count",
    "parameter_count_verified",
    "base_model",
    "modifications",
    "seed_supported",
    "seed_reproducible",
)
TOKEN_PARAMS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
DECLARED = ("prompts", "documents", "tool_schemas")


def build_config(loaded: LoadedDesign, *, argv: list[str], registry_path: Path) -> dict[str, Any]:
    """The run config as a JSON-ready dict, secrets removed."""
    design = loaded.design
    registry = load_registry(registry_path)
    not_pinned: list[str] = []
    harness = _harness(loaded, not_pinned)
    models: dict[str, Any] = {}
    for spec in design.models:
        entry = registry.get(spec.litellm_model)
        models[spec.name] = _model(spec, entry, not_pinned)
        if getattr(spec, "price", None) == "litellm":
            price = models[spec.name].get("price") or {}
            not_pinned.append(
                f"{spec.name}'s spend follows litellm's price map (price = \"litellm\"): its calls are counted "
                f"at the table litellm {price.get('litellm_version')} gave at the run's start, from "
                f"{price.get('price_map_source')}, not at prices the design freezes."
            )
    if not registry_path.is_file():
        not_pinned.insert(0, f"The model registry {registry_path} was not found, so no model's identity is recorded.")
    unpinned = unpinned_local_modules(loaded)
    if unpinned:
        not_pinned.append(
            f"These files beside the design are run by the harness or the engine and are not "
            f"pinned, so nothing holds them fixed: {', '.join(unpinned)}."
        )
    cfg = {
        "format": CONFIG_FORMAT,
        "runner": runner_identity(argv),
        "design_sha256": loaded.sha256,
        "study": {"id": design.study.id, "seed": design.study.seed},
        "harness": harness,
        "engine": engine_fields(design.engine),
        "households": {
            "path": design.households.path,
            "sha256": design.households.sha256,
            "count": len(loaded.households),
        },
        "arms": {arm.name: arm.features for arm in design.arms},
        "models": models,
        # Which registry the identities came from (runmain.registry_path: beside
        # the design, else the working directory, else the project's).
        "model_registry": {"path": str(registry_path), "sha256": _sha256_or_none(registry_path)},
        "not_pinned_down": not_pinned,
        "known_confounds": known_confounds(design.models, registry),
    }
    # A last pass over every string: a secret that slipped into a prompt, a
    # feature or a note is still not written.
    return cast(dict[str, Any], redact_obj(cfg))


# What Ray decides and nothing in the run fixes (config.json not_pinned_down).
RAY_NOT_PINNED = (
    "The engine ran on a Ray cluster, which placed each model's engine actors on nodes of its choosing: "
    "engine.backend.pools names the nodes each pool got, not what those nodes were (their hardware, "
    "operating system and installed packages may differ from each other and from the runner's machine).",
    "Ray's scheduler decided which actor served each engine call's turn and when; a call's timing, and "
    "an engine whose result depends on the node, are not fixed by this run.",
    "On other nodes of the cluster the actors imported the engine installed there, which the runner "
    "did not check against the design's pins (it checks the files on its own machine).",
)


def with_backend(cfg: dict[str, Any], backend: dict[str, Any]) -> dict[str, Any]:
    """config.json with ``engine.backend`` (where the pools ran and what they got,
    as the run manifest says it) and, on Ray, what Ray leaves open in ``not_pinned_down``."""
    out = {**cfg, "engine": {**cfg.get("engine", {}), "backend": backend}}
    if backend.get("name") == "ray":
        out["not_pinned_down"] = [*cfg.get("not_pinned_down", []), *RAY_NOT_PINNED]
    return cast(dict[str, Any], redact_obj(out))


def _sha256_or_none(path: Path) -> str | None:
    try:
        return _sha(Path(path).read_bytes())
    except OSError:
        return None


def write_config(run_dir: Path, cfg: dict[str, Any]) -> str:
    """Write ``RUN_DIR/config.json`` durably; return the sha256 of its bytes."""
    from confirmatory.records.writer import write_json_durable

    return write_json_durable(Path(run_dir) / "config.json", cfg)


def load_registry(path: Path) -> dict[str, dict[str, Any]]:
    """litellm model string -> registry entry; {} when the file is absent."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    if "models" in data:
        if data.get("format") != REGISTRY_FORMAT:
            raise ValueError(f"{path}: format must be {REGISTRY_FORMAT!r} (got {data.get('format')!r})")
        data = data["models"]
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def registry_problem(path: Path) -> str | None:
    """Why ``load_registry`` would refuse ``path`` (one line, naming it), or None.

    Asked by check, run's preflight and probe-seed before anything starts or
    is paid for: a registry the run cannot read must not end the run's start
    in a traceback, nor a probe's two paid requests in one."""
    import json

    try:
        load_registry(path)
    except json.JSONDecodeError as exc:
        return f"{path}: not valid JSON ({exc})"
    except UnicodeDecodeError:
        return f"{path}: not UTF-8 text"
    except ValueError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or exc}"
    return None


def identity(entry: dict[str, Any] | None) -> dict[str, Any]:
    """The registry's identity of a model, what it leaves null, and whether that suffices."""
    if entry is None:
        return {"identity": None, "missing": list(IDENTITY_FIELDS), "sufficient_for_replication": False}
    missing = [f for f in IDENTITY_FIELDS if entry.get(f) is None]
    return {"identity": dict(entry), "missing": missing, "sufficient_for_replication": not missing}


def runner_identity(argv: list[str]) -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    commit, dirty = git_state(Path(__file__).resolve().parents[1], "__init__.py")
    return {
        "name": "confirmatory",
        "version": VERSION,
        "packages": packages,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": sys.version,
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "argv": [redact(a) for a in _redact_options(argv)],
    }


def git_state(source_dir: Path, source_file: str) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout the code runs from; (None, None) outside one.

    Also (None, None) when the checkout around ``source_dir`` does not track
    ``source_file`` (a name in it): code installed into a virtualenv inside
    another project's repository (the study's own, its .venv ignored) is not
    that repository's commit, and must not be recorded as it."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=source_dir, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is None or git("ls-files", "--error-unmatch", "--", source_file) is None:
        return None, None
    # --no-optional-locks: a status must not rewrite the index of a tree others use.
    status = git("--no-optional-locks", "status", "--porcelain")
    return head.strip(), None if status is None else bool(status.strip())


def _redact_options(argv: list[str]) -> list[str]:
    from confirmatory.core.redaction import redact_argv

    return redact_argv(list(argv))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe_problems(described: Any) -> list[str]:
    """What is wrong with a harness's DESCRIBE (or describe()) value; [] when
    it is absent or well formed: a table of ``prompts``, ``documents`` and
    ``tool_schemas``, each a table of name -> text or JSON value."""
    from confirmatory.records.chain import dumps

    if described is None:
        return []
    if not isinstance(described, dict):
        return [f"harness DESCRIBE: must be a dict of {', '.join(DECLARED)} (got {type(described).__name__})"]
    problems = [
        f"harness DESCRIBE: unknown key {key!r} (the keys are {', '.join(DECLARED)})"
        for key in described
        if key not in DECLARED
    ]
    for kind in DECLARED:
        items = described.get(kind)
        if items is None:
            continue
        if not isinstance(items, dict):
            problems.append(
                f"harness DESCRIBE[{kind!r}]: must be a dict of name -> text or JSON value (got {type(items).__name__})"
            )
            continue
        for name, value in items.items():
            if not isinstance(name, str):
                problems.append(f"harness DESCRIBE[{kind!r}]: names must be strings (got {name!r})")
            elif not isinstance(value, str):
                try:
                    dumps(value if isinstance(value, dict) else {"value": value})
                except (TypeError, ValueError) as exc:
                    problems.append(f"harness DESCRIBE[{kind!r}][{name!r}]: not JSON ({exc})")
    return problems


def unpinned_local_modules(loaded: LoadedDesign) -> list[str]:
    """Python files beside the design that the run executes and the design
    does not pin, relative to the design: the harness's and the engine
    factory's modules and every module beside the design they reach, through
    their import statements (wherever they are in a file: a lazy import
    inside ``run`` too) and through ``"module:function"`` strings (an engine
    pool's worker target). (Files with no code, such as an empty
    ``__init__.py``, are left out.)"""
    base = Path(loaded.base_dir).resolve()
    pinned = {str(Path(p)) for p in loaded.pins}

    def local_file(name: str, root: Path | None = None) -> Path | None:
        """The file beside the design (or under ``root``, for a relative
        import) that importing ``name`` runs, else None."""
        top = base if root is None else root
        parts = name.split(".") if name else []
        for candidate in ([top.joinpath(*parts).with_suffix(".py")] if parts else []) + [
            top.joinpath(*parts, "__init__.py")
        ]:
            if candidate.is_file():
                return candidate.resolve()
        if root is None:
            # a package-qualified name (the bundled study's confirmatory.demo.harness)
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                return None
            origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
            if origin is not None and origin.suffix == ".py" and base in origin.parents:
                return origin
        return None

    start = [loaded.design.harness.entry, loaded.design.engine.entry]
    todo = [f for f in (local_file(entry.split(":", 1)[0]) for entry in start) if f is not None]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            root = None
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                root = path.parents[node.level - 1]
                prefix = f"{node.module}." if node.module else ""
                names = ([node.module] if node.module else []) + [prefix + a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ENTRY_RE.fullmatch(node.value):
                names = [node.value.split(":", 1)[0]]  # "module:function": an engine worker's target
            for name in names:
                for k in range(1, name.count(".") + 2):  # a package's __init__ runs too
                    found = local_file(".".join(name.split(".")[:k]), root)
                    if found is not None and found not in seen:
                        todo.append(found)
    out = set()
    for path in seen:
        rel = path.relative_to(base)
        if {"site-packages", ".venv", "venv"} & set(rel.parts):
            continue
        if str(rel) not in pinned and not _only_a_docstring(path):
            out.add(str(rel))
    return sorted(out)


def _only_a_docstring(path: Path) -> bool:
    """A file with no code (empty, or a docstring alone: a package's __init__.py)."""
    try:
        body = ast.parse(path.read_bytes()).body
    except (OSError, SyntaxError, ValueError):
        return False
    return not body or (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )


def harness_described(module: Any) -> Any:
    """The module's DESCRIBE, else what its describe() returns, else None."""
    described = getattr(module, "DESCRIBE", None)
    if described is None and callable(getattr(module, "describe", None)):
        described = module.describe()
    return described


def _harness(loaded: LoadedDesign, not_pinned: list[str]) -> dict[str, Any]:
    from confirmatory.records.chain import dumps

    spec = loaded.design.harness
    out: dict[str, Any] = {
        "entry": spec.entry,
        "pins": dict(loaded.pins),
        "declared": False,
        "git_commit": None,
        "git_dirty": None,
    }
    try:
        module = entry_module(spec.entry, loaded.base_dir)
        described = harness_described(module)
    except Exception as exc:  # the run itself will refuse it; the config says why
        not_pinned.append(
            f"The harness module could not be imported to read its declarations: {type(exc).__name__}: {exc}."
        )
        return out
    source = getattr(module, "__file__", None)
    if source:
        # The checkout the harness runs from (the study's repository), as the runner's own.
        source_path = Path(source).resolve()
        out["git_commit"], out["git_dirty"] = git_state(source_path.parent, source_path.name)
    if not isinstance(described, dict) or describe_problems(described):
        not_pinned.append(
            "The harness does not declare its prompts, documents and tool schemas (no DESCRIBE,"
            " or one `run` would refuse); they are fixed only through the pinned file hashes."
        )
        return out
    out["declared"] = True
    for kind in DECLARED:
        items = described.get(kind) or {}
        table: dict[str, Any] = {}
        for name, value in items.items():
            if isinstance(value, str):
                table[name] = {"sha256": _sha(value.encode("utf-8")), "text": value}
            else:
                table[name] = {
                    "sha256": _sha(dumps(value if isinstance(value, dict) else {"value": value})),
                    "value": value,
                }
        out[kind] = table
    return out


def _clean_api_base(api_base: str | None) -> str | None:
    if api_base is None or api_base == "simulator":
        return api_base
    # A key can hide in a URL's user part or query string.
    parts = urlsplit(api_base)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _is_local(spec: ModelSpec) -> bool:
    return spec.simulated or (spec.api_base or "").startswith(("http://127.0.0.1", "http://localhost"))


def _model(spec: ModelSpec, entry: dict[str, Any] | None, not_pinned: list[str]) -> dict[str, Any]:
    sent: dict[str, Any] = {}
    withheld: list[str] = []
    for key, value in spec.params.items():
        if is_secret_name(key) or key in HEADER_KEYS:
            withheld.append(key)
        else:
            sent[key] = redact_obj(value)
    sent["timeout"] = spec.timeout_s  # as llm.chat sends them
    sent["num_retries"] = 0
    token_param = next((k for k in TOKEN_PARAMS if k in spec.params), None)
    supported = llm.supported_params(spec.litellm_model)
    ident = identity(entry)
    out = {
        "litellm_model": spec.litellm_model,
        "provider": llm.provider_of(spec.litellm_model),
        "supported_params": supported,
        "api_base": _clean_api_base(spec.api_base),
        "params_sent": sent,
        "params_withheld": withheld,
        "timeout_s": spec.timeout_s,
        "token_parameter": None if token_param is None else {"name": token_param, "value": spec.params[token_param]},
        "lanes": spec.lanes,
        "matched_with": spec.matched_with,
        # Registered by llm.prepare, which runs before the config is built.
        "price": llm.price_record(spec),
        **ident,
    }
    not_pinned.extend(model_sentences(spec, entry, supported, withheld, ident["missing"]))
    return out


def model_sentences(
    spec: ModelSpec, entry: dict[str, Any] | None, supported: list[str], withheld: list[str], missing: list[str]
) -> list[str]:
    """What stays open about one model, one plain sentence each."""
    n, lm = spec.name, spec.litellm_model
    out: list[str] = []
    if not supported:
        out.append(
            f"{n}: litellm does not know which parameters {lm} accepts,"
            " so whether temperature and seed are honoured is unknown."
        )
    else:
        if "temperature" not in supported:
            out.append(f"{n}: the provider does not accept temperature for {lm}; the sampling temperature is its own.")
        if "seed" not in supported:
            out.append(f"{n}: the provider takes no seed for {lm}, so a reply cannot be tied to one sample.")
    seed_possible = not supported or "seed" in supported
    if seed_possible and "seed" not in spec.params:
        out.append(f"{n}: no seed was passed.")
    if "seed" in spec.params:
        out.append(
            f"{n}: the seed goes with chat-completions calls only; calls through the Responses API"
            " carry none (that API takes no seed)."
        )
    if "seed" in spec.params and seed_possible:
        measured = None if entry is None else entry.get("seed_reproducible")
        if measured is False:
            out.append(f"{n}: a seed is passed, but it was measured not to reproduce {lm}'s replies.")
        elif measured is None:
            out.append(
                f"{n}: a seed is passed, but whether it reproduces {lm}'s replies was never measured"
                " (confirmatory probe-seed)."
            )
    if not _is_local(spec):
        out.append(
            f"{n}: a shared endpoint chooses batching and kernels, which can change replies to identical requests."
        )
    if entry is None:
        out.append(
            f"{n}: {lm} has no entry in models.json, so its weights, precision and modifications are not recorded."
        )
    else:
        if entry.get("snapshot") is None:
            out.append(f"{n}: the name {lm} can point at new weights over time; no dated snapshot is recorded.")
        if missing:
            out.append(f"{n}: models.json does not record {', '.join(missing)} for {lm}.")
    if withheld:
        out.append(
            f"{n}: the parameters {', '.join(withheld)} were sent but are not recorded,"
            " because they can hold credentials."
        )
    return out


def known_confounds(models: tuple[ModelSpec, ...], registry: dict[str, dict[str, Any]]) -> list[str]:
    """For each declared matched pair, how the two may differ beyond what is compared."""
    by_name = {m.name: m for m in models}
    pairs = sorted({tuple(sorted((m.name, m.matched_with))) for m in models if m.matched_with in by_name})
    out: list[str] = []
    for a, b in pairs:
        ea, eb = (registry.get(by_name[x].litellm_model) for x in (a, b))
        pair = f"{a} and {b}"
        for field, what in (("serving_precision", "serving precision"), ("quantization", "quantization")):
            va, vb = (None if e is None else e.get(field) for e in (ea, eb))
            if va is not None and vb is not None and va != vb:
                out.append(f"{pair} are served with different {what} ({va} vs {vb}).")
            for name, value in ((a, va), (b, vb)):
                if value is None:
                    out.append(f"{pair}: the {what} of {name} is not recorded, so the pair may differ in it.")
        ra, rb = (None if e is None else e.get("seed_reproducible") for e in (ea, eb))
        if ra is not None and rb is not None and ra != rb:
            out.append(f"{pair} differ in seed determinism ({a}: {_repro(ra)}; {b}: {_repro(rb)}).")
        for name, value in ((a, ra), (b, rb)):
            if value is None:
                out.append(f"{pair}: the seed determinism of {name} was never measured.")
        ba, bb = (None if e is None else e.get("base_model") for e in (ea, eb))
        for name, value in ((a, ba), (b, bb)):
            if value is None:
                out.append(f"{pair}: the base model of {name} is not confirmed, so the pair may not share one.")
        if ba is not None and bb is not None and ba != bb:
            out.append(f"{pair} are built on different base models ({ba} vs {bb}).")
        for name, entry in ((a, ea), (b, eb)):
            if entry is None or entry.get("modifications") is None:
                out.append(f"{pair}: the modifications of {name} (fine-tuning, ablation, filtering) are not recorded.")
    return out


def _repro(value: Any) -> str:
    return "reproduces" if value else "does not reproduce"
