"""Money is counted in integer nano-dollars, converted once from a float."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from confirmatory.core.money import NUSD_PER_USD, format_usd, to_nusd, usd_to_nusd


def test_a_nano_dollar_is_a_billionth_of_a_dollar():
    assert NUSD_PER_USD == 10**9
    assert to_nusd(1.0) == 10**9
    assert to_nusd(3) == 3 * 10**9


def test_384_calls_of_two_hundred_thousandths_sum_to_exactly_384_times_20000():
    assert sum(to_nusd(0.00002) for _ in range(384)) == 384 * 20_000
    assert sum([0.00002] * 384) * 10**9 != 384 * 20_000  # what summing floats would give


def test_no_cost_reported_counts_as_zero():
    assert to_nusd(None) == 0


def test_the_float_is_read_as_its_shortest_decimal_not_its_binary_value():
    # 1.5e-09 is stored as 1.4999999999999999e-09; its decimal meaning is 1.5.
    assert to_nusd(1.5e-9) == 2
    # Multiplying in floating point lands on the wrong side of a half.
    assert to_nusd(7.5e-9) == 8 and round(7.5e-9 * 1e9) != 8
    assert to_nusd(1.59005e-05) == 15_900 and round(1.59005e-05 * 1e9) != 15_900


@pytest.mark.parametrize(
    ("usd", "nusd"), [(0.5e-9, 0), (1.5e-9, 2), (2.5e-9, 2), (3.5e-9, 4), (1.0000000025, 1_000_000_002)]
)
def test_halves_round_to_even(usd, nusd):
    assert to_nusd(usd) == nusd


@pytest.mark.parametrize("bad", [-0.01, -1, math.nan, math.inf, -math.inf])
def test_negative_nan_and_infinite_costs_are_refused(bad):
    with pytest.raises(ValueError):
        to_nusd(bad)


@pytest.mark.parametrize("bad", [True, "0.1"])
def test_non_numbers_are_refused(bad):
    with pytest.raises(TypeError):
        to_nusd(bad)


def test_design_values_use_the_same_conversion():
    assert usd_to_nusd(12.5) == 12_500_000_000
    assert usd_to_nusd(None) == 0


@given(st.integers(min_value=0, max_value=10**15))
def test_a_cost_written_in_whole_nano_dollars_converts_to_exactly_that(k):
    assert to_nusd(float(f"{k}e-9")) == k


@pytest.mark.parametrize(
    ("nusd", "text"),
    [
        (12_345_678_000, "$12.345678"),
        (0, "$0.000000"),
        (1_500, "$0.000002"),  # half up
        (2_500, "$0.000003"),  # half up, never to even
        (2_501, "$0.000003"),
        (-1_500, "-$0.000002"),  # half away from zero
        (12_924_500, "$0.012925"),
        (-1, "$0.000000"),
        (10**18, "$1000000000.000000"),
    ],
)
def test_dollars_are_shown_to_the_micro_dollar(nusd, text):
    assert format_usd(nusd) == text


def test_the_spend_of_a_crashed_model_counts_its_journaled_calls_in_flight_once():
    from confirmatory.core.money import model_spend

    lines = [
        {"event": "call-cost", "household": "a", "arm": "x", "pass": 0, "cost_nusd": 5},
        {"event": "attempt", "household": "a", "arm": "x", "pass": 0, "cost_nusd": 5},
        {"event": "household", "household": "a"},
        {"event": "call-cost", "household": "b", "arm": "x", "pass": 0, "cost_nusd": 7},  # lost at the crash
        {"event": "continuation", "lost_nusd": 7},
        {"event": "call-cost", "household": "b", "arm": "x", "pass": 0, "cost_nusd": 11, "round": 1},
        {"event": "call-cost", "household": "c", "arm": "x", "pass": 0, "cost_nusd": 13},
        {"event": "late-cost", "household": "c", "arm": "x", "pass": 0, "cost_nusd": 3},  # journaled too
    ]
    s = model_spend(lines)
    assert (s.recorded_nusd, s.late_nusd, s.lost_nusd, s.in_flight_nusd) == (5, 3, 7, 11 + 10)
    assert s.total_nusd == 5 + 3 + 7 + 21
    # given the ended households' attempts, the same count
    assert model_spend([o for o in lines if o["event"] != "attempt"], recorded_nusd=5, settled={"a"}) == s
