"""``confirmatory check``: validate a design and print what a run would do.

Owns the plan a person reads before committing money: the models with their
caps and reserves, the households, the arms, how many attempts pass 0 makes,
and the ceiling; or else every problem with the design, one line each.
Nothing is started and litellm is not imported (it costs seconds).

Money is computed in integer nano-dollars (``confirmatory.core.money``), as the
runner counts it, so the plan's figures are the ones admission will use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from confirmatory.design.model import DesignError, LoadedDesign
from confirmatory.design.load import load_design
from confirmatory.core.money import format_usd, usd_to_nusd

EXIT_OK = 0
EXIT_REFUSED = 3  # the cli's "refused to start"


def check_command(design_path: Path | str, workers: int | None = None, *, run_dir: Path | None = None,
                  out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Print the plan and return 0, or print every problem and return 3.

    With ``run_dir`` (``check --out``) also what `run --out RUN_DIR` would
    refuse about the place: the run directory, and the witness clone and run
    id the anchor command would use (which may depend on ``{run_dir}``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        loaded = load_design(design_path, workers=workers)
    except DesignError as exc:
        for problem in exc.problems:
            print(f"{design_path}: {problem}", file=err)
        print(f"{design_path}: refused ({len(exc.problems)} problem{'s' * (len(exc.problems) != 1)})", file=err)
        return EXIT_REFUSED
    from confirmatory.cli.run import (
        entry_problems,
        evidence_problems,
        model_problems,
        registry_problems,
        run_dir_problems,
        witness_problems,
    )

    notes: list[str] = []
    problems = (entry_problems(loaded) + registry_problems(Path(design_path))
                + model_problems(loaded, keys=False, notes=notes) + evidence_problems(loaded, notes))
    if run_dir is not None:
        problems += run_dir_problems(Path(run_dir)) + witness_problems(loaded, Path(run_dir))
    if problems:
        for problem in problems:
            print(f"{design_path}: {problem}", file=err)
        print(f"{design_path}: refused ({len(problems)} problem{'s' * (len(problems) != 1)})", file=err)
        return EXIT_REFUSED
    out.write(render_plan(loaded))
    from confirmatory.engine.config import unpinned_local_modules

    unpinned = unpinned_local_modules(loaded)
    if unpinned:
        out.write(f"note: not pinned, though the harness or engine imports them from beside the design: "
                  f"{', '.join(unpinned)} (pin them in [harness] pins; config.json will list them as not pinned down)\n")
    for note in notes:
        out.write(f"note: {note}\n")
    if run_dir is None and loaded.design.anchors.command:
        out.write("witness: not checked (check --out RUN_DIR checks the run directory and the witness "
                  "clone as run --out RUN_DIR will)\n")
    return EXIT_OK


def households_covered(cap_nusd: int, reserve_nusd: int, households: int) -> int:
    """How many households admission lets a model run if each costs exactly its reserve.

    Admission holds ``finished + reserve x (under_way + 1) <= cap``; with every
    household costing ``reserve``, the k-th is admitted iff ``k x reserve <= cap``.
    """
    if reserve_nusd == 0:
        return households
    return min(households, cap_nusd // reserve_nusd)


def render_plan(loaded: LoadedDesign) -> str:
    d = loaded.design
    n_households, n_arms, n_models = len(loaded.households), len(d.arms), len(d.models)
    ceiling = usd_to_nusd(d.ceiling.overall_cap_usd) + usd_to_nusd(d.ceiling.margin_usd)
    before = usd_to_nusd(d.study.spend_before_stage_usd)
    lines = [
        f"design: {loaded.path}",
        f"study: {d.study.id} (seed {d.study.seed})",
        f"design sha256: {loaded.sha256}",
        f"harness: {d.harness.entry} ({len(loaded.pins)} pinned file(s) verified)",
        f"engine: {engine_line(d.engine)}",
        f"households: {n_households} ({d.households.path}, sha256 {d.households.sha256[:12]}...)",
        f"arms: {n_arms}: {', '.join(a.name for a in d.arms)}",
        f"models: {n_models}",
    ]
    caps = 0
    for m in d.models:
        cap, reserve = usd_to_nusd(m.cap_usd), usd_to_nusd(m.reserve_usd)
        caps += cap
        # Under its cap a model spends at most the cap - provided no household
        # costs more than its reserve; beyond that only the ceiling binds.
        most = min(cap, max(0, ceiling - before))
        covered = households_covered(cap, reserve, n_households)
        where = "simulated provider" if m.simulated else (m.api_base or "provider default endpoint")
        lines.append(
            f"  {m.name}: {m.litellm_model} via {where}; cap {format_usd(cap)}, reserve {format_usd(reserve)}, "
            f"lanes {m.lanes}; most it can spend under its cap: {format_usd(most)} "
            f"(if no household costs more than its reserve); covers {covered} of {n_households} households at reserve"
            + (f"; matched with {m.matched_with}" if m.matched_with else "")
            + (f"; priced by the design at ${m.price_usd_per_mtok.input:g} / ${m.price_usd_per_mtok.output:g}"
               " per million input / output tokens" if m.price_usd_per_mtok is not None else "")
        )
    per_pass = n_models * n_households * n_arms
    most_attempts = per_pass * (1 + d.rules.max_reruns_per_arm)
    lines += [
        f"attempts in pass 0: {n_models} models x {n_households} households x {n_arms} arms = {per_pass}"
        f" (at most {most_attempts} with {d.rules.max_reruns_per_arm} rerun(s) per arm)",
        rerun_waits(d.rules.rerun_wait_s, d.rules.max_reruns_per_arm),
        f"ceiling: overall cap {format_usd(usd_to_nusd(d.ceiling.overall_cap_usd))} + margin "
        f"{format_usd(usd_to_nusd(d.ceiling.margin_usd))} = {format_usd(ceiling)}"
        f" (spent before this stage: {format_usd(before)})",
        f"sum of model caps: {format_usd(caps)}",
    ]
    if caps + before > ceiling:
        lines.append("note: the model caps and the earlier spend add up to more than the ceiling;"
                     " crossing the ceiling would end the run before every model reaches its cap")
    room = ceiling - before  # > 0: the loader refuses a design with no room at all
    for m in d.models:
        if usd_to_nusd(m.reserve_usd) > room:
            lines.append(f"note: {m.name}'s reserve {format_usd(usd_to_nusd(m.reserve_usd))} is more than the room"
                         f" left under the ceiling ({format_usd(room)}); its first household may cross the ceiling,"
                         " which ends the run")
    deadline = d.rules.attempt_deadline_s
    for m in d.models:
        if m.timeout_s >= deadline:
            lines.append(f"note: {m.name}'s call timeout {m.timeout_s:g} s is not below the attempt deadline"
                         f" {deadline:g} s; one slow call can reach the deadline, which stops the model")
    return "\n".join(lines) + "\n"


def rerun_waits(base_s: float, max_reruns: int) -> str:
    """The plan's line on the wait before each rerun pass (rules.rerun_wait_s)."""
    from confirmatory.core.rules import rerun_wait_s

    if max_reruns <= 0:
        return "reruns: none (max_reruns_per_arm = 0)"
    if base_s <= 0:
        return "reruns: a rerun pass starts as soon as the pass before it is classified (rerun_wait_s = 0)"
    waits = ", ".join(f"{rerun_wait_s(base_s, p):g} s before pass {p}" for p in range(1, max_reruns + 1))
    return f"reruns: a lane waits {waits} (rerun_wait_s = {base_s:g}, doubled each pass)"


def engine_line(e: Any) -> str:
    """The plan's engine line: what starts the pools, where, and how many workers."""
    if e.factory is not None:
        return f"{e.factory}, {e.workers_per_model} worker(s) per model"
    if e.backend == "processes":
        return f"{e.target} in {e.workers_per_model} process(es) per model"
    cpus = 1.0 if e.num_cpus is None else e.num_cpus
    return (f"{e.target} in {e.workers_per_model} Ray actor(s) per model, {cpus:g} CPU each, "
            f"on the cluster at {e.address!r} (check does not contact it)")
