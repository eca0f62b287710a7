"""Asking a TSA for a stamp (confirmatory.anchors.stamper) over real HTTP on 127.0.0.1.

The TSAs are real processes (confirmatory.testing.tsa); each way a TSA can
fail to give a stamp is a typed StampFailed naming its Failure.
"""

from __future__ import annotations

import socket
import time

import pytest

from confirmatory.anchors.stamper import Failure, StampFailed, request_stamp
from confirmatory.core.timestamps import verify_stamp
from confirmatory.testing.tsa import make_tsa, openssl_missing, start_tsa

pytestmark = pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing()))

BODY = b"origin\n7\nroot=\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_tsa(tmp_path_factory.mktemp("tsa"))


def failed(url, message=BODY, timeout=10.0) -> StampFailed:
    with pytest.raises(StampFailed) as caught:
        request_stamp(url, message, timeout)
    return caught.value


def test_a_granted_reply_is_returned_as_the_tsr_bytes_and_verifies(files):
    with start_tsa(files.directory) as tsa:
        tsr = request_stamp(tsa.url, BODY, 10.0)
    stamp = verify_stamp(tsr, BODY, files.certificate.read_bytes(), files.ca.read_bytes())
    assert abs(stamp.gen_time_s - time.time()) < 30


def test_a_tsa_answering_500_is_an_http_failure_with_its_status(files):
    with start_tsa(files.directory, http_status=500) as tsa:
        error = failed(tsa.url)
    assert (error.failure, error.status) == (Failure.HTTP, 500)
    assert str(error) == f"{tsa.url}: http error: HTTP 500 Internal Server Error"


def test_a_tsa_that_refuses_the_connection_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    error = failed(f"http://127.0.0.1:{port}/")
    assert error.failure is Failure.UNREACHABLE and "refused" in error.detail.lower()


def test_a_reply_that_is_not_granted_is_named(files):
    with start_tsa(files.directory, reject=True) as tsa:
        error = failed(tsa.url)
    assert error.failure is Failure.NOT_GRANTED
    assert "status 2" in error.detail


def test_a_reply_to_another_request_is_a_mismatch_of_its_imprint_or_of_its_nonce(files):
    with start_tsa(files.directory, replay=True) as tsa:
        request_stamp(tsa.url, BODY, 10.0)  # the reply it will give every later request
        other = failed(tsa.url, b"another body\n")
        same = failed(tsa.url, BODY)  # the same message: its imprint matches, its nonce cannot
    assert other.failure is Failure.MISMATCH and other.detail.startswith("it stamps ")
    assert same.failure is Failure.MISMATCH and same.detail.startswith("its nonce is ")


def test_a_tsa_that_never_answers_is_a_timeout_within_the_timeout(files):
    with start_tsa(files.directory, hang=True) as tsa:
        started = time.monotonic()
        error = failed(tsa.url, timeout=0.5)
        took = time.monotonic() - started
    assert error.failure is Failure.TIMEOUT
    assert 0.5 <= took < 2.0


def test_a_listening_socket_that_never_accepts_is_a_timeout_too():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # the kernel completes the connection; nobody reads the request
        started = time.monotonic()
        error = failed(f"http://127.0.0.1:{s.getsockname()[1]}/", timeout=0.3)
        took = time.monotonic() - started
    assert error.failure is Failure.TIMEOUT and took < 1.5


def test_a_body_that_is_no_reply_is_malformed(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Html(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "13")
            self.end_headers()
            self.wfile.write(b"<html></html>")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Html)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        error = failed(f"http://127.0.0.1:{server.server_address[1]}/")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert error.failure is Failure.MALFORMED and error.detail.startswith("13 bytes")


def test_the_callers_mistakes_are_value_errors_not_tsa_failures():
    for url, message, timeout in [("ftp://127.0.0.1/", BODY, 1.0), ("http://127.0.0.1:1/", b"", 1.0)]:
        with pytest.raises(ValueError):
            request_stamp(url, message, timeout)
    with pytest.raises(ValueError):
        request_stamp("http://127.0.0.1:1/", BODY, 0)


def test_a_password_in_the_url_is_not_in_the_message():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    error = failed(f"http://user:hunter2@127.0.0.1:{port}/tsr")
    assert "hunter2" not in str(error) and str(error).startswith(f"http://127.0.0.1:{port}/tsr: unreachable")
