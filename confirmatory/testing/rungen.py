"""Synthetic run directories that follow every rule: for verify's tests and benchmark.

`generate_run` simulates a run of several models in simulated time and writes
exactly the RECORDS.md layout. It decides with the same pure functions the
lanes use (`rules.admit`, `rules.decide`, `rules.next_pass_arms`, the host
verdict) and plants failures from a `Plan`: provider/model/host failures at
seeded rates, plus named events (an operator pause with one stale and one
accepted resume, a harness failure that stops a model, a deadline with a late
cost, an inconclusive signature, the ceiling).

Theory of operation: every lane is a sequence of steps (decide, start an
attempt, end a household); a heap always advances the lane whose next step is
earliest, so when a lane acts at time T every event before T (a pause, a
stop, a household's end, the ceiling) is already known. Lines are written in
that processing order, so anchors taken along the way fix consistent
prefixes. Logs are written through a plain buffered file that computes each
line's hash itself (`durable=False`, fast, for large runs) or through the real
`ChainWriter` (`durable=True`).
"""

from __future__ import annotations

import hashlib
import heapq
import random
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from confirmatory.core import rules
from confirmatory.core.streams import arm_orders, draw_order
from confirmatory.design.model import Design
from confirmatory.records import manifests
from confirmatory.records.chain import RECORD_FORMAT, log_seed
from confirmatory.records.hostindex import HostSummary
from confirmatory.records.layout import record_relpath
from confirmatory.testing.rungen_files import DESIGN_TOML, _House, _Log, _Model, _write_json

T0 = 1_800_000_000.0
EPS = 0.001


@dataclass(frozen=True)
class Plan:
    models: tuple[str, ...] = ("alpha", "beta", "gamma")
    households: int = 24
    arms: tuple[str, ...] = ("alone", "calculator", "explain")
    lanes: int = 2
    seed: int = 20261129
    p_provider: float = 0.12
    p_model: float = 0.05
    cap_usd: float = 1.0
    reserve_usd: float = 0.02
    ceiling_usd: float = 1000.0
    cost_range_nusd: tuple[int, int] = (1_000_000, 9_000_000)
    pressure_samples: tuple[int, ...] = (7,)  # indices of host samples above the threshold
    operator: tuple[str, int] | None = ("beta", 3)  # (model, k-th household of the draw)
    harness: tuple[str, int] | None = ("gamma", 15)
    deadline: tuple[str, int] | None = None
    inconclusive: tuple[str, int] | None = None  # (model, first household): every later one too
    anchor_every_s: float = 1500.0
    sample_interval_s: float = 30.0
    rerun_wait_s: float = 0.0  # the design's wait before a rerun pass, doubled each pass (rules.rerun_wait_s)
    durable: bool = False
    roots: bool = True  # anchors carry each log's RFC 9162 root (False: as runs before roots)
    evidence: Any = None  # a testing.synthetic_evidence.SyntheticEvidence: signed checkpoints, stamps, cosignatures


class _Gen:
    def __init__(self, root: Path, plan: Plan) -> None:
        self.root, self.plan = root, plan
        self.rng = random.Random(plan.seed)
        self.clock = T0
        self.households = [f"h{i:05d}" for i in range(plan.households)]
        self.crossed_t: float | None = None

    # -- clock and files ----------------------------------------------------------
    def now(self, at: float) -> float:
        self.clock = max(at, self.clock + EPS)
        return round(self.clock, 6)

    def setup(self) -> None:
        p, root = self.plan, self.root
        root.mkdir(parents=True, exist_ok=False)
        pin = "0" * 64
        design = DESIGN_TOML.format(
            seed=p.seed,
            ceiling=p.ceiling_usd,
            pin=pin,
            interval=float(p.sample_interval_s),
            anchor_s=float(p.anchor_every_s),
            rerun_wait=float(p.rerun_wait_s),
        )
        design += "".join(f'\n[[arms]]\nname = "{a}"\n' for a in p.arms)
        for m in p.models:
            design += (
                f'\n[[models]]\nname = "{m}"\nlitellm_model = "openai/{m}"\n'
                f"cap_usd = {p.cap_usd}\nreserve_usd = {p.reserve_usd}\nlanes = {p.lanes}\n"
            )
        (root / "design.toml").write_text(design)
        # the manifests as the runner writes them from this design (runfiles)
        d = Design.model_validate(tomllib.loads(design))
        self.manifest = {
            "format": RECORD_FORMAT,
            "run_id": "synthetic",
            "created_t": T0,
            "design_sha256": hashlib.sha256(design.encode()).hexdigest(),
            **manifests.run_fields(d),
        }
        self.manifest["harness"]["pins"] = {"harness.py": pin}
        self.manifest["anchors"].update(command=None, cwd=str(root))
        if p.evidence is not None:
            self.manifest["evidence"], files = p.evidence.manifest(root)
            self.manifest["files"] = {**(self.manifest.get("files") or {}), **files}
        self.rules = self.manifest["rules"]
        self.ceiling_nusd = self.manifest["ceiling_nusd"]
        self.spend_before = self.total = self.manifest["spend_before_nusd"]
        sha = _write_json(root / "manifest.json", self.manifest)
        self.logs: dict[str, _Log] = {}
        for rel in ("run.jsonl", "host.jsonl", "resume.jsonl", "anchors.jsonl", "anchor-pushes.jsonl"):
            self.logs[rel] = _Log(root / rel, log_seed(sha, rel), p.durable)
        draw = draw_order(p.seed, self.households)
        self.models = {}
        for m, spec in zip(p.models, d.models):
            mman = {**manifests.model_fields(d, spec), "draw": draw, "arm_orders": arm_orders(p.seed, m, draw, p.arms)}
            msha = _write_json(root / f"models/{m}/manifest.json", mman)
            for name in ("run.jsonl", "admission.jsonl"):
                rel = f"models/{m}/{name}"
                self.logs[rel] = _Log(root / rel, log_seed(msha, rel), p.durable)
            self.models[m] = _Model(m, mman, draw_index={h: k for k, h in enumerate(draw)})
        for log in self.logs.values():
            log.append({"event": "open", "t": T0})
        # host samples are made on demand: the verdicts see them a little
        # ahead of the lanes (up to the sample that completes an attempt's
        # evidence), host.jsonl gets them as time passes
        self.host_index = HostSummary(
            max_gap_s=self.rules["host"]["max_gap_s"], pressure_threshold=self.rules["host"]["pressure_threshold"]
        )
        self.host_index.add({"event": "open", "t": T0})
        self.host_seen = 0
        self.host_written = 0
        self.next_anchor = T0 + 1
        self.anchor_seq = 0

    def _sample(self, k: int) -> dict[str, Any]:
        p = self.plan
        t = T0 + 5 + k * p.sample_interval_s
        return {
            "event": "sample",
            "t": t,
            "wall": t,
            "mono": 1000.0 + t - T0,
            "mem_pressure": 55.0 if k in p.pressure_samples else 0.5,
            "mem_available": 8 << 30,
            "swap_used": 0,
            "load1": 0.7,
            "clock_back_max_s": 0.0,
        }

    def _host_until(self, t: float) -> None:
        """Let the verdicts see every sample up to t."""
        while T0 + 5 + self.host_seen * self.plan.sample_interval_s <= t:
            self.host_index.add(self._sample(self.host_seen))
            self.host_seen += 1

    def catch_up(self, t: float) -> None:
        """Write host lines up to t and anchor when an interval has passed."""
        host = self.logs["host.jsonl"]
        while T0 + 5 + self.host_written * self.plan.sample_interval_s <= t:
            host.append(self._sample(self.host_written))
            self.host_written += 1
        for m in self.models.values():
            while m.resumes and m.resumes[0]["t"] <= t:
                line = m.resumes.pop(0)
                self.logs[f"models/{m.name}/run.jsonl"].append({**line, "t": self.now(line["t"])})
        if t >= self.next_anchor:
            self.anchor(t, final=False)
            self.next_anchor = t + self.plan.anchor_every_s

    def anchor(self, t: float, final: bool) -> None:
        logs = {
            rel: {"lines": log.lines, "head": log.head, **({"root": log.root()} if self.plan.roots else {})}
            for rel, log in self.logs.items()
            if rel not in ("anchors.jsonl", "anchor-pushes.jsonl")
        }
        man = {"manifest.json": hashlib.sha256((self.root / "manifest.json").read_bytes()).hexdigest()}
        for m in self.models:
            rel = f"models/{m}/manifest.json"
            man[rel] = hashlib.sha256((self.root / rel).read_bytes()).hexdigest()
        anchors = self.logs["anchors.jsonl"]
        anchors.append({"event": "anchor", "t": self.now(t), "final": final, "logs": logs, "manifests": man})
        if self.plan.evidence is not None:
            at = self.clock
            for line in self.plan.evidence.lines(
                self.root, anchors.lines - 1, at, anchors.lines, bytes.fromhex(anchors.root())
            ):
                self.logs["anchor-pushes.jsonl"].append({**line, "t": self.now(line["t"])})
        self.logs["anchor-pushes.jsonl"].append(
            {
                "event": "push",
                "t": self.now(t),
                "rc": 0,
                "anchor_seq": self.logs["anchors.jsonl"].lines - 1,
                "output": "pushed",
            }
        )

    # -- the simulation -------------------------------------------------------------
    def run(self) -> None:
        heap: list[tuple[float, int, str, int]] = []
        n = 0
        for m in self.models.values():
            for lane in range(self.plan.lanes):
                heapq.heappush(heap, (T0 + 2 + 0.01 * n, n, m.name, lane))
                n += 1
                m.queue[lane] = [h for k, h in enumerate(m.manifest["draw"]) if k % self.plan.lanes == lane]
        while heap:
            t, n, name, lane = heapq.heappop(heap)
            self.catch_up(t)
            nxt = self.step(self.models[name], lane, t)
            if nxt is not None:
                heapq.heappush(heap, (nxt, n, name, lane))
        end = self.clock + 1
        for m in self.models.values():
            self.logs[f"models/{m.name}/run.jsonl"].append(
                {"event": "close", "t": self.now(end), "spend_nusd": m.spend}
            )
        status = (
            "ceiling" if self.crossed_t else ("stopped" if any(x.stop_t for x in self.models.values()) else "completed")
        )
        self.logs["run.jsonl"].append(
            {"event": "close", "t": self.now(end), "status": status, "spend_total_nusd": self.total}
        )
        self.catch_up(self.clock + 40)
        self.anchor(self.clock + 41, final=True)
        for log in self.logs.values():
            log.close()

    def halted(self, m: _Model, t: float) -> str | None:
        if self.crossed_t is not None and self.crossed_t <= t:
            return "ceiling"
        if m.stop_t is not None and m.stop_t <= t:
            return "stopped"
        return None

    def step(self, m: _Model, lane: int, t: float) -> float | None:
        cur = m.current.get(lane)
        why = self.halted(m, t)
        if cur is None:
            if why or not m.queue[lane] or m.refused_lane.get(lane):
                reason = why or ("refused" if m.refused_lane.get(lane) else "done")
                self.logs[f"models/{m.name}/run.jsonl"].append(
                    {"event": "lane-end", "lane": lane, "reason": reason, "t": self.now(t)}
                )
                return None
            return self.decide(m, lane, t)
        if cur.inflight is not None:
            return self.finish(m, lane, cur, t)
        if why:
            return self.end_household(m, lane, t, finished=False)
        if not cur.todo:
            if not self.classify(m, lane, cur, t):
                return self.end_household(m, lane, t, finished=False)
            if not cur.todo:
                return self.end_household(m, lane, t, finished=True)
            # the wait before a rerun pass, as a lane waits it (on the halt:
            # a stop or the ceiling meanwhile ends the household at once)
            cur.wait_until = t + rules.rerun_wait_s(self.rules.get("rerun_wait_s", 0.0), cur.passes)
        if cur.wait_until is not None and t < cur.wait_until:
            return cur.wait_until
        if m.pause_until is not None and cast(float, m.pause_t) <= t < m.pause_until + 0.5:
            return m.pause_until + 0.5
        return self.attempt(m, lane, cur, t)

    def decide(self, m: _Model, lane: int, t: float) -> float:
        h = m.queue[lane].pop(0)
        t = self.now(t)
        while m.ongoing and m.ongoing[0][0] < t:
            _, spend, finished = heapq.heappop(m.ongoing)
            m.finished += spend if finished else 0
        under_way = len(m.ongoing) + m.cut
        admit = rules.admit(
            refused_before=m.refused,
            finished_nusd=m.finished,
            under_way=under_way,
            reserve_nusd=m.manifest["reserve_nusd"],
            cap_nusd=m.manifest["cap_nusd"],
        )
        self.logs[f"models/{m.name}/admission.jsonl"].append(
            {
                "event": "decision",
                "lane": lane,
                "household": h,
                "t": t,
                "admit": admit,
                "finished_nusd": m.finished,
                "under_way": under_way,
                "reserve_nusd": m.manifest["reserve_nusd"],
                "cap_nusd": m.manifest["cap_nusd"],
            }
        )
        if not admit:
            m.refused = True
            m.refused_lane[lane] = True
            return t + EPS
        m.current[lane] = _House(h, list(m.manifest["arm_orders"][h]))
        m.current[lane].end_placeholder = [float("inf"), 0, True]
        heapq.heappush(m.ongoing, m.current[lane].end_placeholder)
        return t + EPS

    def outcome(self, m: _Model, house: _House, arm: str, pass_index: int) -> tuple[str, dict[str, Any] | None]:
        p = self.plan
        k = m.draw_index[house.id]
        named = {"operator": p.operator, "harness": p.harness, "deadline": p.deadline}
        for kind, where in named.items():
            if where and where == (m.name, k) and pass_index == 0 and arm == house.order[0]:
                return kind, None
        if p.inconclusive and p.inconclusive[0] == m.name and k >= p.inconclusive[1] and arm == house.order[0]:
            return "inconclusive", None
        r = self.rng.random()
        if r < p.p_provider:
            return "provider", None
        if r < p.p_provider + p.p_model:
            return "model", None
        return "ok", None

    ERRORS = {
        "provider": (
            "litellm.exceptions.RateLimitError",
            [
                "litellm.exceptions.RateLimitError",
                "openai.RateLimitError",
                "openai.APIStatusError",
                "openai.APIError",
                "openai.OpenAIError",
                "builtins.Exception",
            ],
            429,
            "rate limited, retry in 3s",
        ),
        "model": (
            "confirmatory.core.errors.UnparseableAnswer",
            ["confirmatory.core.errors.UnparseableAnswer", "confirmatory.core.errors.ModelFault", "builtins.Exception"],
            None,
            "no number in the final answer",
        ),
        "operator": (
            "litellm.exceptions.AuthenticationError",
            [
                "litellm.exceptions.AuthenticationError",
                "openai.AuthenticationError",
                "openai.APIStatusError",
                "openai.APIError",
                "builtins.Exception",
            ],
            401,
            "invalid api key",
        ),
        "harness": (
            "demo.harness.HarnessBug",
            ["demo.harness.HarnessBug", "builtins.Exception"],
            None,
            "KeyError in the tool loop",
        ),
        "deadline": (rules.DEADLINE_TYPE, [rules.DEADLINE_TYPE, "builtins.Exception"], None, "abandoned"),
        "inconclusive": (
            "openai.WeirdError",
            ["openai.WeirdError", "openai.OpenAIError", "builtins.Exception"],
            None,
            "something odd happened to request 123",
        ),
    }

    def attempt(self, m: _Model, lane: int, house: _House, t: float) -> float:
        """Start an attempt; it ends (record, costs, consequences) at its own step."""
        arm = house.todo.pop(0)
        start = self.now(t)
        kind, _ = self.outcome(m, house, arm, house.passes)
        dur = 3600.0 if kind == "deadline" else self.rng.uniform(4.0, 20.0)
        house.inflight = (arm, house.passes, start, round(start + dur, 6), kind)
        return house.inflight[3]

    def finish(self, m: _Model, lane: int, house: _House, t: float) -> float:
        arm, pass_index, start, end, kind = cast(tuple[str, int, float, float, str], house.inflight)
        house.inflight = None
        self.now(t)
        dur = end - start
        lo, hi = self.plan.cost_range_nusd
        cost = self.rng.randint(lo, hi)
        status = {"ok": "ok", "deadline": "deadline"}.get(kind, "error")
        error = None
        if kind != "ok":
            etype, mro, code, msg = self.ERRORS[kind]
            error = {
                "type": etype,
                "mro": mro + ["builtins.BaseException", "builtins.object"],
                "message": msg,
                "status_code": code,
                "cause": [],
                "escalated_after_truncation": False,
            }
        # The attempt's cost is counted at its end (add_cost below), so its
        # last call carries it all: a cost is counted as its call ends
        # (spend.AttemptSpend.add_call), which verify holds the ceiling to.
        calls = [
            {
                "kind": "chat",
                "start": start + i * dur / 2 + 0.01,
                "end": start + (i + 1) * dur / 2,
                "cost_nusd": cost if i == 1 else 0,
                "finish_reason": "stop",
                "error": error if i == 1 else None,
            }
            for i in range(2)
        ]
        record = {
            "model": m.name,
            "household": house.id,
            "arm": arm,
            "pass": pass_index,
            "lane": lane,
            "start": start,
            "end": end,
            "status": status,
            "cost_nusd": cost,
            "error": error,
            "calls": calls,
            "answer": None if error else {"net_income": 123.0},
        }
        rel = record_relpath(house.id, arm, pass_index)
        sha = _write_json(self.root / f"models/{m.name}" / rel, record)
        house.ended.append(dict(record=record, rel=rel, sha=sha, reruns=house.reruns[arm]))
        self.add_cost(cost, m, end)
        if kind in ("harness", "deadline"):
            house.todo = []  # the lane acts at once: nothing more starts
            self.trigger(m, kind, house.id, arm, pass_index, end)
        if kind == "deadline":
            self.logs[f"models/{m.name}/run.jsonl"].append(
                {
                    "event": "late-cost",
                    "household": house.id,
                    "arm": arm,
                    "pass": pass_index,
                    "cost_nusd": 777,
                    "t": self.now(end),
                }
            )
            self.add_cost(777, m, end)
        elif kind == "operator":
            self.pause(m, house, arm, pass_index, end)
        return self.clock + EPS

    def add_cost(self, cost: int, m: _Model, t: float) -> None:
        self.total += cost
        m.spend += cost
        if self.crossed_t is None and self.total > self.ceiling_nusd:
            self.crossed_t = self.now(t)
            line = {
                "event": "ceiling",
                "t": self.crossed_t,
                "total_nusd": self.total,
                "ceiling_nusd": self.ceiling_nusd,
            }
            self.logs["run.jsonl"].append(line)
            for name in self.models:
                self.logs[f"models/{name}/run.jsonl"].append(line)

    def trigger(self, m: _Model, cause: str, h: str, arm: str, pass_index: int, t: float) -> None:
        log = self.logs[f"models/{m.name}/run.jsonl"]
        log.append(
            {"event": "trigger", "cause": cause, "household": h, "arm": arm, "pass": pass_index, "t": self.now(t)}
        )
        # As the runner does (Run.trigger): every trigger gets a stop of its
        # cause; the first stop stands.
        stop_t = self.now(t)
        if m.stop_t is None:
            m.stop_t = stop_t
        log.append({"event": "stop", "cause": cause, "scope": rules.STOP_SCOPE[cause], "t": stop_t})

    def pause(self, m: _Model, house: _House, arm: str, pass_index: int, t: float) -> None:
        log = self.logs[f"models/{m.name}/run.jsonl"]
        m.pause_t = self.now(t)
        log.append({"event": "pause", "household": house.id, "arm": arm, "pass": pass_index, "t": m.pause_t})
        resume = self.logs["resume.jsonl"]
        # written ahead of time: a stale request (before the pause, rejected) and a good one
        stale = round(m.pause_t - 30, 6)
        resume.append({"event": "resume-request", "model": m.name, "t": stale})
        req = round(m.pause_t + 60, 6)
        resume.append({"event": "resume-request", "model": m.name, "t": req})
        m.resumes = [
            {"event": "resume", "request_t": stale, "accepted": False, "t": m.pause_t + 1},
            {"event": "resume", "request_t": req, "accepted": True, "t": m.pause_t + 61},
        ]
        m.pause_until = m.pause_t + 61

    def classify(self, m: _Model, lane: int, house: _House, t: float) -> bool:
        """Decide the pass just run; plan the next. False when the household must end."""
        r = self.rules
        actions = {}
        stop = False
        for a in house.ended[house.classified :]:
            rec = a["record"]
            self._host_until(rec["end"] + 1 + 2 * self.plan.sample_interval_s)
            v = self.host_index.verdict(rec["start"], rec["end"])
            cls = rules.classify(rec, v.reasons, precedence=r["precedence"])
            if cls is rules.Cls.INCONCLUSIVE:
                m.inconclusive.setdefault(cast(str, rules.error_signature(rec["error"])), set()).add(house.id)
            d = rules.decide(
                rec,
                v.reasons,
                reruns_used=a["reruns"],
                max_reruns=r["max_reruns_per_arm"],
                precedence=r["precedence"],
                inconclusive_households=m.inconclusive,
                inconclusive_limit=r["inconclusive_household_limit"],
            )
            a.update(cls=str(d.cls), action=str(d.action), signature=d.signature)
            actions[rec["arm"]] = d.action
            if d.stop_cause == "inconclusive":
                self.trigger(m, "inconclusive", house.id, rec["arm"], rec["pass"], t)
            stop = stop or d.action is rules.Action.STOP
        house.classified = len(house.ended)
        if stop:
            return False
        house.todo = rules.next_pass_arms(
            house.order, actions, reruns_used=house.reruns, max_reruns=r["max_reruns_per_arm"]
        )
        for arm in house.todo:
            house.reruns[arm] += 1
        house.passes += 1
        return True

    def end_household(self, m: _Model, lane: int, t: float, finished: bool) -> float:
        house = m.current.pop(lane)
        if house.classified < len(house.ended):
            self.classify(m, lane, house, t)
        t = self.now(t)
        log = self.logs[f"models/{m.name}/run.jsonl"]
        spend = 0
        for a in house.ended:
            rec = a["record"]
            spend += rec["cost_nusd"]
            log.append(
                {
                    "event": "attempt",
                    "lane": lane,
                    "household": house.id,
                    "arm": rec["arm"],
                    "pass": rec["pass"],
                    "start": rec["start"],
                    "end": rec["end"],
                    "cost_nusd": rec["cost_nusd"],
                    "record": a["rel"],
                    "record_sha256": a["sha"],
                    "class": a["cls"],
                    "action": a["action"],
                    "signature": a["signature"],
                    "reruns_used": a["reruns"],
                }
            )
        log.append(
            {
                "event": "household",
                "lane": lane,
                "household": house.id,
                "t": t,
                "finished": finished,
                "spend_nusd": spend,
            }
        )
        ph = house.end_placeholder
        m.ongoing.remove(ph)
        heapq.heapify(m.ongoing)
        if finished:
            heapq.heappush(m.ongoing, [t, spend, True])
        else:
            m.cut += 1  # under way until the stop: no decision of this model follows it
        return t + EPS


def generate_run(root: Path, plan: Plan | None = None) -> Path:
    """Write a complete, rule-abiding run directory at ``root`` (must not exist)."""
    gen = _Gen(Path(root), plan or Plan())
    gen.setup()
    gen.run()
    return Path(root)
