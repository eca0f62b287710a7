"""``confirmatory check``: validate a design and print what a run would do.

Owns the plan a person reads before committing money: the models with their
caps and reserves, the households, the arms, how many attempts pass 0 makes,
and the ceiling; or else every problem with the design, one line each.
Nothing is started and litellm is not imported (it costs seconds).

Money is computed in integer nano-dollars (``confirmatory.core.money``), as the
runner counts it, so the plan's figures are the ones admission will use.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from confirmatory.core.exits import EXIT_OK, EXIT_REFUSED
from confirmatory.core.money import NUSD_PER_USD, format_usd, usd_to_nusd
from confirmatory.design.load import load_design
from confirmatory.design.model import Anchors, DesignError, LoadedDesign, ModelSpec


def check_command(
    design_path: Path | str,
    workers: int | None = None,
    *,
    run_dir: Path | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
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
    from confirmatory.engine.preflight import (
        entry_problems,
        evidence_problems,
        model_problems,
        registry_problems,
        run_dir_problems,
        signer_problems,
        witness_problems,
    )

    notes: list[str] = []
    problems = (
        entry_problems(loaded)
        + registry_problems(Path(design_path))
        + model_problems(loaded, keys=False, notes=notes)
        + evidence_problems(loaded, notes)
        + signer_problems(loaded)
    )
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
        out.write(
            f"note: not pinned, though the harness or engine imports them from beside the design: "
            f"{', '.join(unpinned)} (pin them in [harness] pins; config.json will list them as not pinned down)\n"
        )
    for note in notes:
        out.write(f"note: {note}\n")
    if run_dir is None and loaded.design.anchors.command:
        out.write(
            "witness: not checked (check --out RUN_DIR checks the run directory and the witness "
            "clone as run --out RUN_DIR will)\n"
        )
    return EXIT_OK


def households_covered(cap_nusd: int, reserve_nusd: int, households: int) -> int:
    """How many households admission lets a model run if each costs exactly its reserve.

    Admission holds ``finished + reserve x (under_way + 1) <= cap``; with every
    household costing ``reserve``, the k-th is admitted iff ``k x reserve <= cap``.
    """
    if reserve_nusd == 0:
        return households
    return min(households, cap_nusd // reserve_nusd)


def price_line(m: ModelSpec) -> str:
    """The price table ``m``'s calls are counted at, USD per million tokens by kind."""
    from confirmatory.engine.llm import cost  # noqa: PLC0415 - litellm, lazily

    if m.price_usd_per_mtok is not None:
        table, source = m.price_usd_per_mtok.table(), "the design's table"
    elif m.simulated:
        from confirmatory.core.billing import sim_table  # noqa: PLC0415
        from confirmatory.core.simulated import SIM_PRICES  # noqa: PLC0415

        table, source = sim_table(SIM_PRICES[m.served_name], m.served_name), "the simulator's table"
    else:
        got = cost.litellm_table(m.litellm_model)
        if got is None:
            return "price: none (litellm cannot price it)"
        table, source = got, "litellm's map now" + (' (price = "litellm")' if m.price == "litellm" else "")
    kinds = cost.billed_kinds(m.litellm_model)
    parts = [f"{k} {'-' if table.price(k) is None else format(table.price(k), 'g')}" for k in kinds]
    return f"price (USD per million tokens, {source}): " + ", ".join(parts)


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
    calls = {m.name: costliest_call(m) for m in d.models}
    bound = run_bound(ceiling, [(m.lanes, calls[m.name].nusd) for m in d.models])
    for m in d.models:
        cap, reserve = usd_to_nusd(m.cap_usd), usd_to_nusd(m.reserve_usd)
        caps += cap
        covered = households_covered(cap, reserve, n_households)
        where = "simulated provider" if m.simulated else (m.api_base or "provider default endpoint")
        lines.append(
            f"  {m.name}: {m.litellm_model} via {where}; cap {format_usd(cap)}, reserve {format_usd(reserve)}, "
            f"lanes {m.lanes}" + (f"; matched with {m.matched_with}" if m.matched_with else "")
        )
        lines.append(f"    {price_line(m)}")
        lines += [
            f"    {text}"
            for text in model_worst_case(m.name, cap, reserve, m.lanes, covered, n_households, calls[m.name], bound)
        ]
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
        evidence_line(d.anchors),
    ]
    lines += run_worst_case(ceiling, before, [(m.name, m.lanes, calls[m.name]) for m in d.models], bound)
    if caps + before > ceiling:
        lines.append(
            "note: the model caps and the earlier spend add up to more than the ceiling;"
            " crossing the ceiling would end the run before every model reaches its cap"
        )
    room = ceiling - before  # > 0: the loader refuses a design with no room at all
    for m in d.models:
        if usd_to_nusd(m.reserve_usd) > room:
            lines.append(
                f"note: {m.name}'s reserve {format_usd(usd_to_nusd(m.reserve_usd))} is more than the room"
                f" left under the ceiling ({format_usd(room)}); its first household may cross the ceiling,"
                " which ends the run"
            )
    deadline = d.rules.attempt_deadline_s
    for m in d.models:
        if m.timeout_s >= deadline:
            lines.append(
                f"note: {m.name}'s call timeout {m.timeout_s:g} s is not below the attempt deadline"
                f" {deadline:g} s; one slow call can reach the deadline, which stops the model"
            )
    return "\n".join(lines) + "\n"


def evidence_line(a: Anchors) -> str:
    """The plan's line on what will prove each anchor besides its git push (docs/EVIDENCE.md)."""
    if a.signer is None:
        return "evidence: the git witness only (no [anchors.signer]: nothing signed, stamped or cosigned)"
    name = a.signer.verifier_key.split("+", 1)[0]
    origin = repr(a.origin) if a.origin else "made from the run id"
    parts = [f"evidence: checkpoints signed by {name} (origin {origin})"]
    if a.timestamps:
        parts.append(f"{len(a.timestamps)} TSA(s), {a.required_timestamps} must stamp the final anchor")
    if a.witnesses:
        parts.append(f"{len(a.witnesses)} witness(es), {a.required_cosignatures} must cosign the final checkpoint")
    return "; ".join(parts)


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
    return (
        f"{e.target} in {e.workers_per_model} Ray actor(s) per model, {cpus:g} CPU each, "
        f"on the cluster at {e.address!r} (check does not contact it)"
    )


# -- the worst case ----------------------------------------------------------------
# What admission and the ceiling let a run spend at most (docs/DESIGN-FILE.md
# "The plan"). A run stops at the first call whose cost takes its spend past
# the ceiling; the calls in flight then (one per lane: a harness calls
# spend.checkpoint() before each call, docs/HARNESS.md) still end, and are
# counted. So the run's spend is at most the ceiling plus, for every lane,
# the costliest single call its model can make.


@dataclass(frozen=True)
class CallBound:
    """The costliest single call to a model (None: the design does not bound
    it), and what that figure assumes, in words."""

    nusd: int | None
    why: str


def _ceil_nusd(usd: float) -> int:
    """Up to the whole micro-dollar the plan prints (format_usd): a bound never printed below itself."""
    return math.ceil(usd * NUSD_PER_USD / 1000) * 1000


def _output_tokens(m: ModelSpec, provider_max: int | None) -> tuple[int | None, str]:
    asked = m.params.get("max_tokens") or m.params.get("max_completion_tokens")
    if isinstance(asked, int):
        # the bundled harness repeats a truncated turn once with twice the limit
        tokens = 2 * asked if provider_max is None else min(2 * asked, provider_max)
        return tokens, (
            f"{tokens:,} output tokens (twice its max_tokens {asked:,}: a truncated turn may be "
            "asked again with twice the limit, as the bundled harness does"
            + (
                f"; the model gives at most {provider_max:,}"
                if provider_max is not None and provider_max < 2 * asked
                else ""
            )
            + ")"
        )
    if provider_max is not None:
        return (
            provider_max,
            f"{provider_max:,} output tokens (the model's own output limit; the design sets no max_tokens)",
        )
    return None, "no output limit known (set max_tokens in its params)"


def costliest_call(m: ModelSpec) -> CallBound:
    """The most one call to ``m`` can cost: its longest prompt (the provider's
    context window) and its longest reply (its max_tokens, doubled for the
    harness's repeat of a truncated turn; else the provider's output limit),
    at the design's price, else the simulator's, else litellm's. litellm is
    imported only for a model that is not simulated (its limits are in
    litellm's model table)."""
    from confirmatory.core.simulated import SIM_MAX_INPUT_TOKENS, SIM_MAX_OUTPUT_TOKENS, SIM_PRICES

    max_in: int | None
    max_out: int | None
    if m.simulated:
        max_in, max_out = SIM_MAX_INPUT_TOKENS, SIM_MAX_OUTPUT_TOKENS
    else:
        from confirmatory.engine import llm

        max_in, max_out = llm.call_limits(m.litellm_model)
    out_tokens, out_why = _output_tokens(m, max_out)
    if max_in is None or out_tokens is None:
        missing = "its context window" if max_in is None else out_why
        return CallBound(
            None,
            f"not bounded by the design: litellm knows no {missing} for {m.litellm_model}"
            if max_in is None
            else f"not bounded by the design: {missing}",
        )
    in_why = f"a prompt of {max_in:,} tokens (the model's context window)"
    if m.price_usd_per_mtok is not None:
        p = m.price_usd_per_mtok
        t = p.table()
        in_price = max(x for x in (t.input, t.cached_input, t.cache_write) if x is not None)
        out_price = max(t.output, t.price("reasoning") or 0.0)
        usd = (in_price * max_in + out_price * out_tokens) / 1e6
        price = f"the design's price, ${in_price:g} / ${out_price:g} per million input / output tokens"
    elif m.simulated and m.served_name in SIM_PRICES:
        from confirmatory.core.billing import sim_table  # noqa: PLC0415

        # the dearest kind of each side: an Anthropic prompt written to its
        # cache costs more than one read as plain input
        t = sim_table(SIM_PRICES[m.served_name], m.served_name)
        in_price = max(x for x in (t.input, t.cached_input, t.cache_write) if x is not None)
        out_price = max(t.output, t.price("reasoning") or 0.0)
        usd = (in_price * max_in + out_price * out_tokens) / 1e6
        price = f"the simulator's price, ${in_price:g} / ${out_price:g} per million input / output tokens"
    else:
        from confirmatory.engine import llm

        got = llm.call_cost_usd(m.litellm_model, max_in, out_tokens)
        if got is None:
            return CallBound(None, f"not bounded: litellm cannot price {m.litellm_model}")
        usd, price = got, "litellm's price for it"
    return CallBound(_ceil_nusd(usd), f"{in_why} and {out_why}, at {price}")


def run_bound(ceiling_nusd: int, lanes_calls: list[tuple[int, int | None]]) -> int | None:
    """The most the run can spend (its total, spend before the stage
    included): the ceiling, plus one costliest call per lane (None when some
    model's costliest call is not bounded)."""
    if any(c is None for _, c in lanes_calls):
        return None
    return ceiling_nusd + sum(lanes * c for lanes, c in lanes_calls if c is not None)


def model_worst_case(
    name: str, cap: int, reserve: int, lanes: int, covered: int, n_households: int, call: CallBound, bound: int | None
) -> list[str]:
    """The plan's lines on what admission lets one model spend."""
    run = (
        f"the run's worst case, {format_usd(bound)},"
        if bound is not None
        else "the ceiling, and the calls in flight when it is crossed"
    )
    return [
        f"admission starts a household only while the model's spend so far plus {format_usd(reserve)} for each "
        f"household under way (the new one included) fits in its cap {format_usd(cap)}: at {format_usd(reserve)} "
        f"a household, the cap covers {covered} of {n_households} households",
        f"most it can spend: {format_usd(cap)}, if no household costs more than its reserve "
        f"{format_usd(reserve)}; a household that costs more goes past the cap by the difference, and up to "
        f"{lanes} (one per lane) can be under way when admission stops. The design does not limit a "
        f"household's calls (its harness does), so beyond that only {run} bounds it",
        f"costliest single call: {format_usd(call.nusd) if call.nusd is not None else 'unknown'}: {call.why}",
    ]


def run_worst_case(ceiling: int, before: int, models: list[tuple[str, int, CallBound]], bound: int | None) -> list[str]:
    """The plan's lines on the most the whole run can spend."""
    terms = " + ".join(f"{lanes} x {format_usd(c.nusd)} ({name})" for name, lanes, c in models if c.nusd is not None)
    lanes = sum(n for _, n, _ in models)
    head = (
        "worst case for the run: the run stops at the first call that takes its spend past the ceiling "
        f"{format_usd(ceiling)}; the calls then in flight, at most one on each of its {lanes} lanes, still "
        "end and are paid for"
    )
    if bound is None:
        unbounded = ", ".join(name for name, _, c in models if c.nusd is None)
        return [
            head + f"; how much they cost is not bounded ({unbounded}: see its costliest single call), so "
            "the run's spend is not bounded by the design beyond the ceiling"
        ]
    return [
        head + f", so the run spends at most {format_usd(ceiling)} + {terms} = {format_usd(bound)} in all "
        f"(spend before this stage, {format_usd(before)}, included). This assumes its harness asks "
        "spend.checkpoint() before each call and makes one call at a time, as the bundled one does"
    ]
