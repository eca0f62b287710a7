"""C2SP tlog-cosignature v1.0.1: a witness's timestamped Ed25519 cosignature of a checkpoint.

Pure: imports nothing of the package but ``core.note``. A cosignature is a
note signature line ``— <witness name> base64(key id || timestamp || signature)``:

* key id = SHA-256(name || 0x0A || 0x04 || 32-byte Ed25519 public key)[:4];
* the 72 bytes after it are a u64 big-endian POSIX timestamp (at most
  2^63 - 1) and a 64-byte Ed25519 signature over the message
  ``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's whole
  note text (extension lines included, signature lines not).

A cosigner's keys are note keys of signature type 0x04: its verifier key
``<name>+<hex id>+base64(0x04 || public key)`` and its signer key
``PRIVATE+KEY+<name>+<hex id>+base64(0x04 || seed)`` (``confirmatory key
new NAME --out FILE --cosigner`` makes one; docs/EVIDENCE.md). A
``CosignatureVerifier`` is a ``core.note.Verifier``, so ``open_note`` with
witness keys verifies cosignatures among a note's other signatures.

The names other modules use: ``Cosigner``, ``CosignatureVerifier``,
``Cosignature``, ``cosigned_message``, ``verify_cosignature``,
``parse_cosignature_lines``, ``BadCosignature``, ``MAX_TIMESTAMP``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from confirmatory.core.note import (
    ED25519_KEY_SIZE,
    ED25519_SIG_SIZE,
    SIG_COSIGNATURE_V1,
    MalformedKey,
    MalformedNote,
    NoteError,
    Signature,
    check_name,
    check_text,
    decode_key,
    encode_key,
    key_id,
    public_key,
)

HEADER = "cosignature/v1"
MAX_TIMESTAMP = 2**63 - 1
TIMESTAMPED_SIZE = 8 + ED25519_SIG_SIZE  # struct timestamped_signature { u64 timestamp; u8 signature[64]; }


class BadCosignature(NoteError):
    """A cosignature line that is not one of this witness key, or that does not verify; the message says which."""


def _check_timestamp(timestamp: int) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise BadCosignature(f"a cosignature's timestamp is an integer from 0 to 2^63 - 1, not {timestamp!r}")
    return timestamp


def cosigned_message(body: str | bytes, timestamp: int) -> bytes:
    """What a cosignature signs: ``cosignature/v1\\ntime <ts>\\n`` and the checkpoint's note text."""
    return f"{HEADER}\ntime {_check_timestamp(timestamp)}\n".encode() + check_text(body)


@dataclass(frozen=True)
class Cosignature:
    """One cosignature: the witness's name and key id, the time it was made, the Ed25519 signature."""

    name: str
    key_id: bytes
    timestamp: int
    signature: bytes

    def as_signature(self) -> Signature:
        return Signature(self.name, self.key_id, struct.pack(">Q", self.timestamp) + self.signature)

    def line(self) -> str:
        """The note signature line, newline included."""
        return self.as_signature().line()

    @classmethod
    def from_signature(cls, sig: Signature) -> Cosignature:
        """The fields of a note signature that is a cosignature (72 bytes after the key id)."""
        if len(sig.signature) != TIMESTAMPED_SIZE:
            raise BadCosignature(
                f"a cosignature by {sig.name!r} holds {TIMESTAMPED_SIZE} bytes after its key id, this one {len(sig.signature)}"
            )
        (timestamp,) = struct.unpack(">Q", sig.signature[:8])
        if timestamp > MAX_TIMESTAMP:
            raise BadCosignature(f"the cosignature by {sig.name!r} has a timestamp above 2^63 - 1")
        return cls(sig.name, sig.key_id, timestamp, sig.signature[8:])


@dataclass(frozen=True)
class CosignatureVerifier:
    """A witness's verifier key (signature type 0x04)."""

    name: str
    public: bytes
    key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.public, bytes) or len(self.public) != ED25519_KEY_SIZE:
            raise MalformedKey(f"an Ed25519 public key is {ED25519_KEY_SIZE} bytes")
        object.__setattr__(self, "key_id", key_id(self.name, SIG_COSIGNATURE_V1, self.public))

    @classmethod
    def parse(cls, text: str) -> CosignatureVerifier:
        """From ``<name>+<hex id>+<base64(0x04 || public key)>``."""
        name, _, public = decode_key(
            text.strip() if isinstance(text, str) else text, private=False, sig_type=SIG_COSIGNATURE_V1
        )
        return cls(name, public)

    def __str__(self) -> str:
        return encode_key(self.name, SIG_COSIGNATURE_V1, self.public, self.public, private=False)

    def verify(self, text: bytes, signature: bytes) -> bool:
        """``core.note.Verifier``: whether ``signature`` (after the key id) is this witness's cosignature of ``text``."""
        if len(signature) != TIMESTAMPED_SIZE:
            return False
        (timestamp,) = struct.unpack(">Q", signature[:8])
        if timestamp > MAX_TIMESTAMP:
            return False
        message = f"{HEADER}\ntime {timestamp}\n".encode() + text
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature[8:], message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, repr=False)
class Cosigner:
    """A witness's signer key (signature type 0x04). Its repr hides the seed."""

    name: str
    seed: bytes
    key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.seed, bytes) or len(self.seed) != ED25519_KEY_SIZE:
            raise MalformedKey(f"an Ed25519 private key is a {ED25519_KEY_SIZE}-byte seed")
        object.__setattr__(self, "key_id", self.verifier.key_id)

    @classmethod
    def generate(cls, name: str) -> Cosigner:
        key = Ed25519PrivateKey.generate()
        return cls(check_name(name), key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    @classmethod
    def parse(cls, text: str) -> Cosigner:
        """From ``PRIVATE+KEY+<name>+<hex id>+<base64(0x04 || seed)>`` (one trailing newline allowed)."""
        name, _, seed = decode_key(
            text.removesuffix("\n") if isinstance(text, str) else text, private=True, sig_type=SIG_COSIGNATURE_V1
        )
        return cls(name, seed)

    def __repr__(self) -> str:
        return f"Cosigner({self.name!r}, key_id={self.key_id.hex()})"

    @property
    def verifier(self) -> CosignatureVerifier:
        return CosignatureVerifier(self.name, public_key(self.seed))

    def private_text(self) -> str:
        """The signer key as text (what a key file holds): secret."""
        return encode_key(self.name, SIG_COSIGNATURE_V1, self.seed, public_key(self.seed), private=True)

    def cosign(self, body: str | bytes, timestamp: int) -> Cosignature:
        """This witness's cosignature of a checkpoint's note text at ``timestamp`` (POSIX seconds)."""
        sig = Ed25519PrivateKey.from_private_bytes(self.seed).sign(cosigned_message(body, timestamp))
        return Cosignature(self.name, self.key_id, timestamp, sig)


def verify_cosignature(witness: CosignatureVerifier, body: str | bytes, sig: Signature | Cosignature) -> Cosignature:
    """``sig`` checked as ``witness``'s cosignature of the checkpoint text ``body``; its fields.

    Raises ``BadCosignature`` naming why: another name or key id (another
    key, or the same key of another signature type), a malformed timestamped
    signature, or a signature that does not verify."""
    cos = sig if isinstance(sig, Cosignature) else Cosignature.from_signature(sig)
    if cos.name != witness.name or cos.key_id != witness.key_id:
        raise BadCosignature(
            f"the cosignature is by {cos.name}+{cos.key_id.hex()}, not by the witness key {witness.name}+{witness.key_id.hex()}"
        )
    if not witness.verify(check_text(body), struct.pack(">Q", cos.timestamp) + cos.signature):
        raise BadCosignature(f"the cosignature by {cos.name}+{cos.key_id.hex()} at {cos.timestamp} does not verify")
    return cos


def parse_cosignature_lines(text: str | bytes) -> list[Signature]:
    """The signature lines of a witness's 200 answer (one or more, each ending in a newline)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedNote("a witness's answer is not valid UTF-8") from None
    if not text or not text.endswith("\n"):
        raise MalformedNote("a witness's answer is one or more signature lines, each ending in a newline")
    return [Signature.parse_line(line) for line in text[:-1].split("\n")]
