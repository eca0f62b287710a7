"""C2SP tlog-checkpoint v1.0.0 and tlog-cosignature v1.0.1 (core.checkpoint, core.cosignature).

Vectors, copied here (tests never read the network): the example checkpoint
of C2SP tlog-checkpoint v1.0.0 and the example cosignature line of C2SP
tlog-cosignature v1.0.1 (https://github.com/C2SP/C2SP, tags
tlog-checkpoint/v1.0.0 and tlog-cosignature/v1.0.1). The spec publishes no
key for them: the body is parsed, and the cosignature line's key id and
timestamp read (the timestamp is the one of the spec's signed-message example).
"""

from __future__ import annotations

import base64
import struct

import pytest

from confirmatory.core.checkpoint import Checkpoint, MalformedCheckpoint, check_origin, open_checkpoint, sign_checkpoint
from confirmatory.core.cosignature import (
    BadCosignature,
    Cosignature,
    CosignatureVerifier,
    Cosigner,
    cosigned_message,
    parse_cosignature_lines,
    verify_cosignature,
)
from confirmatory.core.merkle import EMPTY_ROOT, leaf_hashes, root
from confirmatory.core.note import (
    MalformedKey,
    NoteSigner,
    NoteVerifier,
    Signature,
    UnverifiedNote,
    open_note,
    sign_note,
)

SPEC_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_COSIG = "\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"


def test_the_spec_example_checkpoint_parses_and_formats_back():
    cp = Checkpoint.parse(SPEC_BODY)
    assert (cp.origin, cp.size, cp.root_b64) == ("example.com/behind-the-sofa", 20852163, SPEC_BODY.split("\n")[2])
    assert cp.body() == SPEC_BODY


def test_the_spec_example_cosignature_line_holds_its_key_id_and_timestamp():
    cos = Cosignature.from_signature(Signature.parse_line(SPEC_COSIG))
    assert cos.name == "witness.example.com/w1" and cos.key_id.hex() == "8d66cf3f"
    assert cos.timestamp == 1679315147 and len(cos.signature) == 64
    assert cos.line() == SPEC_COSIG


def test_the_cosigned_message_is_the_spec_example():
    assert cosigned_message(SPEC_BODY, 1679315147) == ("cosignature/v1\ntime 1679315147\n" + SPEC_BODY).encode()


def test_a_checkpoint_of_a_log_round_trips_signed_and_verified():
    lines = [b'{"seq":0}', b'{"seq":1}', b'{"seq":2}']
    cp = Checkpoint("example.org/study-1/run-7", 3, root(leaf_hashes(lines)))
    signer = NoteSigner.generate("example.org/study-1")
    signed = sign_checkpoint(cp, signer)
    back, opened = open_checkpoint(signed, [NoteVerifier.parse(str(signer.verifier))])
    assert back == cp and opened.text == cp.body()
    with pytest.raises(UnverifiedNote):
        open_checkpoint(signed, [NoteSigner.generate("example.org/study-1").verifier])


def test_extension_lines_round_trip_and_are_cosigned():
    cp = Checkpoint("o.example/log", 0, EMPTY_ROOT, ("ext one", "ext two"))
    assert Checkpoint.parse(cp.body()) == cp
    w = Cosigner.generate("w.example/w1")
    cos = w.cosign(cp.body(), 1700000000)
    assert verify_cosignature(w.verifier, cp.body(), cos).timestamp == 1700000000
    with pytest.raises(BadCosignature):
        verify_cosignature(w.verifier, Checkpoint("o.example/log", 0, EMPTY_ROOT, ("ext one",)).body(), cos)


@pytest.mark.parametrize(
    "origin, problem", [("", "empty"), ("a b", "space"), ("a\u00a0b", "space"), ("a+b", "'\\+'"), ("a\x01b", "control")]
)
def test_an_origin_with_a_space_a_plus_or_nothing_is_refused(origin, problem):
    with pytest.raises(MalformedCheckpoint, match=problem):
        check_origin(origin)
    if origin and "\x01" not in origin:
        with pytest.raises(MalformedCheckpoint, match=problem):
            Checkpoint(origin, 1, bytes(32)).body()


@pytest.mark.parametrize(
    "body, problem",
    [
        ("o\n1\n", "three lines"),
        ("\n1\n" + base64.b64encode(bytes(32)).decode() + "\n", "origin"),
        ("o\n01\n" + base64.b64encode(bytes(32)).decode() + "\n", "leading zero"),
        ("o\n-1\n" + base64.b64encode(bytes(32)).decode() + "\n", "decimal"),
        ("o\n1 \n" + base64.b64encode(bytes(32)).decode() + "\n", "decimal"),
        ("o\n18446744073709551616\n" + base64.b64encode(bytes(32)).decode() + "\n", "2\\^64"),
        ("o\n1\n" + base64.b64encode(bytes(31)).decode() + "\n", "31 bytes"),
        ("o\n1\nnot base64!\n", "base64"),
        ("o\n1\n" + base64.b64encode(bytes(32)).decode() + "\n\n", "extension line 1"),
        ("o\n1\n" + base64.b64encode(bytes(32)).decode(), "newline"),
    ],
)
def test_a_malformed_checkpoint_body_is_refused_naming_the_line(body, problem):
    with pytest.raises(MalformedCheckpoint if problem != "newline" else ValueError, match=problem):
        Checkpoint.parse(body)


def test_a_cosignature_round_trips_and_is_verified_by_open_note_beside_the_log_signature():
    log = NoteSigner.generate("example.org/study-1")
    w = Cosigner.generate("witness.example.org/w1")
    wv = CosignatureVerifier.parse(str(w.verifier))
    assert wv.key_id == w.key_id and str(wv).split("+")[2].startswith("B")  # base64 of 0x04 || key
    body = Checkpoint("example.org/study-1/run-7", 5, bytes(range(32))).body()
    cos = w.cosign(body, 1765000000)
    signed = sign_note(body, log) + cos.line()
    assert [s.name for s in open_note(signed, [wv]).verified] == ["witness.example.org/w1"]
    assert verify_cosignature(wv, body, Signature.parse_line(cos.line())) == cos
    assert parse_cosignature_lines(cos.line()) == [cos.as_signature()]


def test_the_cosignature_key_id_uses_type_0x04_and_not_the_note_signature_type():
    w = Cosigner.generate("w.example/w1")
    import hashlib

    expect = hashlib.sha256(b"w.example/w1\n\x04" + w.verifier.public).digest()[:4]
    assert w.key_id == expect
    assert NoteVerifier("w.example/w1", w.verifier.public).key_id != expect


def test_a_forged_or_foreign_cosignature_is_refused_naming_why():
    w = Cosigner.generate("w.example/w1")
    body = Checkpoint("o.example/log", 2, bytes(32)).body()
    cos = w.cosign(body, 1765000000)
    other = Cosigner.generate("w.example/w1")
    with pytest.raises(BadCosignature, match="not by the witness key"):
        verify_cosignature(other.verifier, body, cos)
    forged = Cosignature(cos.name, cos.key_id, cos.timestamp + 1, cos.signature)  # the time moved
    with pytest.raises(BadCosignature, match="does not verify"):
        verify_cosignature(w.verifier, body, forged)
    with pytest.raises(BadCosignature, match="does not verify"):
        verify_cosignature(w.verifier, Checkpoint("o.example/log", 2, bytes(31) + b"\x01").body(), cos)
    with pytest.raises(BadCosignature, match="72 bytes"):
        verify_cosignature(w.verifier, body, Signature(cos.name, cos.key_id, cos.signature))


def test_a_timestamp_past_2_63_is_refused():
    w = Cosigner.generate("w.example/w1")
    with pytest.raises(BadCosignature, match="2\\^63"):
        w.cosign(SPEC_BODY, 2**63)
    sig = Signature("w.example/w1", w.key_id, struct.pack(">Q", 2**63) + bytes(64))
    with pytest.raises(BadCosignature, match="2\\^63"):
        Cosignature.from_signature(sig)


def test_a_cosigner_key_and_a_note_key_are_not_taken_for_one_another():
    w = Cosigner.generate("w.example/w1")
    s = NoteSigner.generate("s.example/s1")
    with pytest.raises(MalformedKey, match="type 0x04"):
        NoteVerifier.parse(str(w.verifier))
    with pytest.raises(MalformedKey, match="type 0x01"):
        CosignatureVerifier.parse(str(s.verifier))
    with pytest.raises(MalformedKey, match="type 0x04"):
        NoteSigner.parse(w.private_text())
    assert Cosigner.parse(w.private_text() + "\n").seed == w.seed
