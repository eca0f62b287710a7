"""The C2SP tlog-witness v1.0.0 witness as a real process on 127.0.0.1, and its client.

``python -m confirmatory witness serve`` is spawned on a free port; every
request goes over HTTP through ``anchors.tlogwitness.add_checkpoint``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from confirmatory.anchors.tlogwitness import (
    SIZE_CONTENT_TYPE,
    Conflict,
    Cosigned,
    Refused,
    add_checkpoint,
    add_checkpoint_from,
)
from confirmatory.core.checkpoint import Checkpoint, sign_checkpoint
from confirmatory.core.cosignature import CosignatureVerifier, verify_cosignature
from confirmatory.core.merkle import consistency_proof, leaf_hashes, root
from confirmatory.core.note import NoteSigner, open_note
from confirmatory.records.keyfile import make_key_file, read_note_signer

ORIGIN = "example.org/study-1/run-7"
TIMEOUT = 10.0


class Log:
    """A log of numbered lines, its signer, and its checkpoints."""

    def __init__(self, signer: NoteSigner, origin: str = ORIGIN, prefix: str = "line") -> None:
        self.signer, self.origin, self.prefix = signer, origin, prefix
        self.leaves: list[bytes] = []

    def grow(self, n: int) -> Log:
        self.leaves += leaf_hashes(f"{self.prefix} {len(self.leaves) + k}".encode() for k in range(n))
        return self

    def checkpoint(self) -> str:
        return sign_checkpoint(Checkpoint(self.origin, len(self.leaves), root(self.leaves)), self.signer)

    def body(self) -> str:
        return Checkpoint(self.origin, len(self.leaves), root(self.leaves)).body()

    def proof(self, old: int) -> list[bytes]:
        if old == 0:
            return []
        if old > len(self.leaves):
            raise ValueError(f"the log never had {old} lines")
        return consistency_proof(self.leaves, old)


class WitnessProcess:
    def __init__(self, tmp: Path, logs: list[str]) -> None:
        self.key = tmp / "keys" / "witness.key"
        if not self.key.exists():
            make_key_file(self.key, "witness.example.org/w1", cosigner=True)
        self.state, self.logs = tmp / "state", logs
        self.proc: subprocess.Popen | None = None

    def start(self) -> WitnessProcess:
        args = [sys.executable, "-m", "confirmatory", "witness", "serve", "--key", str(self.key)]
        args += ["--state", str(self.state), "--port", "0"]
        for log in self.logs:
            args += ["--log", log]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()  # printed once it listens
        assert self.url.startswith("http://127.0.0.1:"), self.proc.stderr.read() if self.proc.stderr else ""
        self.vkey = CosignatureVerifier.parse(self.proc.stdout.readline())
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)


ORIGINS = [f"{ORIGIN}/{k}" for k in range(12)]  # one witness process; each test a log of its own


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("witness")
    make_key_file(tmp / "keys" / "study.key", "example.org/study-1")
    study = read_note_signer(tmp / "keys" / "study.key")
    w = WitnessProcess(tmp, [f"{o}={study.verifier}" for o in ORIGINS]).start()
    yield study, w, iter(ORIGINS)
    w.kill()


@pytest.fixture
def study(shared):
    return shared[0]


@pytest.fixture
def witness(shared):
    return shared[1]


@pytest.fixture
def origin(shared):
    return next(shared[2])


@pytest.fixture
def own_study(tmp_path):
    make_key_file(tmp_path / "keys" / "study.key", "example.org/study-1")
    return read_note_signer(tmp_path / "keys" / "study.key")


def test_a_first_checkpoint_is_cosigned_and_the_cosignature_verifies(witness, study, origin):
    log = Log(study, origin).grow(5)
    result = add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT, witness_key=witness.vkey)
    assert isinstance(result, Cosigned), result
    cos = verify_cosignature(witness.vkey, log.body(), result.signatures[0])
    assert abs(cos.timestamp - __import__("time").time()) < 60
    # the answer appended to the checkpoint is a note both keys verify (the spec's way to read it)
    opened = open_note(log.checkpoint() + result.lines, [study.verifier, witness.vkey])
    assert {s.name for s in opened.verified} == {"example.org/study-1", "witness.example.org/w1"}


def test_a_checkpoint_that_extends_the_last_one_is_cosigned_from_its_size(witness, study, origin):
    log = Log(study, origin).grow(3)
    assert isinstance(add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT), Cosigned)
    log.grow(6)
    result = add_checkpoint(witness.url, 3, log.proof(3), log.checkpoint(), TIMEOUT, witness_key=witness.vkey)
    assert isinstance(result, Cosigned), result


def test_an_unknown_origin_is_404(witness):
    other = Log(NoteSigner.generate("example.org/other"), origin="example.org/other/run-1").grow(2)
    result = add_checkpoint(witness.url, 0, [], other.checkpoint(), TIMEOUT)
    assert isinstance(result, Refused) and result.status == 404, result


def test_a_checkpoint_no_known_key_signed_is_403_and_a_bad_signature_too(witness, study, origin):
    impostor = Log(NoteSigner.generate("example.org/study-1"), origin).grow(2)  # same name, another key
    result = add_checkpoint(witness.url, 0, [], impostor.checkpoint(), TIMEOUT)
    assert isinstance(result, Refused) and result.status == 403, result
    signed = Log(study, origin).grow(2).checkpoint()
    text, sig = signed.rsplit(" ", 1)
    tampered = text + " " + sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]
    result = add_checkpoint(witness.url, 0, [], tampered, TIMEOUT)
    assert isinstance(result, Refused) and result.status == 403, result


def test_an_old_size_above_the_checkpoint_size_is_400(witness, study, origin):
    log = Log(study, origin).grow(4)
    result = add_checkpoint(witness.url, 5, [], log.checkpoint(), TIMEOUT)
    assert isinstance(result, Refused) and result.status == 400, result


def test_a_stale_old_size_is_409_with_the_size_held_as_text_x_tlog_size(witness, study, origin):
    log = Log(study, origin).grow(4)
    assert isinstance(add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT), Cosigned)
    log.grow(3)
    assert add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT) == Conflict(4)
    body = f"old 2\n\n{log.checkpoint()}".encode()
    req = urllib.request.Request(witness.url + "/add-checkpoint", data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=TIMEOUT)
    assert exc.value.code == 409 and exc.value.headers["Content-Type"] == SIZE_CONTENT_TYPE
    assert exc.value.read() == b"4\n"
    # the client's re-send from the size the 409 names is cosigned
    result = add_checkpoint_from(witness.url, log.checkpoint(), 0, log.proof, TIMEOUT, witness_key=witness.vkey)
    assert isinstance(result, Cosigned), result


def test_a_checkpoint_that_does_not_extend_the_last_one_is_422(witness, study, origin):
    log = Log(study, origin).grow(4)
    assert isinstance(add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT), Cosigned)
    fork = Log(study, origin, prefix="rewritten").grow(7)  # same origin and key, other lines
    result = add_checkpoint(witness.url, 4, fork.proof(4), fork.checkpoint(), TIMEOUT)
    assert isinstance(result, Refused) and result.status == 422, result
    result = add_checkpoint(witness.url, 4, [], fork.checkpoint(), TIMEOUT)  # no proof at all
    assert isinstance(result, Refused) and result.status == 422, result
    # and the witness still holds 4: the honest extension is cosigned
    log.grow(3)
    assert isinstance(add_checkpoint(witness.url, 4, log.proof(4), log.checkpoint(), TIMEOUT), Cosigned)


def test_a_second_checkpoint_of_the_same_size_with_another_root_is_refused_409_as_v1_0_0_says(witness, study, origin):
    log = Log(study, origin).grow(4)
    assert isinstance(add_checkpoint(witness.url, 0, [], log.checkpoint(), TIMEOUT), Cosigned)
    fork = Log(study, origin, prefix="rewritten").grow(4)
    result = add_checkpoint(witness.url, 4, [], fork.checkpoint(), TIMEOUT)
    # tlog-witness v1.0.0: 409 Conflict (the later head of the spec says 422); no size body
    assert isinstance(result, Refused) and result.status == 409 and "another root" in result.reason, result
    # the same checkpoint again is cosigned again
    assert isinstance(add_checkpoint(witness.url, 4, [], log.checkpoint(), TIMEOUT), Cosigned)


def test_a_malformed_request_is_400(witness, study, origin):
    signed = Log(study, origin).grow(1).checkpoint()
    for body in (
        b"old x\n\n" + signed.encode(),
        b"old 01\n\n" + signed.encode(),
        b"old 0\nnot-a-hash\n\n" + signed.encode(),
    ):
        req = urllib.request.Request(witness.url + "/add-checkpoint", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=TIMEOUT)
        assert exc.value.code == 400, body


def test_a_witness_killed_and_started_again_keeps_its_state(tmp_path, own_study):
    study = own_study
    w = WitnessProcess(tmp_path, [f"{ORIGIN}={study.verifier}"]).start()
    try:
        log = Log(study).grow(6)
        assert isinstance(add_checkpoint(w.url, 0, [], log.checkpoint(), TIMEOUT), Cosigned)
        w.kill(signal.SIGKILL)  # no chance to write anything at exit: the state was on disk before the 200
        state = json.loads((tmp_path / "state" / "witness-state.json").read_text())
        assert state["logs"][ORIGIN]["size"] == 6
        w.start()
        log.grow(2)
        assert add_checkpoint(w.url, 0, [], log.checkpoint(), TIMEOUT) == Conflict(6)
        assert isinstance(add_checkpoint(w.url, 6, log.proof(6), log.checkpoint(), TIMEOUT), Cosigned)
        w.kill(signal.SIGTERM)
        assert w.proc is not None and w.proc.returncode == 0
    finally:
        w.kill()


def test_the_client_returns_a_typed_refusal_when_no_witness_answers(study):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = add_checkpoint(f"http://127.0.0.1:{port}", 0, [], Log(study).grow(1).checkpoint(), 2.0)
    assert isinstance(result, Refused) and result.status is None and "no answer" in result.reason


def test_witness_serve_refuses_a_study_key_as_its_own_and_a_bad_log_option(tmp_path, own_study):
    study = own_study
    base = [sys.executable, "-m", "confirmatory", "witness", "serve", "--state", str(tmp_path / "st"), "--port", "0"]
    r = subprocess.run(
        base + ["--key", str(tmp_path / "keys" / "study.key"), "--log", f"{ORIGIN}={study.verifier}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 3 and "not a witness (cosigner) key" in r.stderr, r.stderr
    make_key_file(tmp_path / "w.key", "w.example/w1", cosigner=True)
    r = subprocess.run(
        base + ["--key", str(tmp_path / "w.key"), "--log", f"bad origin={study.verifier}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 3 and "space" in r.stderr, r.stderr
