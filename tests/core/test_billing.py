"""The runner's billing rules, per API shape: usage by kind times a frozen table, in nano-dollars.

Each shape's rule is checked on the vendor's own field names, exhaustively
over usages (hypothesis) against the rule written out: every token counted
once, under its own kind. Planted faults these catch (tests/mutants.py):
cached tokens priced as input, reasoning tokens dropped, cache writes
dropped, Gemini thoughts dropped.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from confirmatory.core import billing
from confirmatory.core.billing import PriceTable

# Distinct prices per kind (USD per million tokens), each a whole number of
# nano-dollars per token, so that a token counted under the wrong kind moves the cost.
TABLE = PriceTable(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75, reasoning=20.0)
N = st.integers(min_value=0, max_value=2_000_000)


def nusd(**tokens: int) -> int:
    per_token = {"input": 3000, "cached_input": 300, "cache_write": 3750, "output": 15000, "reasoning": 20000}
    return sum(per_token[k] * n for k, n in tokens.items())


@given(cached=N, uncached=N, reasoning=N, visible=N)
def test_openai_chat_bills_cached_prompt_tokens_and_reasoning_apart(cached, uncached, reasoning, visible):
    usage = {
        "prompt_tokens": cached + uncached,
        "completion_tokens": reasoning + visible,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    tokens = billing.tokens_by_kind("chat", usage)
    assert tokens == {
        "input": uncached,
        "cached_input": cached,
        "cache_write": 0,
        "output": visible,
        "reasoning": reasoning,
    }
    assert billing.cost_nusd(tokens, TABLE) == nusd(
        input=uncached, cached_input=cached, output=visible, reasoning=reasoning
    )


@given(cached=N, uncached=N, reasoning=N, visible=N)
def test_responses_bills_input_and_output_details(cached, uncached, reasoning, visible):
    usage = {
        "input_tokens": cached + uncached,
        "output_tokens": reasoning + visible,
        "total_tokens": cached + uncached + reasoning + visible,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }
    tokens = billing.tokens_by_kind("responses", usage)
    assert billing.cost_nusd(tokens, TABLE) == nusd(
        input=uncached, cached_input=cached, output=visible, reasoning=reasoning
    )
    # chat's field names mean nothing on the Responses API
    assert billing.tokens_by_kind("chat", usage)["input"] == 0


@given(fresh=N, read=N, write=N, out=N)
def test_anthropic_bills_its_three_input_counts_each_once(fresh, read, write, out):
    usage = {
        "input_tokens": fresh,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": out,
    }
    tokens = billing.tokens_by_kind("anthropic", usage)
    assert tokens == {"input": fresh, "cached_input": read, "cache_write": write, "output": out, "reasoning": 0}
    assert billing.cost_nusd(tokens, TABLE) == nusd(input=fresh, cached_input=read, cache_write=write, output=out)


@given(cached=N, uncached=N, candidates=N, thoughts=N)
def test_gemini_bills_cached_content_and_thoughts(cached, uncached, candidates, thoughts):
    usage = {
        "promptTokenCount": cached + uncached,
        "cachedContentTokenCount": cached,
        "candidatesTokenCount": candidates,
        "thoughtsTokenCount": thoughts,
        "totalTokenCount": cached + uncached + candidates + thoughts,
    }
    tokens = billing.tokens_by_kind("gemini", usage)
    assert tokens == {
        "input": uncached,
        "cached_input": cached,
        "cache_write": 0,
        "output": candidates,
        "reasoning": thoughts,
    }
    assert billing.cost_nusd(tokens, TABLE) == nusd(
        input=uncached, cached_input=cached, output=candidates, reasoning=thoughts
    )


def test_reasoning_defaults_to_the_output_price_and_a_missing_kind_is_named():
    table = PriceTable(input=1.0, output=4.0)
    assert table.price("reasoning") == 4.0
    assert billing.cost_nusd({"reasoning": 10}, table) == 40_000
    assert billing.missing_kinds("anthropic", table) == ["cached_input", "cache_write"]
    assert billing.missing_kinds("gemini", table) == ["cached_input"]
    try:
        billing.cost_nusd({"cache_write": 1}, table)
    except ValueError as exc:
        assert "cache_write" in str(exc)
    else:
        raise AssertionError("a kind billed without a price must not cost 0")


def test_prices_are_exact_decimals_rounded_once_per_call():
    # 0.0001 USD/Mtok is 0.1 nano-dollars a token: 7 tokens are 0.7 -> 1, not 7 x round(0.1)
    table = PriceTable(input=0.0001, output=0.1, cached_input=0.1)
    assert billing.cost_nusd({"input": 7}, table) == 1
    assert billing.cost_nusd({"input": 5}, table) == 0  # 0.5 rounds half to even
    assert billing.cost_nusd({"input": 15}, table) == 2  # 1.5 -> 2


def test_odd_usages_never_bill_below_what_the_cached_tokens_cost():
    # more cached than prompt tokens: no negative input, every cached token priced
    tokens = billing.tokens_by_kind("chat", {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}})
    assert tokens["input"] == 0 and tokens["cached_input"] == 9
    # absent, null, negative or boolean counts are 0
    odd = {"prompt_tokens": -3, "completion_tokens": True, "prompt_tokens_details": None}
    assert billing.tokens_by_kind("chat", odd) == dict.fromkeys(billing.KINDS, 0)
    assert billing.tokens_by_kind("gemini", None) == dict.fromkeys(billing.KINDS, 0)


def test_disagreement_beyond_one_percent_or_without_a_cost():
    assert billing.disagreement(1000, 1010) is None
    assert billing.disagreement(1000, 990) is None
    assert billing.disagreement(0, 0) is None
    gap = billing.disagreement(1000, 1011)
    assert gap is not None and gap["runner_nusd"] == 1000 and gap["litellm_nusd"] == 1011
    assert billing.disagreement(1000, None) == {
        "runner_nusd": 1000,
        "litellm_nusd": None,
        "reason": "litellm gave no cost",
    }


def test_the_simulators_table_is_exact_per_million():
    table = billing.sim_table((5e-7, 2e-6))
    assert (table.input, table.output, table.cached_input, table.cache_write) == (0.5, 2.0, 0.5, 0.5)
