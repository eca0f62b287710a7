"""A study key, a local TSA and a local witness for tests and benchmarks: real processes on 127.0.0.1.

```python
with local_evidence(tmp_path / "evidence", origin="example.org/study/run") as ev:
    design = write_design(tmp_path / "design", anchors=ev.anchors())
```

``local_evidence`` makes the study's key (``records.keyfile``, mode 0600,
outside every run directory), starts a TSA (``testing.tsa.start_tsa``: a
real ``openssl ts -reply`` behind a small HTTP server) and a witness
(``confirmatory witness serve`` as a process of its own, in a session of its
own so the runner's reaper stops it), and stops both on exit. ``anchors()``
gives the design's ``[anchors]`` keys that name them (paths absolute, and
the certificate and CA pinned by sha256).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from confirmatory.core.cosignature import CosignatureVerifier
from confirmatory.records.keyfile import make_key_file
from confirmatory.runtime import children
from confirmatory.testing.tsa import LocalTsa, _first_line, start_tsa

_START_TIMEOUT_S = 30.0


@dataclass
class LocalWitness:
    """``confirmatory witness serve`` running on 127.0.0.1: its URL, its verifier key."""

    proc: subprocess.Popen[bytes]
    url: str
    verifier_key: CosignatureVerifier
    key_file: Path
    state: Path

    def stop(self) -> None:
        children.kill_group(self.proc, grace=2.0)


def start_witness(directory: Path, logs: list[str], *, name: str = "witness.example/w1") -> LocalWitness:
    """A witness whose key (made once, in ``directory``) cosigns ``logs`` (``ORIGIN=VERIFIER_KEY``)."""
    directory = Path(directory)
    key = directory / "witness.key"
    if not key.exists():
        make_key_file(key, name, cosigner=True)
    state = directory / "state"
    argv = [sys.executable, "-m", "confirmatory", "witness", "serve", "--key", str(key), "--state", str(state)]
    argv += ["--port", "0"]
    for log in logs:
        argv += ["--log", log]
    errors = directory / "witness.stderr"
    with open(errors, "wb") as err:  # a file, not a pipe: nothing reads it until a failure
        proc = children.start(argv, cwd=None, stdout=subprocess.PIPE, stderr=err)
    try:
        url = _first_line(cast(IO[bytes], proc.stdout), _START_TIMEOUT_S).decode().strip()
        if not url.startswith("http://127.0.0.1:"):
            proc.wait(timeout=5)
            raise RuntimeError(f"the witness did not start: {url!r} {errors.read_text(errors='replace')}")
        # printed at once after the URL (and maybe read into the pipe's buffer with it)
        vkey = CosignatureVerifier.parse(cast(IO[bytes], proc.stdout).readline().decode().strip())
    except BaseException:
        children.kill_group(proc, grace=1.0)
        raise
    return LocalWitness(proc, url, vkey, key, state)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class LocalEvidence:
    origin: str
    key_file: Path
    verifier_key: str
    tsas: list[LocalTsa] = field(default_factory=list)
    witnesses: list[LocalWitness] = field(default_factory=list)

    def anchors(self, **extra: Any) -> dict[str, Any]:
        """The design's ``[anchors]`` evidence keys (add ``command`` and the rest as ``extra``)."""
        out: dict[str, Any] = {
            "origin": self.origin,
            "signer": {"key_file": str(self.key_file), "verifier_key": self.verifier_key},
        }
        if self.tsas:
            out["timestamps"] = [
                {
                    "url": t.url,
                    "certificate": str(t.certificate),
                    "certificate_sha256": _sha256(t.certificate),
                    "ca": str(t.ca),
                    "ca_sha256": _sha256(t.ca),
                }
                for t in self.tsas
            ]
        if self.witnesses:
            out["witnesses"] = [{"url": w.url, "verifier_key": str(w.verifier_key)} for w in self.witnesses]
        return out | extra


@contextmanager
def local_evidence(
    directory: Path, *, origin: str, tsas: int = 1, witnesses: int = 1, key_name: str = "example.org/study"
) -> Iterator[LocalEvidence]:
    """The study's key and ``tsas`` TSAs and ``witnesses`` witnesses, stopped on exit (module docstring)."""
    directory = Path(directory)
    key = directory / "keys" / "study.key"
    vkey = make_key_file(key, key_name)
    ev = LocalEvidence(origin, key, vkey)
    try:
        for i in range(tsas):
            ev.tsas.append(start_tsa(directory / f"tsa-{i}", name=f"Local TSA {i}"))
        for i in range(witnesses):
            ev.witnesses.append(
                start_witness(directory / f"witness-{i}", [f"{origin}={vkey}"], name=f"witness.example/w{i}")
            )
        yield ev
    finally:
        for w in ev.witnesses:
            w.stop()
        for t in ev.tsas:
            t.stop()
