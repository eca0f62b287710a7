"""Private key files: made once at mode 0600, never inside a run directory, read back as signer keys.

A key file holds one signer key's text (``core.note``'s
``PRIVATE+KEY+<name>+<hex id>+<base64>``) and a newline. ``make_key_file``
creates it with ``O_CREAT | O_EXCL`` at mode 0600 (it is never widened or
chmod-ed after: the bytes are never readable by anyone else, even for a
moment), fsyncs it and its directory, and refuses a path that exists or lies
inside a run directory (a run directory is handed to reviewers: a key in it
would be published with it). docs/EVIDENCE.md "Keys".

The names other layers use: ``make_key_file``, ``read_note_signer``,
``read_cosigner``, ``run_dir_holding``, ``KeyFileRefused``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from confirmatory.core.cosignature import Cosigner
from confirmatory.core.note import NoteError, NoteSigner
from confirmatory.records.layout import RUN_MANIFEST

# What marks a directory as a run directory (one of them is enough): a run
# manifest (a JSON object with a run_id), or one of the logs only a run holds.
RUN_MARKERS = ("run.jsonl", "anchors.jsonl", "anchor-pushes.jsonl")


class KeyFileRefused(Exception):
    """A key file that is not made or not read; the message names the file and why."""


def _is_run_dir(d: Path) -> bool:
    if any((d / name).exists() for name in RUN_MARKERS):
        return True
    manifest = d / RUN_MANIFEST
    if not manifest.is_file():
        return False
    try:
        obj = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "run_id" in obj


def run_dir_holding(path: Path | str) -> Path | None:
    """The run directory ``path`` would lie in (it or any directory above it), or None."""
    p = Path(os.path.abspath(path))
    for d in [p, *p.parents]:
        try:
            real = d.resolve()
        except OSError:
            continue
        if real.is_dir() and (_is_run_dir(real) or _is_run_dir(d)):
            return d
    return None


def make_key_file(path: Path | str, name: str, *, cosigner: bool = False) -> str:
    """Make a new Ed25519 key named ``name`` in a new file ``path``; return its verifier key's text.

    ``cosigner``: a witness's key (signature type 0x04, for cosignatures)
    instead of a note signer's (0x01, the study's checkpoints). Missing
    parent directories are made (mode 0700). Refused (``KeyFileRefused``):
    a path that exists (never overwritten), a path inside a run directory,
    a name the note format does not allow."""
    path = Path(path)
    key: NoteSigner | Cosigner
    try:
        key = Cosigner.generate(name) if cosigner else NoteSigner.generate(name)
    except NoteError as exc:
        raise KeyFileRefused(f"{path}: not made: {exc}") from None
    run_dir = run_dir_holding(path.parent)
    if run_dir is not None:
        raise KeyFileRefused(
            f"{path}: not made: it is inside the run directory {run_dir}, which is handed to reviewers; "
            "keep the key outside every run directory"
        )
    if os.path.lexists(path):
        raise KeyFileRefused(f"{path}: not made: the file exists (a key file is never overwritten)")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise KeyFileRefused(f"{path}: not made: the file exists (a key file is never overwritten)") from None
    except OSError as exc:
        raise KeyFileRefused(f"{path}: not made: {exc.strerror or exc}") from None
    try:
        data = (key.private_text() + "\n").encode()
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise KeyFileRefused(f"{path}: not made: {exc.strerror or exc}") from None
    os.close(fd)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return str(key.verifier)


def _read(path: Path | str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise KeyFileRefused(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileRefused(f"{path}: not a key file (not ASCII text)") from None


def read_note_signer(path: Path | str) -> NoteSigner:
    """The study's signer key (type 0x01) a key file holds."""
    try:
        return NoteSigner.parse(_read(path))
    except NoteError as exc:
        raise KeyFileRefused(f"{path}: not a note signer key: {exc}") from None


def read_cosigner(path: Path | str) -> Cosigner:
    """A witness's cosigner key (type 0x04, ``key new --cosigner``) a key file holds."""
    try:
        return Cosigner.parse(_read(path))
    except NoteError as exc:
        raise KeyFileRefused(f"{path}: not a witness (cosigner) key: {exc}") from None
