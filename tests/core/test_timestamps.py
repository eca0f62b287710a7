"""RFC 3161 stamps checked offline (confirmatory.core.timestamps) on replies of real local TSAs.

Each TSA is a real process on 127.0.0.1 (confirmatory.testing.tsa: openssl
ts -reply behind HTTP); a second one, with a CA and key of its own, stands
for "another TSA". The planted fault "stamp imprint not checked"
(tests/mutants.py) makes test_a_stamp_of_another_message_is_refused_naming_it
fail.
"""

from __future__ import annotations

import hashlib
import time
import urllib.request
from datetime import UTC
from pathlib import Path

import pytest

from confirmatory.anchors.stamper import request_stamp
from confirmatory.core.timestamps import (
    GEN_TIME_RESOLUTION_S,
    Reason,
    Stamp,
    StampInvalid,
    in_window,
    verify_stamp,
)
from confirmatory.testing.tsa import openssl_missing, start_tsa

pytestmark = pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing()))

BODY = b"confirmatory/study-1/run-1\n3\nq1hV0zD8oW5mYc6dG3l7y5m3VfXx3Yl0cQ9o0kJ1xqM=\n"


@pytest.fixture(scope="module")
def tsas(tmp_path_factory):
    base = tmp_path_factory.mktemp("tsas")
    with start_tsa(base / "a", name="TSA A") as a, start_tsa(base / "b", name="TSA B") as b:
        yield a, b


@pytest.fixture(scope="module")
def stamped(tsas):
    """A reply of TSA A stamping BODY, and the time it was asked for."""
    asked = time.time()
    return request_stamp(tsas[0].url, BODY, 10.0), asked


def pins(tsa, ca_of=None):
    return tsa.certificate.read_bytes(), (ca_of or tsa).ca.read_bytes()


def refused(tsr, message, certificate, ca) -> StampInvalid:
    with pytest.raises(StampInvalid) as caught:
        verify_stamp(tsr, message, certificate, ca)
    return caught.value


def test_a_stamp_round_trips_and_verifies_with_its_gen_time_close_to_now(tsas, stamped):
    tsr, asked = stamped
    stamp = verify_stamp(tsr, BODY, *pins(tsas[0]))
    assert stamp.gen_time.tzinfo is not None and stamp.gen_time.utcoffset() == UTC.utcoffset(None)
    assert stamp.gen_time_s == stamp.gen_time.timestamp()
    # genTime comes in whole seconds: the stamp was made at most one second after it.
    assert asked - GEN_TIME_RESOLUTION_S <= stamp.gen_time_s <= time.time()
    assert stamp.tsa == "CN=TSA A"
    assert stamp.imprint_sha256 == hashlib.sha256(BODY).hexdigest()
    assert stamp.accuracy_s == 1.0 and stamp.serial > 0
    assert in_window(stamp, asked, time.time())


def test_a_stamp_of_another_message_is_refused_naming_it(tsas, stamped):
    error = refused(stamped[0], BODY.replace(b"\n3\n", b"\n4\n"), *pins(tsas[0]))
    assert error.reason is Reason.OTHER_MESSAGE
    assert str(error).startswith("a stamp of another message: it stamps ")


def test_a_stamp_checked_against_another_tsas_certificate_is_signed_by_another_tsa(tsas, stamped):
    error = refused(stamped[0], BODY, *pins(tsas[1]))
    assert error.reason is Reason.OTHER_TSA, error
    # The other way round: TSA B's stamp against TSA A's pins.
    error = refused(request_stamp(tsas[1].url, BODY, 10.0), BODY, *pins(tsas[0]))
    assert error.reason is Reason.OTHER_TSA, error


def test_a_pinned_certificate_that_is_not_under_the_pinned_ca_is_refused(tsas, stamped):
    error = refused(stamped[0], BODY, *pins(tsas[0], ca_of=tsas[1]))
    assert error.reason is Reason.NOT_CHAINED, error
    assert "CN=TSA A" in str(error)


def test_a_reply_that_is_not_granted_is_refused(tmp_path, tsas):
    from rfc3161_client import HashAlgorithm, TimestampRequestBuilder

    query = TimestampRequestBuilder().data(BODY).hash_algorithm(HashAlgorithm.SHA256).build().as_bytes()
    with start_tsa(tsas[0].files.directory, reject=True) as rejecting:
        post = urllib.request.Request(
            rejecting.url, data=query, headers={"Content-Type": "application/timestamp-query"}
        )
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(post, timeout=10) as answer:
            tsr = answer.read()
    error = refused(tsr, BODY, *pins(tsas[0]))
    assert error.reason is Reason.NOT_GRANTED
    assert "status 2" in str(error)


@pytest.mark.parametrize(
    "mangle",
    [lambda b: b"", lambda b: b[:-1], lambda b: b + b"\x00", lambda b: b"not a reply at all"],
    ids=["empty", "cut short", "a byte past its end", "text"],
)
def test_bytes_that_are_no_reply_are_malformed(tsas, stamped, mangle):
    assert refused(mangle(stamped[0]), BODY, *pins(tsas[0])).reason is Reason.MALFORMED


def test_a_pin_that_cannot_be_read_is_named(tsas, stamped):
    certificate, ca = pins(tsas[0])
    assert refused(stamped[0], BODY, b"garbage", ca).reason is Reason.BAD_PIN
    assert refused(stamped[0], BODY, certificate, b"").reason is Reason.BAD_PIN


def test_a_byte_changed_in_the_gen_time_the_imprint_or_the_signature_is_refused(tsas, stamped):
    tsr = stamped[0]
    certificate, ca = pins(tsas[0])
    stamp = verify_stamp(tsr, BODY, certificate, ca)
    gen_time = stamp.gen_time.strftime("%Y%m%d%H%M%S").encode()
    imprint = bytes.fromhex(stamp.imprint_sha256)
    for at in (tsr.index(gen_time) + len(gen_time) - 1, tsr.index(imprint) + 5, len(tsr) - 3):
        changed = bytearray(tsr)
        changed[at] ^= 0x01
        assert refused(bytes(changed), BODY, certificate, ca).reason in (Reason.INVALID, Reason.OTHER_MESSAGE), at


@pytest.mark.slow
def test_every_byte_changed_is_refused_or_says_exactly_what_the_reply_said(tsas, stamped):
    """Each of the reply's bytes flipped in turn. The signed parts (the
    TSTInfo, the signed attributes, the signature value) are refused; what
    is accepted is a byte outside the signature (measured: the SignerInfo's
    signatureAlgorithm OID, which OpenSSL takes from the key instead), and
    it must say the same as the reply did."""
    tsr = stamped[0]
    certificate, ca = pins(tsas[0])
    original = verify_stamp(tsr, BODY, certificate, ca)
    accepted = []
    for i in range(len(tsr)):
        changed = bytearray(tsr)
        changed[i] ^= 0x01
        try:
            stamp = verify_stamp(bytes(changed), BODY, certificate, ca)
        except StampInvalid:
            continue
        assert stamp == original, i
        accepted.append(i)
    # ecdsa-with-SHA256 (1.2.840.10045.4.3.2), DER: the last one in the reply
    # is its SignerInfo's signatureAlgorithm (the embedded certificate's come first).
    oid = bytes.fromhex("06082a8648ce3d040302")
    at = tsr.rindex(oid) + 2
    assert accepted and set(accepted) <= set(range(at, at + 8)), accepted


def stamp_at(gen_time_s: float, accuracy_s: float = 0.0) -> Stamp:
    from datetime import datetime

    return Stamp(
        gen_time=datetime.fromtimestamp(gen_time_s, UTC),
        gen_time_s=gen_time_s,
        accuracy_s=accuracy_s,
        tsa="CN=x",
        serial=1,
        imprint_sha256="00" * 32,
        policy="1.2.3",
    )


def test_in_window_gives_a_stamp_its_resolution_and_accuracy_and_no_more():
    s = stamp_at(1000.0)
    assert in_window(s, 1000.5, 2000.0)  # made up to one second after its whole-second genTime
    assert in_window(s, 1001.0, 2000.0)
    assert not in_window(s, 1001.01, 2000.0)  # an anchor dated after its stamp
    assert in_window(s, 0.0, 1000.0)
    assert not in_window(s, 0.0, 999.99)  # a stamp made after the window closed
    wide = stamp_at(1000.0, accuracy_s=2.0)
    assert in_window(wide, 1002.9, 2000.0) and not in_window(wide, 1003.1, 2000.0)
    assert in_window(wide, 0.0, 998.0) and not in_window(wide, 0.0, 997.9)


SIGSTAGE = Path(__file__).resolve().parent.parent / "data" / "rfc3161" / "sigstage"


def sigstage_pins() -> tuple[bytes, bytes]:
    """ts_chain.pem split: the TSA's certificate, then the root (its README)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    chain = x509.load_pem_x509_certificates((SIGSTAGE / "ts_chain.pem").read_bytes())
    return chain[0].public_bytes(Encoding.PEM), b"".join(c.public_bytes(Encoding.PEM) for c in chain[1:])


@pytest.mark.parametrize("reply", ["response-sha256.tsr", "response-no-embedded-cert.tsr"])
def test_the_published_sigstage_stamps_of_hello_verify(reply):
    """Vectors of sigstore's staging TSA, from rfc3161-client's own tests
    (tests/data/rfc3161/sigstage/README.md names the source)."""
    stamp = verify_stamp((SIGSTAGE / reply).read_bytes(), b"hello", *sigstage_pins())
    assert stamp.tsa == "CN=sigstore-tsa,O=sigstore.dev"
    assert stamp.imprint_sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert stamp.policy == "1.3.6.1.4.1.57264.2" and stamp.gen_time.year == 2025


def test_the_published_sigstage_stamps_that_must_fail_fail_with_their_reason():
    pins_ = sigstage_pins()
    cases = [
        ("response-invalid-signature.tsr", b"hello", Reason.INVALID),
        ("response-sha512.tsr", b"hello", Reason.OTHER_MESSAGE),  # not a SHA-256 imprint
        ("response-sha256.tsr", b"hello!", Reason.OTHER_MESSAGE),
    ]
    for reply, message, reason in cases:
        assert refused((SIGSTAGE / reply).read_bytes(), message, *pins_).reason is reason, reply
