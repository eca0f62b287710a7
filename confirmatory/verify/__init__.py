"""`confirmatory verify`: re-check a run directory against every invariant of RECORDS.md.

Owns the order of the verification and the run-level checks: conservation of
spend (7) and the manifests against the design (11). Invariant by invariant
the work lives in `logs` (8), `model` (1, 2, 3, 5, 6, 7 per household),
`timeline` (4, 9, 10, the decision halves of 3 and 6); `report` renders.

Independent of the runner by construction: it imports only pure modules
(`rules`, `hostrules`, `streams`, `chain`'s readers) and `records`; never
the Run, its lanes or writers, litellm or psutil. It reads each log as a
stream; what it keeps grows with households, not with lines.
"""

from __future__ import annotations

import hashlib
import sys
import tomllib
from pathlib import Path

from confirmatory.records import HostIndex, load_layout, model_log
from confirmatory.verify.context import RulesView, RunContext
from confirmatory.verify.logs import LogPass
from confirmatory.verify.model import ModelCheck, ModelState
from confirmatory.verify.report import INVARIANTS, Findings, Report, Status, Violation
from confirmatory.verify.timeline import check_admission, check_resumes, check_stops

__all__ = ["verify_run", "verify_command", "Report", "Status", "Violation", "INVARIANTS"]


def verify_run(run_dir: Path | str, witness: Path | str | None = None) -> Report:
    root = Path(run_dir)
    f = Findings()
    layout = load_layout(root)
    man = layout.manifest.obj if isinstance(layout.manifest.obj, dict) else {}
    f.expect(11, layout.manifest.problem is None, "manifest.json", None, f"run manifest: {layout.manifest.problem}")
    logs = LogPass(layout, f)
    run_events = [(ln.seq, ln.obj) for ln in logs.lines("run.jsonl")]
    host = HostIndex(ln.obj for ln in logs.lines("host.jsonl"))
    requests = {(ln.obj.get("model"), ln.obj.get("t")) for ln in logs.lines("resume.jsonl")
                if ln.obj.get("event") == "resume-request"}
    ctx = RunContext(layout, f, logs, RulesView.from_manifest(man, f), host, list(man.get("arms") or []),
                     run_events, requests)
    ctx.run_stop_ts = [o["t"] for _, o in run_events if o.get("event") == "stop" and isinstance(o.get("t"), (int, float))]
    ceilings = [o for _, o in run_events if o.get("event") == "ceiling"]
    ctx.ceiling_t = min((o["t"] for o in ceilings if isinstance(o.get("t"), (int, float))), default=float("inf"))
    f.check(2)
    f.expect(2, host.monotone, "host.jsonl", None, "host times go backwards")
    states = []
    for name in layout.models:
        if not f.expect(11, layout.models[name].problem is None, f"models/{name}/manifest.json", None,
                        f"model manifest: {layout.models[name].problem}"):
            continue
        st = ModelCheck(name, ctx).run()
        check_admission(ctx, st)
        check_stops(ctx, st)
        check_resumes(ctx, st)
        states.append(st)
    check_totals(ctx, states, ceilings)
    check_design(ctx, man)
    logs.finish(Path(witness) if witness is not None else None)
    return f.report(str(root))


def check_totals(ctx: RunContext, states: list[ModelState], ceilings: list[dict]) -> None:
    """Invariant 7: every nano-dollar counted once, in its model and in the run."""
    f, man = ctx.findings, ctx.layout.manifest.obj or {}
    total = int(man.get("spend_before_nusd") or 0)
    for st in states:
        log = model_log(st.name, "run.jsonl")
        late = sum(int(o.get("cost_nusd") or 0) for _, o in st.events("late-cost"))
        closes = st.events("close")
        share = st.attempt_cost + late
        total += share
        if f.expect(7, len(closes) == 1, log, None, f"{len(closes)} close lines"):
            seq, close = closes[0]
            f.expect(7, close.get("spend_nusd") == share, log, seq,
                     f"close spend {close.get('spend_nusd')} is not attempts + late costs {share}")
        key = lambda o: (o.get("t"), o.get("total_nusd"), o.get("ceiling_nusd"))  # noqa: E731
        mine = sorted(key(o) for _, o in st.events("ceiling"))
        f.expect(7, mine == sorted(key(o) for o in ceilings), log, None, "ceiling events differ from run.jsonl's")
    closes = [(s, o) for s, o in ctx.run_events if o.get("event") == "close"]
    if f.expect(7, len(closes) == 1, "run.jsonl", None, f"{len(closes)} close lines"):
        seq, close = closes[0]
        f.expect(7, close.get("spend_total_nusd") == total, "run.jsonl", seq,
                 f"spend_total {close.get('spend_total_nusd')} is not the sum {total}")
        crossed = isinstance(close.get("spend_total_nusd"), int) and close["spend_total_nusd"] > (man.get("ceiling_nusd") or 0)
        f.expect(7, not crossed or bool(ceilings), "run.jsonl", seq, "the total exceeds the ceiling without a ceiling event")
    for c in ceilings:
        f.expect(7, c.get("ceiling_nusd") == man.get("ceiling_nusd") and (c.get("total_nusd") or 0) > (c.get("ceiling_nusd") or 0),
                 "run.jsonl", None, f"ceiling event total {c.get('total_nusd')} does not exceed {c.get('ceiling_nusd')}")


def check_design(ctx: RunContext, man: dict) -> None:
    """Invariant 11: the manifests say what design.toml says."""
    f, layout = ctx.findings, ctx.layout
    try:
        raw = (layout.root / "design.toml").read_bytes()
        design = tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:
        f.fail(11, "design.toml", None, f"unreadable: {exc}")
        return
    f.expect(11, man.get("design_sha256") == hashlib.sha256(raw).hexdigest(), "manifest.json", None,
             "design_sha256 is not design.toml's")
    harness, engine = design.get("harness", {}), design.get("engine", {})
    f.expect(11, (man.get("harness") or {}).get("pins") == harness.get("pins"), "manifest.json", None,
             "harness pins differ from the design's")
    f.expect(11, (man.get("engine") or {}).get("workers_per_model") == engine.get("workers_per_model"),
             "manifest.json", None, "workers_per_model differs from the design's")
    names = [m.get("name") for m in design.get("models", [])]
    f.expect(11, man.get("models") == names and list(layout.models) == names, "manifest.json", None,
             f"models {man.get('models')} / folders {list(layout.models)} are not the design's {names}")
    seed = design.get("study", {}).get("seed")
    for spec in design.get("models", []):
        mf = layout.models.get(spec.get("name"))
        obj = mf.obj if mf is not None and isinstance(mf.obj, dict) else {}
        where = f"models/{spec.get('name')}/manifest.json"
        f.expect(11, obj.get("seed") == seed and obj.get("lanes") == spec.get("lanes", obj.get("lanes"))
                 and obj.get("litellm_model") == spec.get("litellm_model"), where, None,
                 "seed, lanes or litellm_model differ from the design's")


def verify_command(run_dir: Path, as_json: bool = False, witness: Path | None = None) -> int:
    report = verify_run(run_dir, witness=witness)
    sys.stdout.write((report.to_json() if as_json else report.to_table()) + "\n")
    return 0 if report.ok else 1
