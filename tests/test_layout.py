"""The package's layout, as docs/ARCHITECTURE.md draws it: layers import
downward only, nothing imports in a cycle, verify never reaches the runner,
the sampler or the anchor pusher, and no module outgrows a reader's mind.

The imports are read with ast (every import, at module level or inside a
function, except those under ``if TYPE_CHECKING:``), never by importing the
package. The layer order is read from the table in docs/ARCHITECTURE.md, so
the page and the test cannot drift apart. Each check is also run on a copy
of the package with one fault planted, and must find it.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "confirmatory"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
MAX_LINES = 600
# What the top of the package may hold besides its subpackages: the package
# itself, ``python -m confirmatory``, and the 0.1 import paths a harness may
# still use (each a re-export that warns; docs/HARNESS.md).
TOP_MODULES = {"__init__.py", "__main__.py", "llm.py", "errors.py", "pool.py", "witness.py"}
# What verify must never reach, directly or through anything it imports.
VERIFY_NEVER = (
    "confirmatory.engine",
    "confirmatory.host.sampler",
    "confirmatory.anchors.anchorer",
    "confirmatory.anchors.witness",
    "confirmatory.cli",
)


# ---------------------------------------------------------------- reading the package


def module_files(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the project's modules it imports. ``from a.b import c`` is an
    import of ``a.b.c`` where that is a module, else of ``a.b``."""
    files = module_files(package)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_checking_nodes(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "confirmatory")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                if base.split(".")[0] != "confirmatory":
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in files else base)
        graph[name] = {t for t in targets if t != name}
    return graph


def layer_of(module: str, package: Path = PACKAGE) -> str:
    """``confirmatory.engine.llm.chat`` -> ``engine``; the package itself is ``confirmatory``;
    ``python -m confirmatory`` is ``__main__``; no other module stands at
    the top (0.1's re-exporting paths are gone): one there is ``top``, a
    layer the table does not have."""
    parts = module.split(".")
    if len(parts) == 1:
        return "confirmatory"
    if parts[1:] == ["__main__"]:
        return "__main__"
    if len(parts) == 2 and not (package / parts[1]).is_dir():
        return "top"
    return parts[1]


def layer_table(text: str) -> dict[str, tuple[str, ...]]:
    """The rows of the table under '## The layers' in docs/ARCHITECTURE.md:
    ``| `layer` | ... | `a`, `b.c` |`` (its last column: what it may import;
    'nothing' for none). A row may name several layers (`` `demo`, `sim` ``)."""
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    table: dict[str, tuple[str, ...]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        allowed = tuple(re.findall(r"`([\w.]+)`", cells[-1]))
        for layer in re.findall(r"`([\w.]+)`", cells[0]):
            table[layer] = allowed
    return table


# ---------------------------------------------------------------- the checks


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def against_the_order(
    graph: dict[str, set[str]], table: dict[str, tuple[str, ...]], package: Path = PACKAGE
) -> list[str]:
    """Each import of another layer that the importer's row does not allow,
    and each module of a layer the table does not name."""
    problems = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module, package)
        if layer not in table:
            problems.append(f"{module}: layer {layer!r} is not in docs/ARCHITECTURE.md's table")
            continue
        for target in sorted(targets):
            if layer_of(target, package) == layer:
                continue
            short = target.removeprefix("confirmatory.") if target != "confirmatory" else "confirmatory"
            if not any(short == a or short.startswith(a + ".") for a in table[layer]):
                problems.append(f"{module} imports {target}: {layer} may import only {', '.join(table[layer])}")
    return problems


def reached(graph: dict[str, set[str]], start: str, never: tuple[str, ...]) -> list[str]:
    """Each forbidden module reachable from the modules under ``start``, with the path that reaches it."""
    paths: dict[str, list[str]] = {m: [m] for m in graph if m == start or m.startswith(start + ".")}
    todo = list(paths)
    while todo:
        v = todo.pop()
        for w in sorted(graph.get(v, ())):
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return [
        " -> ".join(path) for m, path in sorted(paths.items()) if any(m == n or m.startswith(n + ".") for n in never)
    ]


def too_long(package: Path, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{name}: {n} lines (at most {limit})"
        for name, path in module_files(package).items()
        if (n := len(path.read_text().splitlines())) > limit
    ]


def stray_top_modules(package: Path) -> list[str]:
    return sorted(p.name for p in package.glob("*.py") if p.name not in TOP_MODULES)


# What a module of the command line may import: the front door (the package
# itself), the display (the command line's own modules), click, the standard library.
CLI_MAY_IMPORT = ("confirmatory", "confirmatory.cli", "click", "__future__")
CLI_EXEMPT: set[str] = set()


def cli_imports(package: Path) -> list[str]:
    """Each import of a module under ``cli/`` that is not the front door, the
    command line's own, click or the standard library (imports under
    ``if TYPE_CHECKING:`` included: a type the command line needs is the front door's)."""
    import sys

    problems = []
    for path in sorted((package / "cli").glob("*.py")):
        if path.name in CLI_EXEMPT:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = (
                    ["confirmatory.cli" + (f".{node.module}" if node.module else "")]
                    if node.level
                    else [node.module or ""]
                )
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if name == "confirmatory" or name == "confirmatory.cli" or name.startswith("confirmatory.cli."):
                    continue
                if top != "confirmatory" and (top in CLI_MAY_IMPORT or top in sys.stdlib_module_names):
                    continue
                problems.append(
                    f"cli/{path.name}:{node.lineno} imports {name}: the command line imports only the front door"
                )
    return problems


# ---------------------------------------------------------------- the package as it is


def test_the_package_imports_nothing_in_a_cycle():
    assert cycles(import_graph(PACKAGE)) == []


def test_every_import_follows_the_layer_order_of_the_architecture_page():
    table = layer_table(ARCHITECTURE.read_text())
    assert {"core", "records", "design", "engine", "verify", "cli"} <= set(table)
    assert against_the_order(import_graph(PACKAGE), table) == []


def named_paths(text: str, package: Path = PACKAGE) -> list[str]:
    """Each module path a page names that does not exist: a dotted name under
    a layer (``cli.run``, ``confirmatory.engine.llm.chat``,
    ``commands.run.end_summary``: the longest module prefix must exist, and
    the next name must occur in it) and a file path under a layer
    (``records/writer.py``). A file name with its extension (``host.jsonl``,
    ``design.toml``) is no module."""
    layers = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())

    def module(parts: list[str]) -> Path | None:
        path = package.joinpath(*parts)
        for found in (path.with_suffix(".py"), path / "__init__.py"):
            if found.is_file():
                return found
        return None

    missing = set()
    for m in re.finditer(r"(?<![\w./-])(?:confirmatory\.)?((?:{})(?:\.\w+)+)".format("|".join(layers)), text):
        parts = m.group(1).split(".")
        if parts[-1] in ("json", "jsonl", "toml", "md", "py", "html", "txt"):
            continue
        depth = max(i for i in range(1, len(parts) + 1) if module(parts[:i]))
        rest = parts[depth:]
        found = module(parts[:depth])
        if rest and found is not None and not re.search(rf"\b{re.escape(rest[0])}\b", found.read_text()):
            missing.add(m.group(1))
    for m in re.finditer(r"(?<![\w/.-])((?:{})/[\w/]+\.py)\b".format("|".join(layers)), text):
        if not (package / m.group(1)).is_file():
            missing.add(m.group(1))
    return sorted(missing)


def test_every_module_path_the_architecture_page_names_exists():
    assert named_paths(ARCHITECTURE.read_text()) == []


def test_a_path_the_page_names_that_does_not_exist_is_found():
    planted = (
        "the work is in `cli.check`, `cli/run.py` and `records/writer.py`; "
        "`commands.run.end_summary` and `commands.run.no_such_name`; host.jsonl and `engine.llm`"
    )
    assert named_paths(planted) == ["cli.check", "commands.run.no_such_name"]


def test_verify_never_reaches_the_runner_the_sampler_or_the_anchor_pusher():
    graph = import_graph(PACKAGE)
    assert any(m.startswith("confirmatory.verify.") for m in graph)  # the check looks at something
    assert reached(graph, "confirmatory.verify", VERIFY_NEVER) == []


def test_the_command_line_imports_only_the_front_door_the_display_click_and_the_standard_library():
    assert {p.name for p in (PACKAGE / "cli").glob("*.py")} - CLI_EXEMPT >= {"main.py", "progress.py"}
    assert cli_imports(PACKAGE) == []


def test_no_module_is_over_600_lines():
    assert too_long(PACKAGE) == []


def test_the_top_of_the_package_holds_the_subpackages_and_a_few_modules():
    assert stray_top_modules(PACKAGE) == []
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {"core", "records", "runtime", "design", "host", "anchors", "engine", "verify", "cli"} <= subpackages


# ---------------------------------------------------------------- each check, on a planted fault


@pytest.fixture
def copy(tmp_path):
    """A copy of the package to plant one fault in."""
    target = tmp_path / "confirmatory"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def order_problems(package: Path) -> set[str]:
    return set(against_the_order(import_graph(package), layer_table(ARCHITECTURE.read_text()), package))


def new_in(copy: Path, check) -> set:
    """What ``check`` finds in the planted copy and not in the package as it is:
    the planted fault alone, whatever else is under way in the tree."""
    return set(check(copy)) - set(check(PACKAGE))


def plant(package: Path, module: str, line: str) -> None:
    path = package / module
    path.write_text(path.read_text() + "\n\ndef _planted():\n    " + line + "\n")


@pytest.mark.slow
def test_a_planted_cycle_is_found(copy):
    # The chain's format would import its writer, which imports the format.
    plant(copy, "records/chain.py", "from confirmatory.records.writer import ChainWriter")
    found = cycles(import_graph(copy))
    assert ["confirmatory.records.chain", "confirmatory.records.writer"] in [
        [m for m in c if m in ("confirmatory.records.chain", "confirmatory.records.writer")] for c in found
    ]


@pytest.mark.slow
def test_a_planted_upward_import_is_found(copy):
    plant(copy, "core/money.py", "from confirmatory.records.chain import dumps")
    assert new_in(copy, order_problems) == {
        "confirmatory.core.money imports confirmatory.records.chain: core may import only "
    }


@pytest.mark.slow
def test_an_import_under_type_checking_is_no_import(copy):
    path = copy / "core" / "money.py"
    path.write_text(
        path.read_text() + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from confirmatory.engine.run import Run\n"
    )
    assert new_in(copy, order_problems) == set()


@pytest.mark.slow
def test_verify_reaching_the_sampler_through_another_module_is_found(copy):
    # Not verify's own import: design's loader would import the sampler, and verify imports the loader.
    plant(copy, "design/load.py", "from confirmatory.host.sampler import HostMonitor")
    paths = new_in(copy, lambda pkg: reached(import_graph(pkg), "confirmatory.verify", VERIFY_NEVER))
    assert paths and all("confirmatory.design.load -> confirmatory.host.sampler" in p for p in paths)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["confirmatory.anchors.witness", "confirmatory.engine.run"])
def test_verify_importing_the_pusher_or_the_runner_is_found(copy, target):
    plant(copy, "verify/report.py", f"import {target}")
    assert any(
        p.startswith("confirmatory.verify.report -> " + target)
        for p in new_in(copy, lambda pkg: reached(import_graph(pkg), "confirmatory.verify", VERIFY_NEVER))
    )
    # ... and the layer order says so too
    assert {p.split(":")[0] for p in new_in(copy, order_problems)} == {f"confirmatory.verify.report imports {target}"}


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("from confirmatory.engine.run import Run", "confirmatory.engine.run"),
        ("import confirmatory.records.chain", "confirmatory.records.chain"),
        ("from filelock import FileLock", "filelock"),
    ],
)
def test_a_command_line_module_importing_below_the_front_door_is_found(copy, line, name):
    plant(copy, "cli/main.py", line)
    found = new_in(copy, cli_imports)
    assert len(found) == 1 and f"imports {name}:" in found.pop()


def test_an_import_from_the_front_door_in_the_command_line_is_no_fault(copy):
    plant(copy, "cli/main.py", "from confirmatory import run_command")
    plant(copy, "cli/progress.py", "from . import exits")
    assert new_in(copy, cli_imports) == set()


def test_a_planted_module_over_600_lines_is_found(copy):
    (copy / "core" / "long.py").write_text('"""Long."""\n' + "x = 1\n" * MAX_LINES)
    assert new_in(copy, too_long) == {f"confirmatory.core.long: {MAX_LINES + 1} lines (at most {MAX_LINES})"}


def test_a_module_added_at_the_top_of_the_package_is_found(copy):
    (copy / "helpers.py").write_text('"""Anything."""\n')
    assert stray_top_modules(copy) == ["helpers.py"]


@pytest.mark.slow
def test_a_layer_the_page_does_not_name_is_found(copy):
    (copy / "extras").mkdir()
    (copy / "extras" / "__init__.py").write_text("from confirmatory.core import money\n")
    assert new_in(copy, order_problems) == {
        "confirmatory.extras: layer 'extras' is not in docs/ARCHITECTURE.md's table"
    }
