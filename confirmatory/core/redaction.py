"""Keeping secrets out of everything the runner writes.

Owns the one rule for what counts as a secret and the one way to remove it:
a value of any environment variable whose *name* looks secret (API keys,
tokens, passwords...), plus token shapes that are secret wherever they come
from (``sk-...`` keys, ``Bearer ...`` headers). Run records are published, so
redaction errs on the side of removing too much.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
_NOT_SECRET = re.compile(r"TIKTOKEN|TOKENIZER|TOKENS")
# Shorter values ("1", "true", "dev") would redact half of every text and
# protect nothing: a real key is never that short.
MIN_SECRET_LEN = 6
# Header containers whose values are credentials as often as not.
HEADER_KEYS = ("headers", "extra_headers", "default_headers")

_PATTERNS = (
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "[redacted:sk-key]"),
    (re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=\-]{6,}"), "Bearer [redacted]"),
    (re.compile(r"(?i)\b(Basic)\s+[A-Za-z0-9+/=]{8,}"), r"\1 [redacted]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[redacted:aws-key]"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"), "[redacted:github-token]"),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}"), "[redacted:slack-token]"),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), "[redacted:google-key]"),
)
# What each of _PATTERNS finds, said without the secret (a refusal names it).
_SHAPES = (
    "an API key (sk-…)",
    "a bearer token (Bearer …)",
    "a Basic authorization credential (Basic …)",
    "an AWS access key (AKIA…)",
    "a GitHub token (ghp_…)",
    "a Slack token (xox…)",
    "a Google API key (AIza…)",
)
# "Bearer bonds", "Basic allowance": prose matches the two header shapes.
# Where text is refused rather than redacted, a header credential must also
# look made, not written: a digit, a base64 or token sign, or a capital
# after a small letter (dXNlcjpwYXNz).
_HEADER_SHAPES = (1, 2)
_MADE = re.compile(r"[0-9+/=._~]|[a-z][A-Z]")


def is_secret_name(name: str) -> bool:
    """Whether a variable, option or parameter name suggests its value is secret."""
    upper = name.upper().replace("-", "_")
    # Token *counts* and tokenizers are not credentials: max_tokens must survive.
    upper = _NOT_SECRET.sub("", upper)
    return any(word in upper for word in SECRET_WORDS)


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """value -> variable name, for every secret-looking variable long enough to matter."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, value in env.items():
        if is_secret_name(name) and len(value) >= MIN_SECRET_LEN:
            found.setdefault(value, name)
    return found


def find_secrets(text: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """What in ``text`` ``redact`` would remove, said without the secret:
    "the value of the environment variable NAME" or a token's shape ("an API
    key (sk-…)"), once each, in that order. Stricter than ``redact``, for
    refusing text a person wrote (a design file): a variable's value counts
    only as a whole word (not inside a longer run of letters and digits, such
    as a sha256 digest), and a Bearer or Basic credential only if it looks
    made (``_MADE``)."""
    found: list[str] = []
    for value, name in sorted(secret_values(environ).items(), key=lambda kv: -len(kv[0])):
        before = r"(?<![A-Za-z0-9])" if value[0].isalnum() else ""
        after = r"(?![A-Za-z0-9])" if value[-1].isalnum() else ""
        if re.search(before + re.escape(value) + after, text):
            found.append(f"the value of the environment variable {name}")
    for i, ((pattern, _), shape) in enumerate(zip(_PATTERNS, _SHAPES, strict=True)):
        for match in pattern.finditer(text):
            if i in _HEADER_SHAPES and not _MADE.search(match.group(0).split(None, 1)[1]):
                continue
            found.append(shape)
            break
    return found


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret value replaced by ``[redacted:NAME]``."""
    # Longest first: one secret may contain another (a key and its prefix).
    for value, name in sorted(secret_values(environ).items(), key=lambda kv: -len(kv[0])):
        marker = f"[redacted:{name}]"
        # A value that is part of its own marker would survive in it; "***"
        # is shorter than any value we redact, so it cannot hold one.
        text = text.replace(value, "***" if value in marker else marker)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_argv(argv: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """A command line with secrets removed, including values of ``--api-key X`` / ``--token=X``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("[redacted]")
            hide_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            option, _, _value = arg.partition("=")
            if is_secret_name(option.lstrip("-")):
                out.append(f"{option}=[redacted]")
                continue
        elif arg.startswith("-") and is_secret_name(arg.lstrip("-")):
            hide_next = True
        out.append(redact(arg, environ))
    return out


def redact_obj(obj: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A JSON-like object with secret strings redacted and secret-named keys' values withheld."""
    if isinstance(obj, str):
        return redact(obj, environ)
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            key_text = redact(str(key), environ)
            if isinstance(key, str) and is_secret_name(key) and isinstance(value, str):
                out[key_text] = "[redacted]"
            else:
                out[key_text] = redact_obj(value, environ)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, environ) for v in obj]
    return obj
