"""C2SP signed-note v1.0.0 (confirmatory.core.note), against published vectors.

Vectors, copied here (tests never read the network):
* C2SP signed-note v1.0.0, section "Verifier keys / Example"
  (https://github.com/C2SP/C2SP/blob/signed-note/v1.0.0/signed-note.md):
  the key ``example.com/foo+530d903a+...`` and its note "This is an example message."
* golang.org/x/mod, sumdb/note/note_test.go (TestNewVerifier, TestNewSigner,
  TestSign, TestOpen; https://github.com/golang/mod): the PeterNeumann and
  EnochRoot keys, the signed quote, and its expected signature line.
"""

from __future__ import annotations

import pytest

from confirmatory.core.note import (
    BadSignature,
    MalformedKey,
    MalformedNote,
    NoteSigner,
    NoteVerifier,
    Signature,
    UnverifiedNote,
    key_id,
    open_note,
    parse_note,
    sign_note,
)

# C2SP signed-note v1.0.0, "Example"
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n"
    "\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)

# golang.org/x/mod sumdb/note/note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)


def test_the_c2sp_example_note_verifies_with_the_c2sp_example_key():
    key = NoteVerifier.parse(C2SP_VKEY)
    assert key.name == "example.com/foo" and key.key_id.hex() == "530d903a"
    assert str(key) == C2SP_VKEY
    opened = open_note(C2SP_NOTE, [key])
    assert opened.text == "This is an example message.\n"
    assert [s.name for s in opened.verified] == ["example.com/foo"] and opened.unverified == ()


def test_the_c2sp_example_with_one_changed_byte_of_text_does_not_verify():
    with pytest.raises(BadSignature, match="example.com/foo"):
        open_note(C2SP_NOTE.replace("example message", "example massage"), [NoteVerifier.parse(C2SP_VKEY)])


def test_the_go_signer_key_signs_the_go_quote_exactly_as_published():
    signer = NoteSigner.parse(PETER_SKEY)
    assert str(signer.verifier) == PETER_VKEY
    assert signer.private_text() == PETER_SKEY
    assert sign_note(GO_TEXT, signer) == GO_TEXT + "\n" + PETER_SIG
    assert PETER_SKEY not in repr(signer) and "AYEK" not in repr(signer)


def test_the_key_id_is_the_first_four_bytes_of_sha256_of_name_newline_type_and_key():
    key = NoteVerifier.parse(PETER_VKEY)
    assert key_id("PeterNeumann", 0x01, key.public).hex() == "c74f20a3"


def test_an_extra_signature_by_an_unknown_key_still_verifies():
    opened = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [NoteVerifier.parse(PETER_VKEY)])
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [s.name for s in opened.unverified] == ["EnochRoot"]
    both = open_note(
        GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [NoteVerifier.parse(PETER_VKEY), NoteVerifier.parse(ENOCH_VKEY)]
    )
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"]


def test_a_note_signed_by_no_known_key_is_refused():
    with pytest.raises(UnverifiedNote, match="PeterNeumann"):
        open_note(GO_TEXT + "\n" + PETER_SIG, [NoteVerifier.parse(ENOCH_VKEY)])
    with pytest.raises(UnverifiedNote):
        open_note(GO_TEXT + "\n" + PETER_SIG, [])


def test_a_bad_signature_by_a_known_key_refuses_the_note_even_beside_a_good_one():
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[64:]
    with pytest.raises(BadSignature, match="PeterNeumann\\+c74f20a3"):
        open_note(GO_TEXT + "\n" + bad, [NoteVerifier.parse(PETER_VKEY)])
    bad_enoch = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[64:]
    keys = [NoteVerifier.parse(PETER_VKEY), NoteVerifier.parse(ENOCH_VKEY)]
    with pytest.raises(BadSignature, match="EnochRoot"):
        open_note(GO_TEXT + "\n" + PETER_SIG + bad_enoch, keys)


def test_a_signature_sharing_only_the_name_of_a_known_key_is_ignored():
    other = NoteSigner.generate("PeterNeumann")  # same name, another key: another key id
    signed = sign_note(GO_TEXT, other, keep=[Signature.parse_line(PETER_SIG)])
    opened = open_note(signed, [NoteVerifier.parse(PETER_VKEY)])
    assert len(opened.verified) == 1 and len(opened.unverified) == 1


def test_generated_keys_round_trip_through_their_texts_and_sign_what_they_verify():
    signer = NoteSigner.generate("example.org/study-1")
    again = NoteSigner.parse(signer.private_text() + "\n")
    assert again.seed == signer.seed and str(again.verifier) == str(signer.verifier)
    verifier = NoteVerifier.parse(str(signer.verifier))
    text = "line one\n\nline three after an empty line\n"
    opened = open_note(sign_note(text, signer), [verifier])
    assert opened.text == text


@pytest.mark.parametrize(
    "vkey, problem",
    [
        ("", "part"),
        ("PeterNeumann+c74f20a3", "part"),
        ("Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "space"),
        ("+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "empty"),
        ("PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "hex"),
        ("PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "key id"),
        ("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T", "base64"),
        ("PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==", "base64"),
        ("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWAA==", "32 bytes"),
        ("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "type 0x65"),
    ],
)
def test_a_malformed_verifier_key_is_refused_naming_the_problem(vkey, problem):
    with pytest.raises(MalformedKey, match=problem):
        NoteVerifier.parse(vkey)


def test_every_mangling_of_the_go_keys_is_refused():
    for text, parse in ((PETER_VKEY, NoteVerifier.parse), (PETER_SKEY, NoteSigner.parse)):
        b = bytearray(text.encode())
        for i in range(len(b)):
            b[i] += 1
            with pytest.raises(MalformedKey):
                parse(b.decode("latin-1"))
            b[i] -= 1


def test_a_signer_key_error_never_shows_the_private_key():
    mangled = PETER_SKEY[:-2] + "!!"
    with pytest.raises(MalformedKey) as exc:
        NoteSigner.parse(mangled)
    assert "AYEKFALV" not in str(exc.value)


@pytest.mark.parametrize(
    "signed, problem",
    [
        (GO_TEXT, "blank line"),
        (GO_TEXT + "\n", "at least one signature"),
        (GO_TEXT + "\n" + PETER_SIG[:-1], "ends in a newline"),
        ("\x01" + GO_TEXT + "\n" + PETER_SIG, "control character 0x01"),
        (b"\xff" + (GO_TEXT + "\n" + PETER_SIG).encode(), "UTF-8"),
        ("\ud800" + GO_TEXT + "\n" + PETER_SIG, "surrogate"),
        (GO_TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "Peter+Neumann"), "'\\+'"),
        (GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n", "em dash"),
        (GO_TEXT + "\n" + "\u2014 PeterNeumann x08g!\n", "base64"),
        (GO_TEXT + "\n" + "\u2014 PeterNeumann AAAA\n", "at least one byte"),
        (GO_TEXT + "\n" + PETER_SIG * 101, "at most 100"),
    ],
)
def test_a_malformed_note_is_refused_naming_the_problem(signed, problem):
    with pytest.raises(MalformedNote, match=problem):
        parse_note(signed)
    with pytest.raises(MalformedNote):
        open_note(signed, [NoteVerifier.parse(PETER_VKEY)])


def test_a_note_text_must_end_in_a_newline_and_hold_no_control_character():
    signer = NoteSigner.parse(PETER_SKEY)
    with pytest.raises(MalformedNote, match="ends in a newline"):
        sign_note("abc", signer)
    with pytest.raises(MalformedNote, match="0x09"):
        sign_note("a\tb\n", signer)


def test_two_known_keys_with_the_same_name_and_id_are_refused_as_ambiguous():
    a = NoteVerifier.parse(PETER_VKEY)
    b = NoteVerifier.__new__(NoteVerifier)
    object.__setattr__(b, "name", a.name)
    object.__setattr__(b, "public", bytes(32))
    object.__setattr__(b, "key_id", a.key_id)
    with pytest.raises(MalformedKey, match="share the name"):
        open_note(GO_TEXT + "\n" + PETER_SIG, [a, b])
