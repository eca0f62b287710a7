"""The study's attester for a run: the manifest's ``evidence`` and the design's key.

The private key is read from the design's ``[anchors.signer] key_file``
(preflight checked it: ``engine.preflight.signer_problems``) and held in
memory only: nothing of it is written into the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confirmatory.anchors.evidence import Attester, attester_for
from confirmatory.records.keyfile import read_note_signer
from confirmatory.records.writer import ChainWriter
from confirmatory.runtime.clock import Clock


def key_file_path(loaded: Any) -> Path | None:
    """The study's private key file the design names (relative to the design), or None."""
    signer = loaded.design.anchors.signer
    if signer is None:
        return None
    return Path(loaded.base_dir) / Path(signer.key_file).expanduser()


class KeyMismatch(Exception):
    """The design's key is not the one the run's manifest names."""


def study_attester(
    run_dir: Path, clock: Clock, manifest: dict[str, Any], loaded: Any, pushes: ChainWriter, anchors_path: Path
) -> Attester | None:
    """The attester of the run whose manifest is ``manifest`` (None: it signs nothing)."""
    evidence = manifest.get("evidence")
    path = key_file_path(loaded)
    if not evidence or path is None:
        return None
    signer = read_note_signer(path)
    if evidence.get("verifier_key") != str(signer.verifier):
        raise KeyMismatch(
            f"anchors.signer.key_file: the key in {path} is {signer.verifier}, the run's manifest names "
            f"{evidence.get('verifier_key')}"
        )
    return attester_for(Path(run_dir), clock, evidence, signer, pushes, Path(anchors_path))
