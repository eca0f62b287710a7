"""The models' draws against each other and against the study's households: 3 and 11.

Owns `check_shared_draw` (invariant 3: every model has the one draw; a model
whose draw leaves out households the others had saw another study) and
`check_households` (invariant 11, with ``--households FILE``: the file hashes
as design.toml pins it, reads as the runner reads one, and every model's
draw is its households in their seeded order). That each draw is its own
seed's shuffle is `procedure`'s check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confirmatory.core.streams import draw_order
from confirmatory.design.load import read_households_file
from confirmatory.verify.context import RunContext
from confirmatory.verify.study import design_data


def check_shared_draw(ctx: RunContext) -> None:
    """Invariant 3: every model has the one draw (docs/DRAW.md, "The
    household draw": the households file, sorted and shuffled by the study's
    seed; every model shares it). Each draw is checked against its own seed
    elsewhere; a model whose draw leaves out households the others had (or
    adds some) saw another study, and fails here."""
    f, layout = ctx.findings, ctx.layout
    draws: list[tuple[str, Any]] = [
        (name, mf.obj.get("draw"))
        for name, mf in layout.models.items()
        if mf.problem is None and isinstance(mf.obj, dict) and isinstance(mf.obj.get("draw"), list)
    ]
    if not draws:
        return
    first, want = draws[0]
    for name, draw in draws[1:]:
        f.check(3)
        if draw != want:
            try:
                missing, extra = len(set(want) - set(draw)), len(set(draw) - set(want))
                how = (
                    f"{missing} of {first}'s households missing, {extra} not in it"
                    if missing or extra
                    else "the same households in another order"
                )
            except TypeError:  # unhashable entries (reported with the draw's own check)
                how = "not a list of household ids"
            f.fail(
                3,
                f"models/{name}/manifest.json",
                None,
                f"draw is not {first}'s ({how}): every model shares the one draw",
            )


def check_households(ctx: RunContext, path: Path) -> None:
    """Invariant 11, with the study's households file (``--households``): it
    hashes as design.toml pins it, reads as the runner reads one, and every
    model's draw is its households, sorted by id and shuffled by the model's
    seed (docs/DRAW.md, "The household draw"). Without the file a run's
    records cannot say which households the study had: a draw that left some
    out, in every model alike, is a seeded shuffle of its own households and
    passes the other checks."""
    f = ctx.findings
    before = f.count[11]
    try:
        read = design_data(ctx, report=False)  # (check_design reports it)
        table = read[1].get("households") if read is not None else None
        pin = table.get("sha256") if isinstance(table, dict) else None
        f.check(11)
        found, problems = read_households_file(path, pin if isinstance(pin, str) else None)
        if not isinstance(pin, str):
            problems.insert(0, "design.toml pins no households file (households.sha256)")
        for problem in problems:
            f.fail(11, str(path), None, problem)
        if not found:
            return
        ids = [h.id for h in found]
        f.households_count = len(ids)
        draw: Any  # a manifest's draw, any JSON value (set() of one not a list: TypeError, below)
        for name, mf in ctx.layout.models.items():
            if mf.problem is not None or not isinstance(mf.obj, dict):
                continue  # reported with the manifests
            seed, draw = mf.obj.get("seed"), mf.obj.get("draw")
            if type(seed) is not int:
                continue  # reported with the draw's own check (invariant 3)
            f.check(11)
            want = draw_order(seed, ids)
            if draw != want:
                try:
                    missing, extra = len(set(ids) - set(draw)), len(set(draw) - set(ids))
                    how = (
                        f"{missing} of its households missing, {extra} not in it"
                        if missing or extra
                        else "its households in another order"
                    )
                except TypeError:
                    how = "not a list of household ids"
                f.fail(
                    11,
                    f"models/{name}/manifest.json",
                    None,
                    f"draw is not the seeded shuffle of {path}'s {len(ids)} households ({how})",
                )
    finally:
        f.households_problems = f.count[11] - before
