"""C2SP signed-note v1.0.0: Ed25519 keys in the note formats, signing, parsing and verifying notes.

Pure: imports nothing of the package (Ed25519 is the ``cryptography``
package's). docs/EVIDENCE.md says what each format is; the spec is
https://c2sp.org/signed-note@v1.0.0.

* A **note** is a UTF-8 text ending in a newline, a blank line, then one or
  more signature lines ``— <name> base64(key id || signature)``.
* A **verifier key** (vkey) is ``<name>+<hex key id>+base64(type || public key)``;
  a **signer key** (the private key file's text, the format of
  golang.org/x/mod/sumdb/note) is ``PRIVATE+KEY+<name>+<hex key id>+base64(type || seed)``.
* key id = SHA-256(name || 0x0A || type || public key)[:4]; type 0x01 is a
  note signature (this module), 0x04 a cosignature/v1 (``core.cosignature``).
* ``open_note`` checks a note against known keys: a signature by an unknown
  key is ignored, one by a known key that does not verify rejects the note
  (``BadSignature``), a note with no verified signature is rejected
  (``UnverifiedNote``). Every malformed input raises ``MalformedNote`` or
  ``MalformedKey``, naming the problem.

The names other modules use: ``NoteSigner``, ``NoteVerifier``,
``Signature``, ``Note``, ``OpenedNote``, ``Verifier`` (what ``open_note``
needs of a key), ``sign_note``, ``parse_note``, ``open_note``, ``key_id``,
``check_name``, the errors, ``SIG_ED25519`` and ``SIG_COSIGNATURE_V1``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

SIG_ED25519 = 0x01  # signed-note: an Ed25519 signature over the note text
SIG_COSIGNATURE_V1 = 0x04  # tlog-cosignature: a timestamped Ed25519 cosignature
ED25519_KEY_SIZE = 32
ED25519_SIG_SIZE = 64
MAX_SIGNATURES = 100  # the spec: verifiers MUST accept at least 16 (golang.org/x/mod stops at 100 too)
SIG_PREFIX = "\u2014 "  # em dash, space
PRIVATE_PREFIX = "PRIVATE+KEY+"


class NoteError(ValueError):
    """A note or a key that cannot be used; the message says why."""


class MalformedNote(NoteError):
    """The text is not a signed note (or a note text) of the spec."""


class MalformedKey(NoteError):
    """The text is not a key of the spec's formats (or not of the type asked for)."""


class UnverifiedNote(NoteError):
    """No signature of the note is by a known key."""


class BadSignature(NoteError):
    """A signature by a known key (its name and key id match) does not verify."""


def key_id(name: str, sig_type: int, public: bytes) -> bytes:
    """The 4-byte key id: SHA-256(name || 0x0A || type || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public).digest()[:4]


def check_name(name: str, what: str = "key name") -> str:
    """A key name of the spec: non-empty, no Unicode space, no ``+``, no control character."""
    if not isinstance(name, str) or not name:
        raise MalformedKey(f"the {what} is empty")
    if any(ch.isspace() for ch in name):
        raise MalformedKey(f"the {what} {name!r} holds a space")
    if "+" in name:
        raise MalformedKey(f"the {what} {name!r} holds a '+'")
    if any(ord(ch) < 0x20 for ch in name):
        raise MalformedKey(f"the {what} {name!r} holds a control character")
    return name


def _b64decode(text: str, what: str, error: type[NoteError]) -> bytes:
    """Standard base64 (RFC 4648 section 4), padded, nothing else in it."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise error(f"{what} is not standard base64: {text[:80]!r}") from None
    if base64.b64encode(raw).decode() != text:  # non-canonical padding bits
        raise error(f"{what} is not canonical base64: {text[:80]!r}")
    return raw


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def decode_key(text: str, *, private: bool, sig_type: int) -> tuple[str, bytes, bytes]:
    """The name, key id and key material (public key, or seed) of a key text of type ``sig_type``.

    The key id must be the one the name, the type and the public key give
    (golang.org/x/mod checks the same); a key of another type is refused,
    naming the type it is."""
    what = "signer key" if private else "verifier key"
    if not isinstance(text, str):
        raise MalformedKey(f"a {what} is text, not {type(text).__name__}")
    body = text
    if private:
        if not text.startswith(PRIVATE_PREFIX):
            raise MalformedKey(f"a {what} begins with {PRIVATE_PREFIX!r}")
        body = text[len(PRIVATE_PREFIX) :]
    parts = body.split("+", 2)  # (base64 may hold '+')
    shown = "" if private else f" {text[:80]!r}"  # a private key's text is never shown
    if len(parts) != 3:
        raise MalformedKey(f"a {what} is <name>+<hex key id>+<base64 key>; this{shown} has {len(parts)} part(s)")
    name, hex_id, b64 = parts
    check_name(name)
    if len(hex_id) != 8 or any(c not in "0123456789abcdef" for c in hex_id):
        raise MalformedKey(f"the key id of a {what} is 8 lowercase hex digits, not {hex_id!r}")
    try:
        raw = _b64decode(b64, f"the key of a {what}", MalformedKey)
    except MalformedKey:
        raise MalformedKey(f"the key of a {what} is not canonical standard base64") from None
    if not raw:
        raise MalformedKey(f"the key of a {what} is empty")
    if raw[0] != sig_type:
        raise MalformedKey(f"a {what} of signature type 0x{raw[0]:02x}; this one must be of type 0x{sig_type:02x}")
    material = raw[1:]
    if len(material) != ED25519_KEY_SIZE:
        raise MalformedKey(f"an Ed25519 {what} holds {ED25519_KEY_SIZE} bytes, this one {len(material)}")
    public = Ed25519PrivateKey.from_private_bytes(material).public_key() if private else None
    pub = material if public is None else public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    kid = bytes.fromhex(hex_id)
    if kid != key_id(name, sig_type, pub):
        raise MalformedKey(f"the key id {hex_id} of a {what} is not the one its name and key give")
    return name, kid, material


def encode_key(name: str, sig_type: int, material: bytes, public: bytes, *, private: bool) -> str:
    prefix = PRIVATE_PREFIX if private else ""
    return f"{prefix}{check_name(name)}+{key_id(name, sig_type, public).hex()}+{_b64(bytes([sig_type]) + material)}"


class Verifier(Protocol):
    """What ``open_note`` needs of a known key."""

    @property
    def name(self) -> str: ...
    @property
    def key_id(self) -> bytes: ...
    def verify(self, text: bytes, signature: bytes) -> bool: ...


@dataclass(frozen=True)
class NoteVerifier:
    """An Ed25519 note verifier key (type 0x01)."""

    name: str
    public: bytes
    key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.public, bytes) or len(self.public) != ED25519_KEY_SIZE:
            raise MalformedKey(f"an Ed25519 public key is {ED25519_KEY_SIZE} bytes")
        object.__setattr__(self, "key_id", key_id(self.name, SIG_ED25519, self.public))

    @classmethod
    def parse(cls, text: str) -> NoteVerifier:
        """From ``<name>+<hex id>+<base64(0x01 || public key)>``."""
        name, _, public = decode_key(
            text.strip() if isinstance(text, str) else text, private=False, sig_type=SIG_ED25519
        )
        return cls(name, public)

    def __str__(self) -> str:
        return encode_key(self.name, SIG_ED25519, self.public, self.public, private=False)

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (the bytes after the key id) is this key's over ``text``."""
        if len(signature) != ED25519_SIG_SIZE:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, repr=False)
class NoteSigner:
    """An Ed25519 note signer key (type 0x01): the private key file's content. Its repr hides the seed."""

    name: str
    seed: bytes
    key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.seed, bytes) or len(self.seed) != ED25519_KEY_SIZE:
            raise MalformedKey(f"an Ed25519 private key is a {ED25519_KEY_SIZE}-byte seed")
        object.__setattr__(self, "key_id", self.verifier.key_id)

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        key = Ed25519PrivateKey.generate()
        return cls(check_name(name), key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    @classmethod
    def parse(cls, text: str) -> NoteSigner:
        """From ``PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>`` (one trailing newline allowed)."""
        name, _, seed = decode_key(
            text.removesuffix("\n") if isinstance(text, str) else text, private=True, sig_type=SIG_ED25519
        )
        return cls(name, seed)

    def __repr__(self) -> str:
        return f"NoteSigner({self.name!r}, key_id={self.key_id.hex()})"

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, public_key(self.seed))

    def private_text(self) -> str:
        """The signer key as text (what a key file holds): secret."""
        return encode_key(self.name, SIG_ED25519, self.seed, public_key(self.seed), private=True)

    def sign(self, text: str | bytes) -> Signature:
        """This key's signature over a note text (which must be one: ``check_text``)."""
        data = check_text(text)
        sig = Ed25519PrivateKey.from_private_bytes(self.seed).sign(data)
        return Signature(self.name, self.key_id, sig)


def public_key(seed: bytes) -> bytes:
    """The Ed25519 public key of a 32-byte seed."""
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class Signature:
    """One signature line: the key's name, its 4-byte id, the signature bytes after the id."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        """``— <name> base64(key id || signature)`` and its newline."""
        return f"{SIG_PREFIX}{self.name} {_b64(self.key_id + self.signature)}\n"

    @classmethod
    def parse_line(cls, line: str) -> Signature:
        """One signature line, with or without its newline."""
        line = line.removesuffix("\n")
        if not line.startswith(SIG_PREFIX):
            raise MalformedNote(f"a signature line begins with an em dash and a space: {line[:80]!r}")
        name, sep, b64 = line[len(SIG_PREFIX) :].partition(" ")
        if not sep:
            raise MalformedNote(f"a signature line is '— <name> <base64>': {line[:80]!r}")
        try:
            check_name(name, "signature's key name")
        except MalformedKey as exc:
            raise MalformedNote(str(exc)) from None
        raw = _b64decode(b64, f"the signature of {name!r}", MalformedNote)
        if len(raw) < 5:
            raise MalformedNote(f"the signature of {name!r} is {len(raw)} bytes: a key id and at least one byte")
        return cls(name, raw[:4], raw[4:])


@dataclass(frozen=True)
class Note:
    """A parsed signed note: its text (with its final newline) and its signature lines in order."""

    text: str
    signatures: tuple[Signature, ...]

    def __str__(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)


@dataclass(frozen=True)
class OpenedNote:
    """A note that ``open_note`` verified: the signatures by known keys, and the others (unchecked)."""

    text: str
    verified: tuple[Signature, ...]
    unverified: tuple[Signature, ...]


def _check_chars(text: str, what: str) -> None:
    for i, ch in enumerate(text):
        if ord(ch) < 0x20 and ch != "\n":
            raise MalformedNote(f"{what} holds the control character 0x{ord(ch):02x} at character {i}")


def _as_text(data: str | bytes, what: str) -> str:
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedNote(f"{what} is not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(data, str):
        raise MalformedNote(f"{what} is text, not {type(data).__name__}")
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedNote(f"{what} is not valid UTF-8 (a lone surrogate at character {exc.start})") from None
    return data


def check_text(text: str | bytes) -> bytes:
    """A note text as its UTF-8 bytes: non-empty, ending in a newline, no control character but newline."""
    s = _as_text(text, "a note text")
    if not s.endswith("\n"):
        raise MalformedNote("a note text ends in a newline")
    _check_chars(s, "a note text")
    return s.encode("utf-8")


def sign_note(text: str | bytes, *signers: NoteSigner, keep: Iterable[Signature] = ()) -> str:
    """The signed note of ``text``: the text, a blank line, ``keep``'s lines, then each signer's."""
    if not signers and not keep:
        raise MalformedNote("a signed note has at least one signature")
    data = check_text(text)
    sigs = [*keep, *(s.sign(data) for s in signers)]
    return data.decode() + "\n" + "".join(s.line() for s in sigs)


def parse_note(signed: str | bytes) -> Note:
    """Split a signed note into its text and signature lines, checking the format (not the signatures)."""
    s = _as_text(signed, "a signed note")
    _check_chars(s, "a signed note")
    split = s.rfind("\n\n")
    if split < 0:
        raise MalformedNote("a signed note has a blank line between its text and its signatures; this one has none")
    text, block = s[: split + 1], s[split + 2 :]
    if not block:
        raise MalformedNote("a signed note has at least one signature line after its blank line")
    if not block.endswith("\n"):
        raise MalformedNote("a signed note's last signature line ends in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"a signed note of {len(lines)} signatures (at most {MAX_SIGNATURES} are read)")
    return Note(text, tuple(Signature.parse_line(line) for line in lines))


def open_note(signed: str | bytes, known: Iterable[Verifier]) -> OpenedNote:
    """Parse and verify a signed note against the ``known`` keys (C2SP signed-note "Signatures").

    A signature whose name and key id are not both a known key's is
    ignored (kept in ``unverified``); one that matches a known key must
    verify, else ``BadSignature``; no verified signature: ``UnverifiedNote``.
    Two known keys with the same name and id are refused (``MalformedKey``):
    which one signed would be ambiguous."""
    note = parse_note(signed)
    keys: dict[tuple[str, bytes], Verifier] = {}
    for k in known:
        ident = (k.name, k.key_id)
        if ident in keys and keys[ident] != k:
            raise MalformedKey(f"two known keys share the name {k.name!r} and key id {k.key_id.hex()}")
        keys[ident] = k
    data = note.text.encode("utf-8")
    verified: list[Signature] = []
    unverified: list[Signature] = []
    for sig in note.signatures:
        key = keys.get((sig.name, sig.key_id))
        if key is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if not key.verify(data, sig.signature):
            raise BadSignature(f"the signature of {sig.name}+{sig.key_id.hex()} does not verify")
        if sig not in verified:
            verified.append(sig)
    if not verified:
        names = ", ".join(f"{s.name}+{s.key_id.hex()}" for s in note.signatures)
        raise UnverifiedNote(f"no signature of the note is by a known key (it is signed by {names})")
    return OpenedNote(note.text, tuple(verified), tuple(unverified))
