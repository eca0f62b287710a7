"""The run against its design: invariant 11.

Owns reading design.toml (once: `read_design`), the design's evidence
sources (every evidence line of host.jsonl names one), and the checks that
the manifests say what the design says: every field the design fixes, by the
mapping the runner wrote them with, the design's hash and pins, the models'
folders; the run manifest's arms a list of names; every model's, arm's and
household's name a slug.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from confirmatory.design.load import validation_problems
from confirmatory.design.model import Design, slug_problem
from confirmatory.records.chain import open_regular
from confirmatory.records.layout import tsa_files
from confirmatory.records.manifests import (
    EVIDENCE_OPTIONAL,
    MODEL_OPTIONAL,
    RUN_OPTIONAL,
    differences,
    evidence_fields,
    model_fields,
    run_fields,
)
from confirmatory.verify.context import RunContext
from confirmatory.verify.report import Findings


def read_design(root: Path) -> tuple[bytes, dict[str, Any]] | Exception:
    """design.toml's bytes and table, or why they cannot be read."""
    try:
        with open_regular(root / "design.toml") as fh:
            raw = fh.read()
        return raw, tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:
        return exc


def design_evidence_sources(design: tuple[bytes, dict[str, Any]] | Exception) -> frozenset[str] | None:
    """The names of design.toml's `[[host.evidence]]` entries, or None where
    design.toml cannot be read as a design's tables (invariant 11 says so)."""
    if isinstance(design, Exception):
        return None
    data = design[1]
    host = data.get("host", {})
    entries = host.get("evidence", []) if isinstance(host, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None
    return frozenset(e.get("name") for e in entries if type(e.get("name")) is str)


def design_data(ctx: RunContext, report: bool = True) -> tuple[bytes, dict[str, Any]] | None:
    """design.toml's bytes and table, or None (reported, unless not ``report``: invariant 11)."""
    design = ctx.design if ctx.design is not None else read_design(ctx.layout.root)
    if isinstance(design, Exception):
        if report:
            if ctx.logs.making:  # missing, or cut short mid-write (its copy is not atomic)
                ctx.findings.explain(
                    11, "design.toml", None, "not written yet: the run was cut short while its directory was made"
                )
            else:
                ctx.findings.fail(11, "design.toml", None, f"unreadable: {design}")
        return None
    return design


def manifest_arms(man: dict[str, Any], f: Findings) -> list[str]:
    """The run manifest's arms (optional: the model manifests' arm orders
    name them too); anything but a list of names fails invariant 11."""
    arms = man.get("arms", [])
    f.check(11)
    if not (isinstance(arms, list) and all(type(a) is str for a in arms)):
        f.fail(11, "manifest.json", None, f"arms is {arms!r}, not a list of names")
        return []
    return arms


def check_slugs(ctx: RunContext, man: dict[str, Any]) -> None:
    """Invariant 11: the models', arms' and households' names are slugs
    (RECORDS.md "Layout": each names a folder; ``..`` or a ``/`` would walk
    the tree). Each name is reported once, in the first manifest naming it."""
    f, seen = ctx.findings, set()

    def check(names: Any, where: str, what: str) -> None:
        for name in names if isinstance(names, list) else ():
            key = name if type(name) is str else repr(name)
            if key in seen:
                continue
            seen.add(key)
            problem = slug_problem(name) if type(name) is str else f"must be a string (got {name!r})"
            if problem is not None:
                f.fail(11, where, None, f"{what} name {problem}")

    f.check(11)
    check(man.get("models"), "manifest.json", "model")
    check(man.get("arms"), "manifest.json", "arm")
    for name, mf in ctx.layout.models.items():
        if isinstance(mf.obj, dict):
            check(mf.obj.get("draw"), f"models/{name}/manifest.json", "household")


def check_design(ctx: RunContext, man: dict[str, Any]) -> None:
    """Invariant 11: the manifests say what design.toml says: every field the
    design fixes (``manifests.run_fields`` / ``model_fields``, the mapping the
    runner wrote them with), the pins and the models' folders."""
    f, layout = ctx.findings, ctx.layout
    read = design_data(ctx)
    if read is None:
        return
    raw, data = read
    if ctx.logs.making and man.get("design_sha256") != hashlib.sha256(raw).hexdigest():
        f.explain(11, "design.toml", None, "not whole yet: the run was cut short while its directory was made")
        return
    f.expect(
        11,
        man.get("design_sha256") == hashlib.sha256(raw).hexdigest(),
        "manifest.json",
        None,
        "design_sha256 is not design.toml's",
    )
    harness = cast(dict[str, Any], data.get("harness")) if isinstance(data.get("harness"), dict) else {}
    f.expect(
        11,
        (man.get("harness") or {}).get("pins") == harness.get("pins"),
        "manifest.json",
        None,
        "harness pins differ from the design's",
    )
    models = cast(list[Any], data.get("models")) if isinstance(data.get("models"), list) else []
    names = [m.get("name") if isinstance(m, dict) else None for m in models]
    f.expect(
        11,
        man.get("models") == names and list(layout.models) == names,
        "manifest.json",
        None,
        f"models {man.get('models')} / folders {list(layout.models)} are not the design's {names}",
    )
    try:
        design = Design.model_validate(data)
    except ValidationError as exc:
        f.fail(11, "design.toml", None, "not a valid design: " + "; ".join(validation_problems(exc)))
        return
    f.check(11)
    expected = run_fields(design)
    # The class lists are the runner's, not the design's (a later version
    # may list more names): the rules check reads them from the manifest.
    del expected["rules"]["class_lists"]
    for problem in differences(expected, man, optional=RUN_OPTIONAL):
        f.fail(11, "manifest.json", None, problem)
    check_evidence_pins(f, design, man)
    for spec in design.models:
        mf = layout.models.get(spec.name)
        if mf is None or not isinstance(mf.obj, dict):
            continue  # reported with the folders above, or as an unreadable manifest
        f.check(11)
        for problem in differences(model_fields(design, spec), mf.obj, optional=MODEL_OPTIONAL):
            f.fail(11, f"models/{spec.name}/manifest.json", None, problem)


def check_evidence_pins(f: Findings, design: Design, man: dict[str, Any]) -> None:
    """Invariant 11 on the manifest's ``evidence``: the keys, URLs and counts
    are design.toml's ``[anchors]`` (``manifests.evidence_fields``), and each
    TSA certificate and CA copy the manifest's ``files`` fixes hashes as the
    design pins it. Invariant 12 then checks every signature, stamp and
    cosignature against these same keys and copies."""
    expected = evidence_fields(design.anchors, str(man.get("run_id")))
    actual = man.get("evidence")
    f.check(11)
    if expected is None or actual is None:
        f.expect(
            11,
            expected is None and actual is None,
            "manifest.json",
            None,
            "evidence is present, the design names no [anchors.signer]"
            if expected is None
            else "evidence is missing, the design names [anchors.signer]",
        )
        return
    for problem in differences(expected, actual, "evidence", optional=EVIDENCE_OPTIONAL):
        f.fail(11, "manifest.json", None, problem)
    files = man.get("files") if isinstance(man.get("files"), dict) else {}
    for i, tsa in enumerate(design.anchors.timestamps):
        for rel, pin, key in zip(tsa_files(i), (tsa.certificate_sha256, tsa.ca_sha256), ("certificate", "ca")):
            f.check(11)
            got = files.get(rel)  # type: ignore[union-attr]
            f.expect(
                11,
                got == pin,
                "manifest.json",
                None,
                f"files[{rel!r}] is {got!r}, the design pins anchors.timestamps[{i}].{key}_sha256 = {pin}",
            )
