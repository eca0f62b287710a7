"""The layout of a run directory (RECORDS.md), as its readers find it: the
names of the run's manifest and logs, each model's folder, manifest and
logs, a record's path in its model's folder; which manifest each log chains
from, and so its seed (``RunLayout.logs``); and ``load_layout``, which reads
the run's manifest and every model manifest it names or the tree holds.

Pure: nothing here writes, and nothing imports the runner, litellm or psutil.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from confirmatory.records.chain import log_seed
from confirmatory.records.readers import JsonFile, read_json

RUN_MANIFEST = "manifest.json"
RUN_LEVEL_LOGS = ("run.jsonl", "host.jsonl", "resume.jsonl")
ANCHORS_LOG = "anchors.jsonl"
PUSHES_LOG = "anchor-pushes.jsonl"
MODEL_LOG_NAMES = ("run.jsonl", "admission.jsonl")
CONFIG = "config.json"
# The files the run manifest's ``files`` fixes by sha256 (RECORDS.md
# "manifest.json"): written before it, once, and fixed by nothing else.
# verify reads no other name a manifest gives (a forged one could name any file).
MANIFEST_FIXED_FILES = (CONFIG,)
# The evidence files the manifest's ``files`` also fixes: the copies of each
# time-stamping authority's certificate and CA (RECORDS.md "manifest.json").
EVIDENCE_DIR = "evidence"
TSA_FILE_RE = re.compile(r"evidence/tsa-(0|[1-9][0-9]{0,3})\.(certificate|ca)\.pem")


def tsa_files(i: int) -> tuple[str, str]:
    """The run directory's copies of TSA ``i``'s certificate and CA."""
    return f"{EVIDENCE_DIR}/tsa-{i}.certificate.pem", f"{EVIDENCE_DIR}/tsa-{i}.ca.pem"


def stamp_file(anchor_seq: int, tsa: int) -> str:
    """Where TSA ``tsa``'s reply stamping anchor ``anchor_seq``'s checkpoint is kept."""
    return f"{EVIDENCE_DIR}/stamps/{anchor_seq}.{tsa}.tsr"


def manifest_fixed(rel: str) -> bool:
    """Whether the run manifest's ``files`` may name ``rel`` (verify reads no other)."""
    return rel in MANIFEST_FIXED_FILES or TSA_FILE_RE.fullmatch(rel) is not None


def model_dir(model: str) -> str:
    return f"models/{model}"


def model_log(model: str, name: str) -> str:
    return f"models/{model}/{name}"


def model_manifest(model: str) -> str:
    return f"models/{model}/manifest.json"


def record_relpath(household: str, arm: str, pass_index: int, round_index: int = 0) -> str:
    """A record's path relative to its model's folder. A household a
    continuation runs again (round r >= 1) keeps its earlier records and
    writes ``<pass>.r<r>.json`` beside them (no pass is named so)."""
    tail = f".r{round_index}" if round_index else ""
    return f"records/{household}/{arm}/{pass_index}{tail}.json"


@dataclass(frozen=True, slots=True)
class LogSpec:
    """One log of the run: its relative path, the manifest it chains from, its seed."""

    relpath: str
    manifest: str
    seed: str


@dataclass
class RunLayout:
    """The manifests of a run directory and the logs they imply."""

    root: Path
    manifest: JsonFile
    models: dict[str, JsonFile] = field(default_factory=dict)

    @property
    def model_names(self) -> list[str]:
        return list(self.models)

    def logs(self) -> list[LogSpec]:
        """Every log the layout names, with its seed (None-safe: a missing
        manifest gives the seed of an empty hash, which no line matches)."""
        out = []
        run_sha = self.manifest.sha256 or ""
        for rel in (*RUN_LEVEL_LOGS, ANCHORS_LOG, PUSHES_LOG):
            out.append(LogSpec(rel, RUN_MANIFEST, log_seed(run_sha, rel)))
        for name, mf in self.models.items():
            for log in MODEL_LOG_NAMES:
                rel = model_log(name, log)
                out.append(LogSpec(rel, model_manifest(name), log_seed(mf.sha256 or "", rel)))
        return out


def load_layout(root: Path) -> RunLayout:
    """Read the run manifest and every model manifest it names or the tree holds."""
    root = Path(root)
    layout = RunLayout(root, read_json(root / RUN_MANIFEST))
    names: list[str] = []
    listed = (layout.manifest.obj or {}).get("models") if isinstance(layout.manifest.obj, dict) else None
    if isinstance(listed, list):
        names.extend(str(n) for n in listed)
    models_dir = root / "models"
    if models_dir.is_dir():
        listed_names = set(names)  # (a set: a run may list thousands)
        names.extend(sorted(p.name for p in models_dir.iterdir() if p.is_dir() and p.name not in listed_names))
    for name in names:
        layout.models[name] = read_json(root / model_manifest(name))
    return layout
