"""The design's evidence tables (docs/DESIGN-FILE.md, "Evidence"): the study's key,
the time-stamping authorities and the witnesses of ``[anchors]``, and the check
that each TSA's certificate and CA hash as the design pins them.

Split from ``design.model`` and ``design.load`` (which use it) to keep each
under the size the layout allows; it reads only the files the pins name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

SHA256_RE = re.compile(r"[0-9a-f]{64}")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _sha256(value: str) -> str:
    if not SHA256_RE.fullmatch(value):
        raise ValueError(f"must be 64 lower-case hex digits (got {value!r})")
    return value


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http(s) URL (got {value!r})")
    return value


def _note_verifier(value: str) -> str:
    from confirmatory.core.note import NoteVerifier

    NoteVerifier.parse(value)  # a NoteError (a ValueError) names what is wrong
    return value


def _cosignature_verifier(value: str) -> str:
    from confirmatory.core.cosignature import CosignatureVerifier

    CosignatureVerifier.parse(value)
    return value


def check_origin_value(value: str | None) -> str | None:
    from confirmatory.core.checkpoint import check_origin

    return value if value is None else check_origin(value)


class Signer(_Frozen):
    """The study's key: the private key's file (relative to the design) and
    the verifier key the pre-registration fixes (docs/EVIDENCE.md)."""

    key_file: StrictStr = Field(min_length=1)
    verifier_key: StrictStr

    _v = field_validator("verifier_key")(_note_verifier)


class TimestampAuthority(_Frozen):
    """An RFC 3161 TSA: its URL and its signing certificate and CA, pinned by sha256."""

    url: StrictStr
    certificate: StrictStr = Field(min_length=1)
    certificate_sha256: StrictStr
    ca: StrictStr = Field(min_length=1)
    ca_sha256: StrictStr

    _u = field_validator("url")(_http_url)
    _h = field_validator("certificate_sha256", "ca_sha256")(_sha256)


class WitnessSpec(_Frozen):
    """A C2SP tlog-witness: its submission prefix and its cosigner (type 0x04) verifier key."""

    url: StrictStr
    verifier_key: StrictStr

    _u = field_validator("url")(_http_url)
    _v = field_validator("verifier_key")(_cosignature_verifier)


def verify_tsa_pins(table: Any, base_dir: Path, problems: list[str]) -> None:
    """Each ``[[anchors.timestamps]]`` certificate and CA (relative to the
    design) hashes as its ``*_sha256`` pin says: the run copies them into its
    directory, and verify checks every stamp against those copies."""
    tsas = table.get("timestamps") if isinstance(table, dict) else None
    if not isinstance(tsas, list):
        return
    for i, tsa in enumerate(tsas):
        if not isinstance(tsa, dict):
            continue
        for name in ("certificate", "ca"):
            rel, expected = tsa.get(name), tsa.get(f"{name}_sha256")
            if (
                not isinstance(rel, str)
                or not rel
                or not isinstance(expected, str)
                or not SHA256_RE.fullmatch(expected)
            ):
                continue  # the field checks report a malformed one
            key = f"anchors.timestamps[{i}].{name}_sha256"
            file = base_dir / rel
            if not file.is_file():
                problems.append(f"anchors.timestamps[{i}].{name}: {file} not found (pinned sha256 {expected})")
                continue
            actual = hashlib.sha256(file.read_bytes()).hexdigest()
            if actual != expected:
                problems.append(f"{key}: {file} has drifted: expected sha256 {expected}, actual {actual}")
