"""The files a synthetic run writes (confirmatory.testing.rungen): its logs,
written fast (hashing each line itself) or through the real ChainWriter, its
JSON records, the design it claims to have run, and its households' and
models' state as it simulates them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confirmatory.core.merkle import Range, leaf_hash
from confirmatory.records.chain import dumps, sha256_hex
from confirmatory.records.writer import ChainWriter


@dataclass
class _Log:
    path: Path
    seed: str
    durable: bool
    lines: int = 0
    head: str = ""
    _w: Any = None  # a ChainWriter (durable) or a plain binary file
    tree: Range = field(default_factory=Range)

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.head = self.seed
        self._w = ChainWriter(self.path, self.seed) if self.durable else open(self.path, "wb")

    def append(self, obj: dict[str, Any]) -> None:
        if self.durable:
            self.head = self._w.append(obj)
        else:
            line = dumps({**obj, "seq": self.lines, "prev": self.head})
            self._w.write(line + b"\n")
            self.head = sha256_hex(line)
            self.tree.append(leaf_hash(line))
        self.lines += 1

    def root(self) -> str:
        return self._w.anchor_snapshot()[2] if self.durable else self.tree.root().hex()

    def close(self) -> None:
        self._w.close()


def _write_json(path: Path, obj: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps(obj) + b"\n"
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


DESIGN_TOML = """[study]
id = "synthetic"
seed = {seed}
spend_before_stage_usd = 0.5

[ceiling]
overall_cap_usd = {ceiling}
margin_usd = 0.0

[harness]
entry = "demo.harness:converse"
[harness.pins]
"harness.py" = "{pin}"

[engine]
factory = "demo.engine:start"
workers_per_model = 2

[households]
path = "households.jsonl"
sha256 = "{pin}"

[rules]
max_reruns_per_arm = 2
attempt_deadline_s = 3600
inconclusive_household_limit = 5
stop_follow_s = 5
rerun_wait_s = {rerun_wait!r}

[host]
sample_interval_s = {interval!r}
max_gap_s = 45.0
pressure_threshold = 10.0

[anchors]
interval_s = {anchor_s!r}
command = ["true"]
"""


@dataclass
class _House:
    id: str
    order: list[str]
    todo: list[str] = field(default_factory=list)
    ended: list[dict[str, Any]] = field(default_factory=list)
    classified: int = 0
    passes: int = 0
    reruns: dict[str, int] = field(default_factory=dict)
    end_placeholder: list[Any] = field(default_factory=list)  # [end t, spend, finished]: an entry of _Model.ongoing
    inflight: tuple[str, int, float, float, str] | None = None  # arm, pass, start, end, kind
    wait_until: float | None = None

    def __post_init__(self) -> None:
        self.todo = list(self.order)
        self.reruns = {a: 0 for a in self.order}


@dataclass
class _Model:
    name: str
    manifest: dict[str, Any]
    queue: dict[int, list[str]] = field(default_factory=dict)
    current: dict[int, _House] = field(default_factory=dict)
    refused: bool = False
    refused_lane: dict[int, bool] = field(default_factory=dict)
    finished: int = 0
    cut: int = 0
    ongoing: list[list[Any]] = field(default_factory=list)
    spend: int = 0
    stop_t: float | None = None
    pause_t: float | None = None
    pause_until: float | None = None
    inconclusive: dict[str, set[str]] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)
    draw_index: dict[str, int] = field(default_factory=dict)
