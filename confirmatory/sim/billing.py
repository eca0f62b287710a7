"""The simulator's bill: cache reads and writes, and the invoice each vendor would send.

Pure where it can be: ``kinds_of`` reads a reply's usage in its own API's
fields and splits it into the price table's kinds by that vendor's billing
rule, and ``core.simulated.bill_nusd`` prices them. The invoice is built from
the usage the simulator sent, so it is what a client reading that usage by
the vendor's rule must arrive at.

Billing rules (docs/SIMULATOR.md "Billing"):
* OpenAI chat: ``prompt_tokens`` include ``prompt_tokens_details.cached_tokens``
  and ``completion_tokens`` include ``completion_tokens_details.reasoning_tokens``;
* Responses: the same, as ``input_tokens`` / ``input_tokens_details.cached_tokens``
  and ``output_tokens`` / ``output_tokens_details.reasoning_tokens``;
* Anthropic Messages: ``input_tokens``, ``cache_creation_input_tokens``,
  ``cache_read_input_tokens`` and ``output_tokens`` are disjoint (thinking is
  in ``output_tokens``, billed as output);
* Gemini: ``promptTokenCount`` includes ``cachedContentTokenCount``;
  ``candidatesTokenCount`` excludes ``thoughtsTokenCount``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confirmatory.core.simulated import PRICE_KINDS, SIM_PRICE_TABLE, bill_nusd

SHAPES = ("chat", "responses", "anthropic", "gemini")


def _n(obj: Any, *path: str) -> int:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, int) and not isinstance(obj, bool) else 0


def kinds_of(shape: str, usage: Mapping[str, Any]) -> dict[str, int]:
    """The tokens of one reply's ``usage`` (as its API sends it) by kind."""
    if shape in ("chat", "responses"):
        total_in, total_out = (
            ("prompt_tokens", "completion_tokens") if shape == "chat" else ("input_tokens", "output_tokens")
        )
        details_in, details_out = (
            ("prompt_tokens_details", "completion_tokens_details")
            if shape == "chat"
            else ("input_tokens_details", "output_tokens_details")
        )
        cached = _n(usage, details_in, "cached_tokens")
        reasoning = _n(usage, details_out, "reasoning_tokens")
        return {
            "input": _n(usage, total_in) - cached,
            "cached_input": cached,
            "cache_write": 0,
            "output": _n(usage, total_out) - reasoning,
            "reasoning": reasoning,
        }
    if shape == "anthropic":
        return {
            "input": _n(usage, "input_tokens"),
            "cached_input": _n(usage, "cache_read_input_tokens"),
            "cache_write": _n(usage, "cache_creation_input_tokens"),
            "output": _n(usage, "output_tokens"),
            "reasoning": 0,
        }
    if shape == "gemini":
        cached = _n(usage, "cachedContentTokenCount")
        return {
            "input": _n(usage, "promptTokenCount") - cached,
            "cached_input": cached,
            "cache_write": 0,
            "output": _n(usage, "candidatesTokenCount"),
            "reasoning": _n(usage, "thoughtsTokenCount"),
        }
    raise ValueError(f"unknown API shape {shape!r}")


class Invoice:
    """Per served model: calls, tokens by kind and USD in nano-dollars, as
    ``GET /_sim/invoice`` serves them. Thread-safe."""

    def __init__(self, prices: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.prices = prices or SIM_PRICE_TABLE
        self._lock = threading.Lock()
        self._models: dict[str, dict[str, Any]] = {}

    def add(self, model: str, shape: str, usage: Mapping[str, Any]) -> int:
        """Bill one reply; returns its cost in nano-dollars."""
        tokens = kinds_of(shape, usage)
        nusd = bill_nusd(tokens, dict(self.prices[model]))
        with self._lock:
            entry = self._models.setdefault(model, {"calls": 0, "tokens": dict.fromkeys(PRICE_KINDS, 0), "nusd": 0})
            entry["calls"] += 1
            for kind, count in tokens.items():
                entry["tokens"][kind] += count
            entry["nusd"] += nusd
        return nusd

    def as_json(self) -> dict[str, dict[str, Any]]:
        """``{model: {"calls": n, "tokens": {kind: n}, "nusd": n}}``."""
        with self._lock:
            return {
                m: {"calls": e["calls"], "tokens": dict(e["tokens"]), "nusd": e["nusd"]}
                for m, e in self._models.items()
            }


def prefix_digests(segments: Sequence[str]) -> list[str]:
    """The digest of every prefix of ``segments`` (a request's tools, system
    and messages, in order): element i is the digest of segments[: i + 1]."""
    out: list[str] = []
    h = hashlib.sha256()
    for segment in segments:
        h.update(json.dumps(segment).encode())
        h.update(b"\n")
        out.append(h.copy().hexdigest())
    return out


class PrefixCache:
    """What each conversation (served model, attempt key) has sent before.

    A provider's prompt cache keeps the prefix of an earlier request; here
    the scope is one conversation, so a cache hit depends only on the
    attempt's own earlier calls (the replies stay deterministic whichever
    thread serves which attempt)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], set[str]] = {}

    def implicit(self, model: str, attempt: str, segments: Sequence[str], sizes: Sequence[int]) -> int:
        """OpenAI's and Gemini's automatic caching: the tokens of the longest
        prefix sent before are a cache read; every prefix is remembered."""
        digests = prefix_digests(segments)
        with self._lock:
            seen = self._seen.setdefault((model, attempt), set())
            hit = max((i + 1 for i, d in enumerate(digests) if d in seen), default=0)
            seen.update(digests)
        return sum(sizes[:hit])

    def explicit(
        self, model: str, attempt: str, segments: Sequence[str], sizes: Sequence[int], breakpoints: Sequence[int]
    ) -> tuple[int, int]:
        """Anthropic's caching, by ``cache_control`` breakpoints (segment
        indices, each ending a cacheable prefix): the longest marked prefix
        written before is read; the prefix up to the last breakpoint, past
        what was read, is written. Returns (read tokens, written tokens)."""
        if not breakpoints:
            return 0, 0
        digests = prefix_digests(segments)
        with self._lock:
            seen = self._seen.setdefault((model, attempt), set())
            read_at = max((b + 1 for b in breakpoints if digests[b] in seen), default=0)
            last = max(breakpoints) + 1
            seen.update(digests[b] for b in breakpoints)
        read = sum(sizes[:read_at])
        written = sum(sizes[read_at:last]) if last > read_at else 0
        return read, written
