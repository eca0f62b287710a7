"""Benchmark: the runner's cost of a call, per call in µs, beside litellm's ``completion_cost``.

    python benchmarks/bench_cost.py            # ~20 s: 20,000 calls per shape and side
    python benchmarks/bench_cost.py --quick    # ~3 s: 2,000

For each of the four billing rules (OpenAI chat, Responses, Anthropic
Messages, Gemini) one reply's usage, as the vendor sends it, with cached,
cache-write and reasoning tokens where the API bills them. The runner's side
is what a lane does per reply (``confirmatory.core.billing``): the usage read
into kinds (``tokens_by_kind``), priced exactly at a frozen table
(``cost_nusd``) and compared with litellm's cost (``disagreement``).
litellm's side is ``litellm.completion_cost`` on a ``ModelResponse``
carrying the same usage in litellm's normalised form, for a model its
bundled price map knows (offline: ``LITELLM_LOCAL_MODEL_COST_MAP``). Both
are timed in the same loop shape, alternately, median of 5 rounds. The two
costs are printed too: they differ where the prices differ (the table here
is not litellm's), which is not what this measures.

Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# (shape, the vendor's usage, litellm model, litellm's normalised usage)
CASES = [
    (
        "chat",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 900,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 600},
        },
        "gpt-4o",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 900,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 600},
        },
    ),
    (
        "responses",
        {
            "input_tokens": 1200,
            "output_tokens": 900,
            "input_tokens_details": {"cached_tokens": 1024},
            "output_tokens_details": {"reasoning_tokens": 600},
        },
        "o3-mini",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 900,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 600},
        },
    ),
    (
        "anthropic",
        {
            "input_tokens": 150,
            "cache_creation_input_tokens": 2048,
            "cache_read_input_tokens": 4096,
            "output_tokens": 700,
        },
        "anthropic/claude-sonnet-4-5-20250929",
        {
            "prompt_tokens": 150 + 2048 + 4096,
            "completion_tokens": 700,
            "cache_creation_input_tokens": 2048,
            "cache_read_input_tokens": 4096,
            "prompt_tokens_details": {"cached_tokens": 4096},
        },
    ),
    (
        "gemini",
        {
            "promptTokenCount": 3000,
            "cachedContentTokenCount": 2048,
            "candidatesTokenCount": 400,
            "thoughtsTokenCount": 800,
        },
        "gemini/gemini-2.5-pro",
        {
            "prompt_tokens": 3000,
            "completion_tokens": 1200,
            "prompt_tokens_details": {"cached_tokens": 2048},
            "completion_tokens_details": {"reasoning_tokens": 800},
        },
    ),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 calls per shape and side")
    ap.add_argument("--calls", type=int, default=None, help="calls per shape, side and round (default 4,000)")
    args = ap.parse_args()
    n = args.calls or (400 if args.quick else 4000)
    rounds = 5

    from importlib.metadata import version

    from confirmatory.core import billing

    table = billing.PriceTable(input=2.5, output=10.0, cached_input=1.25, cache_write=3.75, reasoning=10.0)

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    t = time.perf_counter()
    import litellm

    litellm.suppress_debug_info = True
    imported = time.perf_counter() - t
    print(
        f"bench_cost: python {sys.version.split()[0]}, litellm {version('litellm')} "
        f"(imported in {imported:.1f} s), {n} calls per shape, side and round, median of {rounds} rounds"
    )
    print(f"  {'shape':10} {'runner µs/call':>15} {'litellm µs/call':>16} {'ratio':>7}   runner cost / litellm cost")
    for shape, usage, model, normalised in CASES:

        def ours(shape: str = shape, usage: dict = usage) -> int:
            tokens = billing.tokens_by_kind(shape, usage)
            nusd = billing.cost_nusd(tokens, table)
            billing.disagreement(nusd, nusd)
            return nusd

        response = litellm.ModelResponse(model=model, usage=litellm.Usage(**normalised))

        def theirs(response: object = response, model: str = model) -> float:
            return float(litellm.completion_cost(completion_response=response, model=model))

        try:
            their_cost: float | None = theirs()
            problem = ""
        except Exception as exc:  # noqa: BLE001 - reported, not measured
            their_cost, problem = None, f"litellm: {type(exc).__name__}: {str(exc)[:80]}"
        runs: dict[str, list[float]] = {"ours": [], "theirs": []}
        for _ in range(rounds):
            for side, fn in (("ours", ours), ("theirs", theirs if their_cost is not None else None)):
                if fn is None:
                    continue
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                runs[side].append((time.perf_counter() - start) / n * 1e6)
        mine = statistics.median(runs["ours"])
        cost = ours() / 1e9
        if their_cost is None:
            print(f"  {shape:10} {mine:15.1f} {'-':>16} {'-':>7}   ${cost:.6f} / - ({problem})")
            continue
        other = statistics.median(runs["theirs"])
        print(
            f"  {shape:10} {mine:15.1f} {other:16.1f} {mine / other:7.3f}   ${cost:.6f} / ${their_cost:.6f} ({model})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
