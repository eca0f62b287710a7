"""RFC 3161 time stamps checked offline: a reply's token against a pinned TSA.

Pure: a function of bytes, no clock, no file, no network; it imports
nothing of the package. ``rfc3161-client`` parses the reply and verifies
its CMS signature (through OpenSSL's PKCS7_verify: the signature, the
chain to the pinned CA at the token's genTime, the critical
``timeStamping`` extended key usage); ``cryptography`` reads the
certificates. Both are imported at the first call, not with the module:
``verify`` imports this and ``confirmatory --help`` must stay fast.

* ``verify_stamp(tsr, message, certificate_pem, ca_pem) -> Stamp``: the
  reply is granted, its imprint is SHA-256 of ``message``, it was signed
  by the pinned certificate, that certificate chains to the pinned CA, and
  the token verifies; else ``StampInvalid`` naming the first ``Reason``
  that fails. The checks before the library's own are there to name the
  reason; the library's verification is the one that accepts.
* ``in_window(stamp, after, before)``: whether the stamp may have been
  made inside a window of epoch seconds (what verify asks of an anchor's
  stamp: after the anchor's ``t``, before the next anchor's ``t`` plus the
  push slack).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

SHA256_OID = "2.16.840.1.101.3.4.2.1"
# rfc3161-client hands out genTime in whole seconds (a fraction the token
# holds is dropped: measured on 1.0.9 with openssl's clock_precision_digits
# = 6), so the stamp was made up to this much after the genTime it shows.
GEN_TIME_RESOLUTION_S = 1.0


class Reason(StrEnum):
    """Why a token was refused: the first check of ``verify_stamp`` that failed."""

    MALFORMED = "not a time-stamp reply"  # bytes that do not parse (or parse to something else)
    NOT_GRANTED = "not a granted reply"  # the TSA answered with a status other than granted
    OTHER_MESSAGE = "a stamp of another message"  # the imprint is not the message's SHA-256
    OTHER_TSA = "signed by another TSA"  # the signer is not the pinned certificate
    NOT_CHAINED = "does not chain to the CA"  # the pinned certificate is not issued under the pinned CA
    INVALID = "does not verify"  # rfc3161-client refused it: signature, validity at genTime, key usage
    BAD_PIN = "the pinned certificate or CA cannot be read"


class StampInvalid(Exception):
    """A token ``verify_stamp`` refused: ``reason`` says which check failed,
    ``detail`` what it saw."""

    def __init__(self, reason: Reason, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a verified token says.

    ``gen_time`` is the token's genTime, an aware UTC datetime in whole
    seconds (``GEN_TIME_RESOLUTION_S``), and ``gen_time_s`` the same as
    epoch seconds; ``accuracy_s`` is the accuracy the TSA states (0.0 when
    it states none). ``tsa`` is the signing certificate's subject (RFC 4514,
    the certificate that verified it, not the token's optional name
    field), ``serial`` the token's serial number, ``imprint_sha256`` the
    hex SHA-256 it stamps, ``policy`` the TSA's policy OID."""

    gen_time: datetime
    gen_time_s: float
    accuracy_s: float
    tsa: str
    serial: int
    imprint_sha256: str
    policy: str

    @property
    def earliest_s(self) -> float:
        """The earliest the stamp can have been made, by its own word."""
        return self.gen_time_s - self.accuracy_s

    @property
    def latest_s(self) -> float:
        """The latest the stamp can have been made, by its own word."""
        return self.gen_time_s + GEN_TIME_RESOLUTION_S + self.accuracy_s


def in_window(stamp: Stamp, after: float, before: float) -> bool:
    """Whether ``stamp`` may have been made after ``after`` and before
    ``before`` (epoch seconds): its span [``earliest_s``, ``latest_s``]
    (genTime widened by the stated accuracy and by the resolution of
    genTime) meets the window. An anchor dated after its stamp is one
    whose ``t`` is past the stamp's ``latest_s``."""
    return stamp.latest_s >= after and stamp.earliest_s <= before


def _load_pins(certificate_pem: bytes, ca_pem: bytes) -> tuple[Certificate, list[Certificate]]:
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
        cas = x509.load_pem_x509_certificates(ca_pem)
    except ValueError as exc:
        raise StampInvalid(Reason.BAD_PIN, str(exc)) from None
    return certificate, cas


def _issued_by(cert: Certificate, issuer: Certificate) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        cert.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError):  # not its issuer: another name, key or key type
        return False
    return True


def _chains(certificate: Certificate, cas: list[Certificate]) -> bool:
    """Whether ``certificate`` is issued, through certificates of ``cas``,
    under a self-signed one of them. (Only to name the reason: OpenSSL
    builds and checks the chain again in rfc3161-client's verification.)"""
    current = certificate
    for _ in range(len(cas)):
        issuer = next((ca for ca in cas if ca != current and _issued_by(current, ca)), None)
        if issuer is None:
            return False
        if issuer.subject == issuer.issuer and _issued_by(issuer, issuer):
            return True
        current = issuer
    return False


def verify_stamp(tsr: bytes, message: bytes, certificate_pem: bytes, ca_pem: bytes) -> Stamp:
    """Check the RFC 3161 reply ``tsr`` (a ``.tsr`` file's bytes) as a stamp
    of ``message`` by the TSA whose signing certificate is
    ``certificate_pem``, issued under ``ca_pem`` (the root, and any
    intermediates, PEM). Returns what the token says; raises
    ``StampInvalid`` naming the first check that fails."""
    from cryptography.x509 import ObjectIdentifier
    from rfc3161_client import PKIStatus, VerificationError, VerifierBuilder, decode_timestamp_response

    certificate, cas = _load_pins(certificate_pem, ca_pem)
    if not cas:
        raise StampInvalid(Reason.BAD_PIN, "no certificate in the CA file")
    try:
        response = decode_timestamp_response(tsr)
        status = response.status
        if status == PKIStatus.GRANTED:
            # The parser reads the token's parts as they are asked for: each may be malformed.
            info = response.tst_info
            imprint = info.message_imprint
            signed = response.signed_data
            version = signed.version
            signers = [(si.version, si.issuer, si.serial_number) for si in signed.signer_infos]
    except Exception as exc:  # noqa: BLE001 - bytes from outside: whatever the parser raises, it cannot read them
        # (measured with one byte changed: ValueError, and KeyError from a signer's name)
        raise StampInvalid(Reason.MALFORMED, f"{type(exc).__name__}: {exc}") from None
    if status != PKIStatus.GRANTED:
        said = "; ".join(response.status_string) or "no status text"
        raise StampInvalid(Reason.NOT_GRANTED, f"status {status} ({said})")
    # RFC 5652 5.1 and 5.3: SignedData is version 3 when its content is not
    # id-data (a TSTInfo is not), a SignerInfo naming its signer by issuer and
    # serial is version 1. Both fields are outside the signature: a changed
    # one is a reply that is not as the TSA sent it, though its token verifies.
    if version != 3 or any(v != 1 for v, _, _ in signers):
        versions = ", ".join(str(v) for v, _, _ in signers)
        raise StampInvalid(
            Reason.MALFORMED, f"SignedData version {version}, SignerInfo versions {versions}: not 3 and 1"
        )
    expected = hashlib.sha256(message).digest()
    if imprint.hash_algorithm != ObjectIdentifier(SHA256_OID):
        raise StampInvalid(
            Reason.OTHER_MESSAGE, f"its imprint is not SHA-256 but {imprint.hash_algorithm.dotted_string}"
        )
    if imprint.message != expected:
        raise StampInvalid(
            Reason.OTHER_MESSAGE, f"it stamps {imprint.message.hex()}, the message's SHA-256 is {expected.hex()}"
        )
    if len(signers) != 1:
        raise StampInvalid(Reason.INVALID, f"{len(signers)} signers, not one")
    _, issuer, serial = signers[0]
    if (issuer, serial) != (certificate.issuer, certificate.serial_number):
        raise StampInvalid(
            Reason.OTHER_TSA,
            f"signed by serial {serial:x} of {issuer.rfc4514_string()}, "
            f"not by the pinned {certificate.serial_number:x} of {certificate.issuer.rfc4514_string()}",
        )
    if not _chains(certificate, cas):
        raise StampInvalid(
            Reason.NOT_CHAINED,
            f"the pinned certificate of {certificate.subject.rfc4514_string()} is not issued under the pinned CA",
        )
    verifier = VerifierBuilder(tsa_certificate=certificate, roots=list(cas)).build()
    try:
        verifier.verify(response, expected)
    except VerificationError as exc:
        raise StampInvalid(Reason.INVALID, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - what else it raises on these bytes: a part it cannot read
        # (measured: cryptography's InvalidVersion for an embedded certificate
        # with one byte changed; ValueError for a token that does not parse)
        raise StampInvalid(Reason.MALFORMED, f"{type(exc).__name__}: {exc}") from None
    gen_time = info.gen_time.astimezone(UTC)
    accuracy = info.accuracy
    accuracy_s = 0.0
    if accuracy is not None:
        accuracy_s = accuracy.seconds + (accuracy.millis or 0) / 1e3 + (accuracy.micros or 0) / 1e6
    return Stamp(
        gen_time=gen_time,
        gen_time_s=gen_time.timestamp(),
        accuracy_s=accuracy_s,
        tsa=certificate.subject.rfc4514_string(),
        serial=info.serial_number,
        imprint_sha256=expected.hex(),
        policy=info.policy.dotted_string,
    )
