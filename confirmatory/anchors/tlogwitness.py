"""A C2SP tlog-witness v1.0.0 witness (``confirmatory witness serve``) and its client (``add_checkpoint``).

The witness cosigns checkpoints of the logs it is told of (origin and the
log's note verifier key), refusing any that is not consistent with the last
one it cosigned for that origin. ``POST <prefix>/add-checkpoint`` takes

    old <size>
    <zero or more consistency proof hashes, base64, one a line>
    <blank line>
    <the signed checkpoint>

and answers (https://c2sp.org/tlog-witness@v1.0.0, in this order):

* 400 a request that is not of that form (or not a checkpoint);
* 404 a checkpoint of an origin the witness does not know;
* 403 when no signature verifies with that origin's key (a signature of the
  key that does not verify refuses the note too);
* 400 an old size above the checkpoint's size;
* 409 with ``<size>\\n``, ``Content-Type: text/x.tlog.size``, when the old
  size is not the size of the last checkpoint it cosigned for the origin (0
  if none);
* 409 for a checkpoint of that same size with another root: v1.0.0's status
  (the spec's later head moved it to 422; this witness follows v1.0.0);
* 422 when the consistency proof does not prove the checkpoint extends the
  last one (or is not empty from size 0);
* 200 with its cosignature line (C2SP tlog-cosignature v1.0.1) once the new
  checkpoint is on disk.

The state (per origin: size, root, the cosigned checkpoint) is one JSON file
in the state directory, written tmp + fsync + rename + fsync dir before the
answer, under the one lock that also holds the size check: two requests
cannot roll the size back (the spec's race). A restarted witness reads it
back. docs/EVIDENCE.md "The witness".
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from confirmatory.core.checkpoint import Checkpoint, check_origin
from confirmatory.core.cosignature import (
    BadCosignature,
    CosignatureVerifier,
    Cosigner,
    parse_cosignature_lines,
    verify_cosignature,
)
from confirmatory.core.merkle import EMPTY_ROOT, HASH_SIZE, verify_consistency
from confirmatory.core.note import (
    BadSignature,
    NoteError,
    NoteVerifier,
    Signature,
    UnverifiedNote,
    open_note,
    parse_note,
)
from confirmatory.records.writer import Guard, write_json_durable

STATE_FILE = "witness-state.json"
STATE_FORMAT = "confirmatory-tlog-witness-state/1"
SIZE_CONTENT_TYPE = "text/x.tlog.size"
MAX_PROOF_LINES = 63  # the spec: a client MUST NOT send more
MAX_REQUEST_BYTES = 1 << 20


class WitnessStateError(Exception):
    """The state directory cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class Answer:
    """The witness's answer to one request: HTTP status, body, content type."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


def _text(status: int, message: str) -> Answer:
    return Answer(status, (message.rstrip("\n") + "\n").encode())


@dataclass(frozen=True)
class Held:
    """The last checkpoint cosigned for an origin."""

    size: int
    root: bytes
    checkpoint: str


def parse_log(option: str) -> tuple[str, NoteVerifier]:
    """``ORIGIN=VERIFIER_KEY`` (the ``--log`` option): the origin and the log's note key."""
    origin, sep, vkey = option.partition("=")
    if not sep:
        raise ValueError(f"--log takes ORIGIN=VERIFIER_KEY, not {option!r}")
    try:
        return check_origin(origin), NoteVerifier.parse(vkey)
    except NoteError as exc:
        raise ValueError(f"--log {option!r}: {exc}") from None


def parse_request(body: bytes) -> tuple[int, list[bytes], bytes]:
    """The old size, the proof hashes and the signed checkpoint of an add-checkpoint body (ValueError if malformed)."""
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise ValueError("the request has no blank line between its proof and its checkpoint")
    lines = head.split(b"\n")
    first = lines[0]
    if not first.startswith(b"old "):
        raise ValueError("the request's first line is 'old <size>'")
    size = first[4:]
    if not size.isdigit() or not size.isascii() or (size != b"0" and size.startswith(b"0")) or len(size) > 20:
        raise ValueError(f"the old size {size[:40]!r} is not a decimal number without leading zeroes")
    proof = []
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise ValueError(f"the request holds {len(lines) - 1} proof lines; at most {MAX_PROOF_LINES}")
    for k, line in enumerate(lines[1:], 1):
        try:
            h = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"proof line {k} is not base64") from None
        if len(h) != HASH_SIZE:
            raise ValueError(f"proof line {k} is {len(h)} bytes, not a {HASH_SIZE}-byte hash")
        proof.append(h)
    return int(size), proof, note


class Witness:
    """The witness's decisions and its durable state, apart from HTTP (one lock around both)."""

    def __init__(
        self,
        cosigner: Cosigner,
        logs: Mapping[str, NoteVerifier],
        state_dir: Path | str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cosigner = cosigner
        self.logs = dict(logs)
        self.state_dir = Path(state_dir)
        self._clock = clock
        self._lock = threading.Lock()
        self._guard = Guard({})  # the state is public data: written byte for byte
        self._held = self._load()

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    def _load(self) -> dict[str, Held]:
        path = self.state_path
        if not path.exists():
            return {}
        try:
            obj = json.loads(path.read_bytes())
            if obj.get("format") != STATE_FORMAT:
                raise ValueError(f"its format is {obj.get('format')!r}, not {STATE_FORMAT!r}")
            out = {}
            for origin, entry in obj["logs"].items():
                cp = Checkpoint.parse(parse_note(entry["checkpoint"]).text)
                if cp.origin != origin or cp.size != entry["size"] or cp.root_b64 != entry["root"]:
                    raise ValueError(f"the entry of {origin!r} is not its checkpoint's")
                out[origin] = Held(cp.size, cp.root, entry["checkpoint"])
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WitnessStateError(f"{path}: not a witness state: {exc}") from None

    def held(self, origin: str) -> Held | None:
        with self._lock:
            return self._held.get(origin)

    def _save(self, held: dict[str, Held]) -> None:
        logs = {
            o: {"size": h.size, "root": base64.b64encode(h.root).decode(), "checkpoint": h.checkpoint}
            for o, h in held.items()
        }
        write_json_durable(self.state_path, {"format": STATE_FORMAT, "logs": logs}, guard=self._guard)

    def add_checkpoint(self, body: bytes) -> Answer:
        """One ``POST /add-checkpoint`` body, decided as tlog-witness v1.0.0 says (the module docstring)."""
        try:
            old, proof, signed = parse_request(body)
            note = parse_note(signed)
        except (ValueError, NoteError) as exc:
            return _text(400, f"malformed request: {exc}")
        origin = note.text.split("\n", 1)[0]
        key = self.logs.get(origin)
        if key is None:
            return _text(404, f"unknown origin {origin[:200]!r}")
        try:
            open_note(signed, [key])
        except (UnverifiedNote, BadSignature) as exc:
            return _text(403, f"no signature verifies with the key of {origin}: {exc}")
        except NoteError as exc:
            return _text(400, f"malformed checkpoint: {exc}")
        try:
            cp = Checkpoint.parse(note.text)
        except NoteError as exc:
            return _text(400, f"malformed checkpoint: {exc}")
        if old > cp.size:
            return _text(400, f"the old size {old} is above the checkpoint's size {cp.size}")
        with self._lock:  # the check and the write are one step (the spec's race)
            held = self._held.get(origin)
            held_size = held.size if held else 0
            if old != held_size:
                return Answer(409, f"{held_size}\n".encode(), SIZE_CONTENT_TYPE)
            held_root = held.root if held else EMPTY_ROOT
            if old == cp.size:
                if cp.root != held_root:
                    # tlog-witness v1.0.0: 409 Conflict (the spec's later head moved this to 422)
                    return _text(409, f"a checkpoint of size {cp.size} with another root than the one cosigned")
                if proof:
                    return _text(422, "a checkpoint of the size held takes an empty proof")
            elif old == 0:
                if proof:
                    return _text(422, "the proof from size 0 is empty")
            elif not verify_consistency(old, cp.size, proof, held_root, cp.root):
                return _text(422, f"the consistency proof from size {old} to {cp.size} does not verify")
            new = dict(self._held)
            new[origin] = Held(cp.size, cp.root, signed.decode("utf-8"))
            try:
                self._save(new)
            except OSError as exc:
                return _text(500, f"the witness could not save its state: {exc}")
            self._held = new
            cos = self.cosigner.cosign(note.text, int(self._clock()))
        return Answer(200, cos.line().encode(), "text/plain; charset=utf-8")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the spec asks witnesses to support
    server: _Server

    def _send(self, answer: Answer) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != "/add-checkpoint":
            self._send(_text(404, f"no such endpoint {self.path[:200]!r}"))
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(_text(411, "a request states its Content-Length"))
            return
        if int(length) > MAX_REQUEST_BYTES:
            self.close_connection = True
            self._send(_text(413, f"a request of at most {MAX_REQUEST_BYTES} bytes"))
            return
        body = self.rfile.read(int(length))
        self._send(self.server.witness.add_checkpoint(body))

    def do_GET(self) -> None:  # noqa: N802
        self._send(_text(405 if self.path == "/add-checkpoint" else 404, "this witness answers POST /add-checkpoint"))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    witness: Witness


class WitnessServer:
    """A ``Witness`` served over HTTP on ``host:port`` (0: a free port) in a thread of its own."""

    def __init__(self, witness: Witness, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.witness = witness
        self._server = _Server((host, port), _Handler)
        self._server.witness = witness
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    def start(self) -> WitnessServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="tlog-witness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()


# ------------------------------------------------------------------ the client


@dataclass(frozen=True)
class Cosigned:
    """A 200: the witness's signature lines as sent, and those parsed."""

    lines: str
    signatures: tuple[Signature, ...]


@dataclass(frozen=True)
class Conflict:
    """A 409 naming the size the witness holds: re-send with the proof from it."""

    size: int


@dataclass(frozen=True)
class Refused:
    """Any other outcome: the HTTP status (None when no answer came) and why."""

    status: int | None
    reason: str


AddResult = Cosigned | Conflict | Refused


def _body(old_size: int, proof: Sequence[bytes], signed_note: str | bytes) -> bytes:
    note = signed_note.encode("utf-8") if isinstance(signed_note, str) else signed_note
    lines = [f"old {old_size}\n".encode()] + [base64.b64encode(h) + b"\n" for h in proof]
    return b"".join(lines) + b"\n" + note


def add_checkpoint(
    url: str,
    old_size: int,
    proof: Sequence[bytes],
    signed_note: str | bytes,
    timeout: float,
    *,
    witness_key: CosignatureVerifier | None = None,
) -> AddResult:
    """POST ``signed_note`` with the consistency proof from ``old_size`` to ``url``'s add-checkpoint.

    ``url`` is the witness's submission prefix (``http://127.0.0.1:8321``).
    Never raises for what the witness or the network does: a 200 is
    ``Cosigned`` (with ``witness_key``: only if one of its lines is that
    key's valid cosignature of the checkpoint, else ``Refused``), a 409 with
    a size ``Conflict``, everything else ``Refused``."""
    request = urllib.request.Request(
        url.rstrip("/") + "/add-checkpoint",
        data=_body(old_size, proof, signed_note),
        method="POST",
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            status, ctype, data = reply.status, reply.headers.get("Content-Type", ""), reply.read()
    except urllib.error.HTTPError as exc:
        status, ctype = exc.code, exc.headers.get("Content-Type", "") if exc.headers else ""
        try:
            data = exc.read()
        except OSError:
            data = b""
    except (OSError, ValueError) as exc:  # URLError, a timeout, a refused connection, a bad URL
        return Refused(None, f"no answer from {url}: {getattr(exc, 'reason', None) or exc}")
    text = data.decode("utf-8", "replace")
    if status == 409 and ctype.split(";")[0].strip() == SIZE_CONTENT_TYPE:
        size = text.removesuffix("\n")
        if size.isdigit() and size.isascii():
            return Conflict(int(size))
        return Refused(409, f"a 409 whose size is not a number: {text[:200]!r}")
    if status != 200:
        return Refused(status, text.strip()[:500] or f"HTTP {status}")
    try:
        sigs = parse_cosignature_lines(data)
    except NoteError as exc:
        return Refused(200, f"the witness's answer is not signature lines: {exc}")
    if witness_key is not None:
        note = signed_note if isinstance(signed_note, str) else signed_note.decode("utf-8", "replace")
        body = parse_note(note).text
        for sig in sigs:
            try:
                verify_cosignature(witness_key, body, sig)
                break
            except (BadCosignature, NoteError):
                continue
        else:
            return Refused(
                200, f"no line of the answer is a valid cosignature by {witness_key.name}+{witness_key.key_id.hex()}"
            )
    return Cosigned(text, tuple(sigs))


def add_checkpoint_from(
    url: str,
    signed_note: str | bytes,
    old_size: int,
    proof_from: Callable[[int], Sequence[bytes]],
    timeout: float,
    *,
    witness_key: CosignatureVerifier | None = None,
) -> AddResult:
    """``add_checkpoint`` from ``old_size`` (the size the witness last cosigned, as far as
    the caller knows); on a 409 that names another size, once more from that size.

    ``proof_from(size)`` gives the consistency proof from ``size`` to the
    checkpoint's (empty from 0); a ValueError from it (a size the log never
    had) ends the exchange as ``Refused``."""
    try:
        result = add_checkpoint(url, old_size, proof_from(old_size), signed_note, timeout, witness_key=witness_key)
        if isinstance(result, Conflict) and result.size != old_size:
            result = add_checkpoint(
                url, result.size, proof_from(result.size), signed_note, timeout, witness_key=witness_key
            )
    except ValueError as exc:
        return Refused(None, f"no consistency proof from the size the witness holds: {exc}")
    return result


def open_witness(key_file: Path | str, state_dir: Path | str, logs: Sequence[str]) -> Witness:
    """The witness of ``confirmatory witness serve``: its cosigner key file, its state directory
    (made if missing), its ``ORIGIN=VERIFIER_KEY`` logs. Raises ValueError (a bad ``--log``, an
    origin given twice, none given), ``KeyFileRefused`` or ``WitnessStateError``, each naming the problem."""
    from confirmatory.records.keyfile import read_cosigner

    if not logs:
        raise ValueError("a witness needs at least one --log ORIGIN=VERIFIER_KEY")
    known: dict[str, NoteVerifier] = {}
    for option in logs:
        origin, key = parse_log(option)
        if origin in known:
            raise ValueError(f"--log names the origin {origin!r} twice")
        known[origin] = key
    cosigner = read_cosigner(key_file)
    state = Path(state_dir)
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WitnessStateError(f"{state}: cannot be made: {exc.strerror or exc}") from None
    if not state.is_dir():
        raise WitnessStateError(f"{state}: not a directory")
    return Witness(cosigner, known, state)
