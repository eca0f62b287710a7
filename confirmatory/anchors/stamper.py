"""Asking a time-stamping authority for an RFC 3161 stamp: one HTTP POST, checked.

``request_stamp(url, message, timeout)`` builds the request with
``rfc3161-client`` (the imprint is SHA-256 of ``message``, a random nonce,
certReq set so the reply carries the TSA's certificate), posts it as
``application/timestamp-query`` with the standard library, and returns the
reply's bytes (what a ``.tsr`` file holds) once they are a granted reply to
*this* request: its imprint and nonce are the request's. Anything else is
``StampFailed`` naming its ``Failure``. rfc3161-client does no networking;
this is the one place that does.

It does not verify the signature: that is ``core.timestamps.verify_stamp``,
against the pinned certificate and CA, which the caller may run on the
bytes at once and ``verify`` runs again offline.

``timeout`` is the socket's: no wait for the connection or for a byte of
the answer is longer. The body is also read against a deadline of
``timeout`` from the start, looked at between reads, so a server that
trickles its reply is cut off too; one that trickles its headers can hold
the call for a few times ``timeout`` at most.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from enum import StrEnum

MAX_REPLY_BYTES = 1 << 20  # a reply is a few KiB: a certificate chain, a signature
_CHUNK = 1 << 14


class Failure(StrEnum):
    """Why a TSA gave no stamp."""

    UNREACHABLE = "unreachable"  # no connection: refused, reset, no such host
    TIMEOUT = "timeout"  # no whole answer within the timeout
    HTTP = "http error"  # an HTTP status other than 200
    MALFORMED = "malformed reply"  # the body is no time-stamp reply (or is too long to be one)
    NOT_GRANTED = "not granted"  # the TSA answered with a status other than granted
    MISMATCH = "reply to another request"  # its imprint or its nonce is not the request's


class StampFailed(Exception):
    """A TSA that gave no stamp: ``failure`` says how, ``detail`` what was
    seen, ``status`` the HTTP status when there was one."""

    def __init__(self, url: str, failure: Failure, detail: str, status: int | None = None):
        super().__init__(f"{_shown(url)}: {failure}: {detail}")
        self.url = url
        self.failure = failure
        self.detail = detail
        self.status = status


def _shown(url: str) -> str:
    """The URL without any user:password in it (a message may reach a log)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _opener(url: str) -> urllib.request.OpenerDirector:
    """The environment's proxies, except for a loopback TSA (a test's, or a
    local relay): ``http_proxy`` must not carry a request to 127.0.0.1 away."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def request_stamp(url: str, message: bytes, timeout: float) -> bytes:
    """A TSA's RFC 3161 reply stamping SHA-256 of ``message``, as bytes.

    Raises ``StampFailed`` when the TSA gives none within ``timeout``
    seconds: unreachable, timed out, an HTTP status other than 200, a body
    that is no reply, a status other than granted, or a reply whose
    imprint or nonce is not this request's. ``ValueError`` for a ``url``
    that is not http(s), an empty ``message`` or a ``timeout`` not above 0
    (the caller's mistakes, not the TSA's)."""
    from rfc3161_client import HashAlgorithm, PKIStatus, TimestampRequestBuilder, decode_timestamp_response

    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{_shown(url)}: a TSA is reached over http or https")
    if not message:
        raise ValueError("an empty message cannot be stamped")
    if not timeout > 0:
        raise ValueError(f"timeout {timeout!r}: must be above 0")
    request = (
        TimestampRequestBuilder()
        .data(message)
        .hash_algorithm(HashAlgorithm.SHA256)
        .nonce(nonce=True)
        .cert_request(cert_request=True)
        .build()
    )
    body = _post(url, request.as_bytes(), timeout)
    try:
        reply = decode_timestamp_response(body)
        status = reply.status
        if status == PKIStatus.GRANTED:
            info = reply.tst_info
            imprint, nonce = info.message_imprint, info.nonce
    except Exception as exc:  # noqa: BLE001 - a body from outside: whatever the parser raises, it is no reply
        raise StampFailed(url, Failure.MALFORMED, f"{len(body)} bytes: {type(exc).__name__}: {exc}") from None
    if status != PKIStatus.GRANTED:
        said = "; ".join(reply.status_string) or "no status text"
        raise StampFailed(url, Failure.NOT_GRANTED, f"status {status} ({said})")
    asked = request.message_imprint
    if (imprint.hash_algorithm, imprint.message) != (asked.hash_algorithm, asked.message):
        raise StampFailed(
            url, Failure.MISMATCH, f"it stamps {imprint.message.hex()}, the request {asked.message.hex()}"
        )
    if nonce != request.nonce:
        raise StampFailed(url, Failure.MISMATCH, f"its nonce is {nonce}, the request's {request.nonce}")
    return body


def _post(url: str, query: bytes, timeout: float) -> bytes:
    """POST ``query``; the body of a 200 answer, read within ``timeout``."""
    deadline = time.monotonic() + timeout
    post = urllib.request.Request(
        url, data=query, method="POST", headers={"Content-Type": "application/timestamp-query"}
    )
    try:
        with _opener(url).open(post, timeout=timeout) as answer:
            status = answer.status
            if status != 200:  # (urllib raises HTTPError for most; a 2xx other than 200 is no reply either)
                raise StampFailed(url, Failure.HTTP, f"HTTP {status} {answer.reason}", status)
            chunks: list[bytes] = []
            got = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StampFailed(url, Failure.TIMEOUT, f"no reply within {timeout} s")
                chunk = answer.read(_CHUNK)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                got += len(chunk)
                if got > MAX_REPLY_BYTES:
                    raise StampFailed(url, Failure.MALFORMED, f"a reply past {MAX_REPLY_BYTES} bytes")
    except StampFailed:
        raise
    except urllib.error.HTTPError as exc:
        exc.close()
        raise StampFailed(url, Failure.HTTP, f"HTTP {exc.code} {exc.reason}", exc.code) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError | socket.timeout):
            raise StampFailed(url, Failure.TIMEOUT, f"no reply within {timeout} s") from None
        raise StampFailed(url, Failure.UNREACHABLE, str(exc.reason)) from None
    except TimeoutError:
        raise StampFailed(url, Failure.TIMEOUT, f"no reply within {timeout} s") from None
    except (OSError, ValueError) as exc:  # a connection reset mid-reply, a bad chunked encoding (http.client)
        raise StampFailed(url, Failure.UNREACHABLE, f"{type(exc).__name__}: {exc}") from None
