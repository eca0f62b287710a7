"""The run directory: its manifests, the design copy, config.json and the logs' writers.

Everything here is written before any thread starts. Manifests are written
once (tmp + fsync + rename + fsync dir) and never change; every log opens
with its ``open`` line, chained from the seed its manifest gives it
(RECORDS.md "Encoding").
"""

from __future__ import annotations

import secrets as _random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confirmatory.core.redaction import redact_obj
from confirmatory.core.streams import arm_orders, draw_order
from confirmatory.records import manifests
from confirmatory.records.chain import RECORD_FORMAT, log_seed, sha256_hex
from confirmatory.records.layout import CONFIG, tsa_files
from confirmatory.records.writer import ChainWriter, write_bytes_durable, write_json_durable


@dataclass
class ModelFiles:
    name: str
    dir: Path
    manifest_sha256: str
    manifest: dict[str, Any]
    run_log: ChainWriter
    admission_log: ChainWriter


@dataclass
class RunFiles:
    dir: Path
    manifest_sha256: str
    manifest: dict[str, Any]
    run_log: ChainWriter
    host_log: ChainWriter
    anchors_log: ChainWriter
    pushes_log: ChainWriter
    models: dict[str, ModelFiles] = field(default_factory=dict)

    def writers(self) -> dict[str, ChainWriter]:
        """Every log the anchors fix, by path relative to the run directory.

        anchors.jsonl is the anchor itself and anchor-pushes.jsonl records
        pushes of anchors (the final push necessarily comes after the final
        anchor), so neither is in the anchor's ``logs``.
        """
        out = {"run.jsonl": self.run_log, "host.jsonl": self.host_log}
        for m in self.models.values():
            out[f"models/{m.name}/run.jsonl"] = m.run_log
            out[f"models/{m.name}/admission.jsonl"] = m.admission_log
        return out

    def manifest_paths(self) -> list[str]:
        return ["manifest.json"] + [f"models/{m}/manifest.json" for m in self.models]

    def close(self) -> None:
        for w in [self.run_log, self.host_log, self.anchors_log, self.pushes_log] + [
            w for m in self.models.values() for w in (m.run_log, m.admission_log)
        ]:
            w.close()


def expand_command(command: Any, run_dir: Path) -> list[str]:
    """The anchor command as run: ``{python}`` is this interpreter, ``{run_dir}`` the run directory."""
    values = {"{python}": sys.executable, "{run_dir}": str(Path(run_dir).resolve())}
    out = []
    for arg in command:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def run_manifest(loaded: Any, *, run_id: str, created_t: float, anchors_cwd: str, run_dir: Path) -> dict[str, Any]:
    d = loaded.design
    fields = manifests.run_fields(d)
    fields["harness"] = {**fields["harness"], "pins": dict(loaded.pins)}
    fields["anchors"] = {
        **fields["anchors"],
        "command": expand_command(d.anchors.command, run_dir) if d.anchors.command else None,
        "cwd": anchors_cwd,
    }
    return {"format": RECORD_FORMAT, "run_id": run_id, "created_t": created_t, "design_sha256": loaded.sha256, **fields}


def model_manifest(loaded: Any, spec: Any) -> dict[str, Any]:
    d = loaded.design
    draw = draw_order(d.study.seed, [h.id for h in loaded.households])
    return {
        **manifests.model_fields(d, spec),
        "draw": draw,
        "arm_orders": arm_orders(d.study.seed, spec.name, draw, [a.name for a in d.arms]),
    }


def copy_evidence(loaded: Any, run_dir: Path, run_id: str, fixed: dict[str, str]) -> dict[str, Any] | None:
    """The run manifest's ``evidence`` (None when the design signs nothing;
    ``manifests.evidence_fields``), after copying each TSA's certificate and
    CA into ``run_dir`` durably and adding their sha256 to ``fixed`` (the
    manifest's ``files``). The design pinned them (design.load); the private
    key is never copied."""
    a = loaded.design.anchors
    for i, tsa in enumerate(a.timestamps if a.signer is not None else ()):
        cert_rel, ca_rel = tsa_files(i)
        for rel, src in ((cert_rel, tsa.certificate), (ca_rel, tsa.ca)):
            fixed[rel] = write_bytes_durable(run_dir / rel, (Path(loaded.base_dir) / src).read_bytes())
    return manifests.evidence_fields(a, run_id)


def _open_log(run_dir: Path, rel: str, manifest_sha: str, t: float) -> ChainWriter:
    w = ChainWriter(run_dir / rel, log_seed(manifest_sha, rel))
    w.append({"event": "open", "t": t})
    return w


def create_run_dir(
    loaded: Any,
    run_dir: Path,
    *,
    clock: Any,
    config: dict[str, Any] | None,
    engine_backend: dict[str, Any] | None = None,
) -> RunFiles:
    """Create ``run_dir`` (which must not exist) with manifests, design copy, config and open logs.

    ``engine_backend``: where the engine pools run and what they got, the
    run manifest's ``engine.backend`` (an extra field, docs/RUN.md)."""
    run_dir.mkdir(parents=True, exist_ok=False)
    created = clock.now()
    run_id = f"{loaded.design.study.id}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(created))}-{_random.token_hex(3)}"
    # config.json before the run manifest, which fixes its sha256 (``files``):
    # the manifest's hash seeds every log and is in every anchor, so the
    # first anchor fixes config.json too (RECORDS.md "manifest.json").
    fixed = {} if config is None else {CONFIG: write_json_durable(run_dir / CONFIG, config)}
    manifest = run_manifest(loaded, run_id=run_id, created_t=created, anchors_cwd=str(loaded.base_dir), run_dir=run_dir)
    if engine_backend is not None:
        manifest["engine"] = {**manifest["engine"], "backend": redact_obj(engine_backend)}
    evidence = copy_evidence(loaded, run_dir, run_id, fixed)
    if evidence is not None:
        manifest["evidence"] = evidence
    manifest["files"] = fixed
    sha = write_json_durable(run_dir / "manifest.json", manifest)
    (run_dir / "design.toml").write_bytes(loaded.raw)
    _fsync_file(run_dir / "design.toml")
    t = clock.now()
    files = RunFiles(
        dir=run_dir,
        manifest_sha256=sha,
        manifest=manifest,
        run_log=_open_log(run_dir, "run.jsonl", sha, t),
        host_log=_open_log(run_dir, "host.jsonl", sha, t),
        anchors_log=_open_log(run_dir, "anchors.jsonl", sha, t),
        pushes_log=_open_log(run_dir, "anchor-pushes.jsonl", sha, t),
    )
    # resume.jsonl is appended by another process (`resume`): open it, then let go.
    _open_log(run_dir, "resume.jsonl", sha, t).close()
    for spec in loaded.design.models:
        mdir = run_dir / "models" / spec.name
        mman = model_manifest(loaded, spec)
        msha = write_json_durable(mdir / "manifest.json", mman)
        files.models[spec.name] = ModelFiles(
            name=spec.name,
            dir=mdir,
            manifest_sha256=msha,
            manifest=mman,
            run_log=_open_log(run_dir, f"models/{spec.name}/run.jsonl", msha, t),
            admission_log=_open_log(run_dir, f"models/{spec.name}/admission.jsonl", msha, t),
        )
    return files


def complete_run_dir(loaded: Any, run_dir: Path, t: float) -> list[str]:
    """Finish the making of a run directory whose runner died while it made
    it (its run manifest written, not everything after): the design's copy,
    every log's open line and each model's manifest, as ``create_run_dir``
    writes them (a model manifest is the design's, seeded; a log that is
    missing or empty gets its open line at ``t``). config.json is not made
    again: what the runner pinned then is gone. Returns what it made."""
    import json

    run_dir = Path(run_dir)
    raw = (run_dir / "manifest.json").read_bytes()
    sha = sha256_hex(raw)
    made: list[str] = []
    copy = run_dir / "design.toml"
    have = copy.read_bytes() if copy.exists() else None
    if have is None or (have != loaded.raw and loaded.raw.startswith(have)):
        # none yet, or the kill cut its write short (never fsynced: a prefix
        # of the design): written whole; anything else is left for verify
        copy.write_bytes(loaded.raw)
        _fsync_file(copy)
        made.append("design.toml")

    def log(rel: str, msha: str) -> None:
        path = run_dir / rel
        if not path.exists() or path.stat().st_size == 0:
            _open_log(run_dir, rel, msha, t).close()
            made.append(rel)

    for rel in ("run.jsonl", "host.jsonl", "anchors.jsonl", "anchor-pushes.jsonl", "resume.jsonl"):
        log(rel, sha)
    for spec in loaded.design.models:
        rel = f"models/{spec.name}/manifest.json"
        if not (run_dir / rel).exists():
            write_json_durable(run_dir / rel, model_manifest(loaded, spec))
            made.append(rel)
        msha = sha256_hex((run_dir / rel).read_bytes())
        json.loads((run_dir / rel).read_bytes())  # (a manifest that is not JSON raises: verify names it)
        for name in ("run.jsonl", "admission.jsonl"):
            log(f"models/{spec.name}/{name}", msha)
    return made


def open_run_dir(run_dir: Path) -> RunFiles:
    """The writers of an existing run directory's logs, to carry a crashed run
    on (``confirmatory continue``): each opens where its last complete line
    ends, after checking its chain from the seed (a torn tail must have been
    moved aside first). resume.jsonl stays another process's."""
    import json

    run_dir = Path(run_dir)
    raw = (run_dir / "manifest.json").read_bytes()
    manifest, sha = json.loads(raw), sha256_hex(raw)

    def writer(rel: str, msha: str) -> ChainWriter:
        return ChainWriter(run_dir / rel, log_seed(msha, rel))

    files = RunFiles(
        dir=run_dir,
        manifest_sha256=sha,
        manifest=manifest,
        run_log=writer("run.jsonl", sha),
        host_log=writer("host.jsonl", sha),
        anchors_log=writer("anchors.jsonl", sha),
        pushes_log=writer("anchor-pushes.jsonl", sha),
    )
    for name in manifest["models"]:
        mdir = run_dir / "models" / name
        mraw = (mdir / "manifest.json").read_bytes()
        msha = sha256_hex(mraw)
        files.models[name] = ModelFiles(
            name=name,
            dir=mdir,
            manifest_sha256=msha,
            manifest=json.loads(mraw),
            run_log=writer(f"models/{name}/run.jsonl", msha),
            admission_log=writer(f"models/{name}/admission.jsonl", msha),
        )
    return files


def _fsync_file(path: Path) -> None:
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
