"""The local TSA fake (confirmatory.testing.tsa): its certificates, its configuration, its process."""

from __future__ import annotations

import socket
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from confirmatory.anchors.stamper import request_stamp
from confirmatory.testing.tsa import make_tsa, openssl_missing, start_tsa

pytestmark = pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing()))


def test_the_tsa_certificate_is_issued_by_its_ca_with_a_critical_timestamping_key_usage(tmp_path):
    files = make_tsa(tmp_path, name="Some TSA")
    certificate = x509.load_pem_x509_certificate(files.certificate.read_bytes())
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    certificate.verify_directly_issued_by(ca)  # raises if not
    eku = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert eku.critical and list(eku.value) == [ExtendedKeyUsageOID.TIME_STAMPING]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certificate.subject.rfc4514_string() == "CN=Some TSA"
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    config = files.config.read_text()
    # openssl would put the CA into the reply's SET with it, which rfc3161-client rejects
    assert "certs" not in config.replace("signer_cert", "")


def test_the_tsa_serves_on_loopback_from_its_own_process_and_is_gone_once_stopped(tmp_path):
    with start_tsa(tmp_path) as tsa:
        assert tsa.url == f"http://127.0.0.1:{tsa.port}/"
        assert tsa.proc.poll() is None
        assert request_stamp(tsa.url, b"x", 10.0)[:1] == b"\x30"  # a DER SEQUENCE
    assert tsa.proc.poll() is not None
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", tsa.port))
    tsa.stop()  # idempotent


def test_a_tsa_directory_is_made_once_and_kept_across_starts(tmp_path):
    with start_tsa(tmp_path):
        pass
    pem = (tmp_path / "tsa.pem").read_bytes()
    with start_tsa(tmp_path) as again:
        assert again.certificate.read_bytes() == pem
