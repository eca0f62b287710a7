"""A local RFC 3161 time-stamping authority for tests: ``openssl ts -reply`` behind HTTP on 127.0.0.1.

``make_tsa(directory)`` makes a TSA's files with ``cryptography``: a
self-signed CA, a TSA signing certificate issued under it (its
extendedKeyUsage ``timeStamping`` *critical*, as RFC 3161 section 2.3 asks
and rfc3161-client checks), their keys (mode 0600), a serial file and an
openssl ``ts`` configuration. The configuration leaves ``certs`` out: with
it openssl puts the CA into the reply's certificate SET too, and
rfc3161-client rejects such a reply (measured). With the request's certReq
set the reply carries the TSA's own certificate; the verifier checks it is
the pinned one.

``start_tsa(directory, ...)`` serves it from a real process,
``python -m confirmatory.testing.tsa --dir D [--port N]``, started in a
session of its own (``runtime.children``: the reaper stops it if the test
process dies). Each POST is answered by running ``openssl ts -reply`` on
its body, one at a time (the serial file is openssl's to update). What a
test can ask of it:

* ``http_status=500``: answer every POST with that HTTP status, no reply;
* ``reject=True``: a real non-granted reply, made by openssl: the TSA takes
  no SHA-256 imprint (its ``digests`` leave it out), so it answers
  ``rejection`` with ``badAlg``;
* ``hang=True``: read the request and never answer (a client's timeout);
* ``replay=True``: answer every request with the reply to the first one
  (a reply whose nonce, and imprint, are another request's).

The clock cannot be set: openssl stamps with the machine's time, and a
fixed or skewed genTime is not possible with it. A test that needs a
stamp dated before its anchor (a backdated anchor) moves the anchor's
``t`` instead, past the stamp's genTime.

``openssl_missing()`` names what to install when there is no openssl
(Debian: ``apt-get install openssl``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import IO, cast

from confirmatory.runtime import children

POLICY_OID = "1.3.6.1.4.1.99999.3161"  # a private-arc placeholder: the local TSA's policy
_MAX_QUERY = 1 << 16  # a time-stamp query is a few hundred bytes
_OPENSSL_TIMEOUT_S = 30.0
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class TsaFiles:
    """A local TSA's files: the PEMs a design pins (``certificate``, ``ca``)
    and what openssl signs with."""

    directory: Path
    certificate: Path  # the TSA's signing certificate, PEM
    ca: Path  # the self-signed CA it is issued under, PEM
    key: Path  # the signing key, PEM, mode 0600
    config: Path  # openssl's ts configuration


def openssl_missing() -> str | None:
    """None when ``openssl`` is on the PATH; else what to install (a test's skip reason)."""
    if shutil.which("openssl") is None:
        return "the local TSA runs `openssl ts -reply`: install openssl (Debian: apt-get install openssl)"
    return None


def make_tsa(directory: Path, *, name: str = "Local TSA", days: int = 30) -> TsaFiles:
    """Make a TSA's CA, signing certificate, key and openssl configuration
    in ``directory`` (made if absent); their certificates are valid from a
    day ago for ``days`` days."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=days)

    def subject(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(*, sign: bool, ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=sign,
            content_commitment=sign,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=ca,
            crl_sign=ca,
            encipher_only=False,
            decipher_only=False,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = subject(f"{name} CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage(sign=False, ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject(name))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(sign=True, ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TsaFiles(
        directory=directory,
        certificate=directory / "tsa.pem",
        ca=directory / "tsa-ca.pem",
        key=directory / "tsa.key",
        config=directory / "tsa.cnf",
    )
    files.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(files.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    (directory / "serial").write_text("01\n")
    files.config.write_text(_config(directory))
    return files


def _config(directory: Path) -> str:
    """openssl's ts configuration: ``[grant]`` signs SHA-256 imprints,
    ``[reject]`` takes only SHA-512 ones, so a SHA-256 request is refused.
    No ``certs``: rfc3161-client rejects a reply whose SET holds the CA."""
    common = f"""dir = {directory}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.pem
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = {POLICY_OID}
accuracy = secs:1
clock_precision_digits = 6
ordering = no
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""
    return (
        "[ tsa ]\ndefault_tsa = grant\n\n"
        f"[ grant ]\n{common}digests = sha256, sha384, sha512\n\n"
        f"[ reject ]\n{common}digests = sha512\n"
    )


class _Server(HTTPServer):
    # One request at a time: openssl reads and writes the serial file.
    def __init__(self, port: int, files: TsaFiles, args: argparse.Namespace) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.files = files
        self.args = args
        self.first_reply: bytes | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet: a test reads its own output
        pass

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= _MAX_QUERY:
            self._answer(400, b"a time-stamp query is 1 to 65536 bytes\n", "text/plain")
            return
        query = self.rfile.read(length)
        args = self.server.args
        if args.hang:
            while True:  # never answers; the test stops the process
                time.sleep(3600)
        if args.http_status != 200:
            self._answer(args.http_status, b"the local TSA was told to fail\n", "text/plain")
            return
        if args.replay and self.server.first_reply is not None:
            self._answer(200, self.server.first_reply, "application/timestamp-reply")
            return
        reply = self._openssl_reply(query, "reject" if args.reject else "grant")
        if reply is None:
            self._answer(500, b"openssl ts -reply failed\n", "text/plain")
            return
        if self.server.first_reply is None:
            self.server.first_reply = reply
        self._answer(200, reply, "application/timestamp-reply")

    def _openssl_reply(self, query: bytes, section: str) -> bytes | None:
        files = self.server.files
        with tempfile.TemporaryDirectory(dir=files.directory) as scratch:
            q, r = Path(scratch) / "query.tsq", Path(scratch) / "reply.tsr"
            q.write_bytes(query)
            argv = ["openssl", "ts", "-reply", "-config", str(files.config), "-section", section]
            argv += ["-queryfile", str(q), "-out", str(r)]
            done = subprocess.run(argv, capture_output=True, timeout=_OPENSSL_TIMEOUT_S, check=False)
            if done.returncode != 0 or not r.exists():
                sys.stderr.write(done.stderr.decode(errors="replace"))
                return None
            return r.read_bytes()


def _files_in(directory: Path) -> TsaFiles:
    directory = Path(directory).resolve()
    return TsaFiles(
        directory, directory / "tsa.pem", directory / "tsa-ca.pem", directory / "tsa.key", directory / "tsa.cnf"
    )


class LocalTsa:
    """A local TSA's serving process: ``url`` to post to, ``files`` (the
    PEMs a design pins: ``certificate``, ``ca``). ``stop()`` ends it
    (idempotent); a ``with`` block stops it at its end."""

    def __init__(self, proc: subprocess.Popen[bytes], files: TsaFiles, port: int) -> None:
        self.proc = proc
        self.files = files
        self.port = port
        self.url = f"http://127.0.0.1:{port}/"

    @property
    def certificate(self) -> Path:
        return self.files.certificate

    @property
    def ca(self) -> Path:
        return self.files.ca

    def stop(self) -> None:
        children.kill_group(self.proc, grace=1.0)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> LocalTsa:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_tsa(
    directory: Path,
    *,
    port: int = 0,
    name: str = "Local TSA",
    http_status: int = 200,
    reject: bool = False,
    hang: bool = False,
    replay: bool = False,
) -> LocalTsa:
    """Serve the TSA of ``directory`` (made with ``make_tsa(directory,
    name=name)`` when it holds none yet) from a process of its own on
    127.0.0.1 (``port`` 0: a free one); returns once it listens."""
    files = _files_in(directory)
    if not files.config.exists():
        files = make_tsa(directory, name=name)
    argv = [sys.executable, "-m", "confirmatory.testing.tsa", "--dir", str(files.directory), "--port", str(port)]
    argv += ["--http-status", str(http_status)]
    argv += [flag for flag, on in (("--reject", reject), ("--hang", hang), ("--replay", replay)) if on]
    proc = children.start(argv, cwd=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = _first_line(cast(IO[bytes], proc.stdout), _START_TIMEOUT_S)
        prefix = b"listening on 127.0.0.1 port "
        if not line.startswith(prefix):
            proc.wait(timeout=5)
            said = cast(IO[bytes], proc.stderr).read().decode(errors="replace")
            raise RuntimeError(f"the local TSA did not start: {line!r} {said}")
    except BaseException:
        children.kill_group(proc, grace=1.0)
        raise
    return LocalTsa(proc, files, int(line[len(prefix) :]))


def _first_line(pipe: IO[bytes], timeout: float) -> bytes:
    """The first line the process prints, waited for at most ``timeout`` s."""
    with selectors.DefaultSelector() as sel:
        sel.register(pipe, selectors.EVENT_READ)
        if not sel.select(timeout):
            return b"(nothing within the start timeout)"
    return pipe.readline().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m confirmatory.testing.tsa", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the TSA's files (made by make_tsa if absent)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--http-status", type=int, default=200, help="answer every POST with this status")
    parser.add_argument("--reject", action="store_true", help="answer with openssl's non-granted reply")
    parser.add_argument("--hang", action="store_true", help="never answer")
    parser.add_argument("--replay", action="store_true", help="answer with the reply to the first request")
    args = parser.parse_args(argv)
    files = _files_in(args.dir)
    if not files.config.exists():
        files = make_tsa(args.dir)
    server = _Server(args.port, files, args)
    print(f"listening on 127.0.0.1 port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
