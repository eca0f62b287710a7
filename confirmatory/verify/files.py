"""The files the run manifest fixes by sha256 (invariant 11): config.json;
and the run directory's one lock file, which holds no byte.

config.json is written once, before the run manifest, which names its
sha256 in ``files`` (RECORDS.md "manifest.json"). The manifest's own hash
seeds every log and is in every anchor, so from the first anchor on a
config.json rewritten (its ``not_pinned_down`` erased, garbage appended
after its JSON) is a violation that names the file. Only the names of
``records.layout.MANIFEST_FIXED_FILES`` are read: a manifest naming any
other path fails, and that path is never opened (a forged one could name
``/dev/zero`` or a FIFO). A run manifest without ``files`` (made before
the manifest fixed config.json) has its config.json not checked, and the
invariant's note says so: never a pass that claims it was.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from confirmatory.records.chain import open_regular
from confirmatory.records.layout import EVIDENCE_DIR, MANIFEST_FIXED_FILES, TSA_FILE_RE, manifest_fixed
from confirmatory.verify.anchored import _HEX64
from confirmatory.verify.context import RunContext

# Lock files a run directory may hold (``confirmatory resume``, a continuation
# and the final anchor lock resume.jsonl under it): FileLock writes no byte
# into one, so any byte in it was put there by something else.
LOCK_FILES = ("resume.jsonl.lock",)

NOT_CHECKED = "not checked: the run manifest fixes no sha256 of it (no files: a run made before the manifest fixed it)"


def file_sha256(path: Any) -> tuple[str | None, str]:
    """The sha256 of a regular file's bytes, or (None, why not)."""
    try:
        with open_regular(path) as fh:
            digest = hashlib.sha256()
            while chunk := fh.read(1 << 16):
                digest.update(chunk)
    except OSError as exc:
        return None, "missing" if isinstance(exc, FileNotFoundError) else f"cannot be read: {exc.strerror or exc}"
    return digest.hexdigest(), ""


def check_files(ctx: RunContext, man: dict[str, Any]) -> None:
    """Invariant 11: every file the run manifest's ``files`` names hashes as
    it says, it names no other file, and no file it could name lies in the
    run directory unnamed."""
    f, root = ctx.findings, ctx.layout.root
    check_locks(ctx)
    f.check(11)
    if "files" not in man:
        unchecked = [rel for rel in MANIFEST_FIXED_FILES if os.path.lexists(root / rel)]
        if unchecked:
            note = f"{', '.join(unchecked)} {NOT_CHECKED}"
            f.notes[11] = f"{f.notes[11]}; {note}" if 11 in f.notes else note
        return
    files = man["files"]
    if not isinstance(files, dict):
        f.fail(11, "manifest.json", None, f"files is {files!r}, not an object of path -> sha256")
        return
    for rel, want in files.items():
        f.check(11)
        if not (type(rel) is str and manifest_fixed(rel)):
            f.fail(
                11,
                "manifest.json",
                None,
                f"files names {str(rel)[:200]!r}, not a file the run manifest fixes "
                f"({', '.join(MANIFEST_FIXED_FILES)}, evidence/tsa-<i>.certificate.pem, evidence/tsa-<i>.ca.pem): "
                "not read",
            )
            continue
        if not (type(want) is str and _HEX64.fullmatch(want)):
            f.fail(11, "manifest.json", None, f"files[{rel!r}] is {str(want)[:80]!r}, not a sha256 in lower-case hex")
            continue
        got, why = file_sha256(root / rel)
        if got is None:
            f.fail(11, rel, None, f"{why}: the run manifest fixes its sha256 ({want})")
        elif got != want:
            f.fail(
                11,
                rel,
                None,
                f"does not hash as the run manifest fixes it: its sha256 is {got}, the manifest's files says {want} "
                "(the file was changed after the run wrote it)",
            )
    for rel in (*MANIFEST_FIXED_FILES, *tsa_copies(root)):
        if rel not in files and os.path.lexists(root / rel):
            f.check(11)
            f.fail(
                11,
                rel,
                None,
                "in the run directory, but the run manifest's files fixes no sha256 of it "
                "(its runner wrote none: the file was put there since)",
            )


def tsa_copies(root: Any) -> list[str]:
    """The TSA certificate copies the run directory holds (evidence/tsa-<i>.*.pem)."""
    try:
        names = sorted(os.listdir(root / EVIDENCE_DIR))
    except OSError:
        return []
    return [f"{EVIDENCE_DIR}/{n}" for n in names if TSA_FILE_RE.fullmatch(f"{EVIDENCE_DIR}/{n}")]


def check_locks(ctx: RunContext) -> None:
    """Invariant 11: a lock file of the run directory holds no byte."""
    f, root = ctx.findings, ctx.layout.root
    for rel in LOCK_FILES:
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue  # none: nothing ever locked it, or the final anchor removed the one it made
        f.check(11)
        if not stat.S_ISREG(st.st_mode) or st.st_size:
            f.fail(
                11,
                rel,
                None,
                f"a lock file holds no byte (FileLock writes none), this one {st.st_size} "
                "bytes, or it is not a regular file: put there by something else",
            )
