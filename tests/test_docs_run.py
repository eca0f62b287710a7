"""docs/RUN.md is a reference a reviewer can trust: every rule section has
its reading, where verify checks it and which test shows it; every test and
verify function it names exists; every link into it lands on a heading.

The page is read as text and the named files with ast, never imported. Each
check is also run on a copy of the page with one fault planted (a wrong test
name, a wrong verify function, a rule without its test, a broken link), and
must find it.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_MD = ROOT / "docs" / "RUN.md"
PARTS = ("**Reading.**", "**Verify.**", "**Test.**")
# A rule's heading: "### 5. A rerun pass waits", "### 15a. The disk", "### C3. ..."
RULE = re.compile(r"^### ((?:\d+[a-z]?|C\d+)\. .+)$", re.M)
TEST_REF = re.compile(r"\b(tests/[\w/]+\.py)::([\w:]+)(?:\[[^\]]*\])?")
VERIFY_REF = re.compile(r"\b(confirmatory/verify/\w+\.py)::([\w.]+)")
INVARIANT = re.compile(r"\b[Ii]nvariants? (\d+)")
LINK = re.compile(r"\]\((?:[\w./]*RUN\.md)?#([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    s = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", s).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@cache
def defined(path: Path) -> frozenset[str]:
    """The functions and classes a module defines, by their dotted names
    (``f``, ``Class``, ``Class.method``)."""
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}{node.name}.")

    walk(ast.parse(path.read_text()).body, "")
    return frozenset(names)


def missing(path: str, name: str) -> str | None:
    """Why ``path::name`` does not name a definition (None when it does)."""
    file = ROOT / path
    if not file.is_file():
        return f"{path}: no such file"
    if name.replace("::", ".") not in defined(file):
        return f"{path}::{name}: no such function"
    return None


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of every rule section; a body runs to the next heading."""
    found = list(RULE.finditer(text))
    out = []
    for m in found:
        rest = text[m.end() :]
        nxt = re.search(r"^#{1,3} ", rest, re.M)
        out.append((m.group(1), rest[: nxt.start()] if nxt else rest))
    return out


def rule_problems(heading: str, body: str) -> list[str]:
    at = [body.find(p) for p in PARTS]
    if -1 in at or at != sorted(at):
        return [f"{heading!r}: lacks {', '.join(p for p, i in zip(PARTS, at) if i == -1) or 'its parts in order'}"]
    problems = []
    verify = body[at[1] : at[2]]
    if not ("Not checked" in verify or (INVARIANT.search(verify) or "States" in verify)):
        problems.append(f"{heading!r}: its Verify part names no invariant and does not say it is not checked")
    if "Not checked" not in verify and not VERIFY_REF.search(verify):
        problems.append(f"{heading!r}: its Verify part names no function under confirmatory/verify/")
    for m in INVARIANT.finditer(verify):
        if not 1 <= int(m.group(1)) <= 11:
            problems.append(f"{heading!r}: invariant {m.group(1)} is not one of docs/VERIFY.md's 1-11")
    test = body[at[2] :]
    if not TEST_REF.search(test.split("\n\n", 1)[0]):
        problems.append(f"{heading!r}: its Test part names no tests/...::test_name")
    return problems


def problems(text: str, others: dict[str, str]) -> list[str]:
    """Everything wrong with RUN.md's ``text``, and with the links into it
    from ``others`` (name -> text)."""
    out: list[str] = []
    rules = sections(text)
    if len(rules) < 18:
        out.append(f"only {len(rules)} rule sections")
    for heading, body in rules:
        out.extend(rule_problems(heading, body))
    for m in TEST_REF.finditer(text):
        why = missing(m.group(1), m.group(2))
        if why:
            out.append(why)
    for m in VERIFY_REF.finditer(text):
        why = missing(m.group(1), m.group(2))
        if why:
            out.append(why)
    here = anchors(text)
    for m in LINK.finditer(text):
        if m.group(1) not in here:
            out.append(f"RUN.md: link to #{m.group(1)}, no such heading")
    toc = text.split("\n## ", 2)[1] if "\n## Contents" in text else ""
    for heading, _ in rules:
        if f"(#{slug(heading)})" not in toc:
            out.append(f"{heading!r}: not in the contents")
    for name, other in others.items():
        for m in re.finditer(r"RUN\.md#([^)\s]+)", other):
            if m.group(1) not in here:
                out.append(f"{name}: link to RUN.md#{m.group(1)}, no such heading")
    return out


def other_docs() -> dict[str, str]:
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    return {str(p.relative_to(ROOT)): p.read_text() for p in files if p != RUN_MD}


def test_every_rule_has_its_reading_check_and_test_and_every_name_exists():
    text = RUN_MD.read_text()
    assert problems(text, other_docs()) == []
    assert len(TEST_REF.findall(text)) >= 60  # the page names its tests, not a few


def test_a_planted_wrong_test_name_is_found():
    text = RUN_MD.read_text()
    name = "test_a_harness_failure_stops_its_model_within_five_seconds"
    assert name in text
    found = problems(text.replace(name, name + "_not", 1), {})
    assert found == [f"tests/engine/test_run_rules.py::{name}_not: no such function"], found
    found = problems(text.replace("tests/engine/test_run_rules.py::", "tests/engine/test_no_such.py::", 1), {})
    assert found == ["tests/engine/test_no_such.py: no such file"], found


def test_a_planted_wrong_verify_function_is_found():
    text = RUN_MD.read_text()
    ref = "confirmatory/verify/procedure.py::ProcedureChecks.rerun_waited"
    assert ref in text
    found = problems(text.replace(ref, ref + "_not", 1), {})
    assert found == [f"{ref}_not: no such function"], found


def test_a_rule_without_one_of_its_parts_is_found():
    text = RUN_MD.read_text()
    heading = "### 6. A pause in the last pass"
    start = text.index(heading)
    body_end = text.index("\n### ", start + 1)
    rule = text[start:body_end]
    for part, left in (("**Test.**", "**Test.**"), ("**Verify.**", "**Verify.**"), ("**Reading.**", "**Reading.**")):
        cut = rule.replace(part, "Also:")
        found = problems(text[:start] + cut + text[body_end:], {})
        assert found == [f"'6. A pause in the last pass': lacks {left}"], found
    # a Test part that names no test
    cut = re.sub(r"\*\*Test\.\*\*.*", "**Test.** none yet", rule, flags=re.S) + "\n"
    found = problems(text[:start] + cut + text[body_end:], {})
    assert found == ["'6. A pause in the last pass': its Test part names no tests/...::test_name"], found
    # a Verify part that names neither an invariant nor says it is unchecked
    cut = re.sub(r"\*\*Verify\.\*\*.*?\n\n", "**Verify.** elsewhere.\n\n", rule, flags=re.S)
    found = problems(text[:start] + cut + text[body_end:], {})
    assert (
        "'6. A pause in the last pass': its Verify part names no invariant and does not say it is not checked" in found
    )


def test_a_broken_link_into_the_page_is_found():
    text = RUN_MD.read_text()
    link = "says so ([14](#14-a-lost-record))"
    assert link in text
    found = problems(text.replace(link, "says so ([14](#14-lost-record))", 1), {})
    assert found == ["RUN.md: link to #14-lost-record, no such heading"], found
    found = problems(text, {"docs/X.md": "see [RUN.md](RUN.md#16-signals) and [it](RUN.md#16-signal)"})
    assert found == ["docs/X.md: link to RUN.md#16-signal, no such heading"], found
    heading = "  - [6. A pause in the last pass](#6-a-pause-in-the-last-pass)\n"
    found = problems(text.replace(heading, "", 1), {})
    assert found == ["'6. A pause in the last pass': not in the contents"], found


def test_the_anchor_of_a_heading_is_githubs():
    assert slug("15a. The disk") == "15a-the-disk"
    assert slug("7. Pauses block attempts, not decisions") == "7-pauses-block-attempts-not-decisions"
    assert slug("`confirmatory show RUN_DIR [--json]`") == "confirmatory-show-run_dir---json"
