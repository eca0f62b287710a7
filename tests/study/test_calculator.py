"""The reference study's calculator: known households, and properties any
sensible tax-and-benefit schedule keeps."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.demo import calculator, households
from confirmatory.demo.calculator import InvalidHousehold, calculate, explain


def single(employment=0.0, self_employment=0.0, age=40, children=(), housing=0.0, region="north"):
    return {
        "adults": [{"age": age, "employment_income": employment, "self_employment_income": self_employment}],
        "children": [{"age": a} for a in children],
        "housing_cost": housing,
        "region": region,
    }


def test_an_earner_below_the_allowance_pays_nothing():
    r = calculate(single(employment=12_000))
    assert r["breakdown"]["income_tax"] == 0.0
    assert r["breakdown"]["social_insurance"] == 0.0
    assert r["net_income"] == 12_000.0


def test_a_basic_rate_earner_pays_twenty_percent_and_eight_percent_above_the_allowance():
    # 30,000: taxable 17,430 at 20 % = 3,486; SI 8 % of 17,430 = 1,394.40.
    r = calculate(single(employment=30_000))
    assert r["breakdown"] == {
        "gross_income": 30_000.0,
        "income_tax": 3_486.0,
        "social_insurance": 1_394.40,
        "child_benefit": 0.0,
        "housing_support": 0.0,
    }
    assert r["net_income"] == 25_119.60


def test_the_allowance_is_gone_at_the_top_of_its_taper():
    # 125,140: no allowance; 37,700 at 20 % + 87,440 at 40 % = 7,540 + 34,976.
    r = calculate(single(employment=125_140))
    assert r["breakdown"]["income_tax"] == 42_516.0


def test_child_benefit_is_withdrawn_one_percent_per_200_above_the_threshold_pro_rata():
    full = calculate(single(employment=50_000, children=(3, 5)))["breakdown"]["child_benefit"]
    assert full == pytest.approx(1_331.20 + 881.40)
    half = calculate(single(employment=70_000, children=(3, 5)))["breakdown"]["child_benefit"]
    assert half == pytest.approx(full / 2, abs=0.01)
    just_over = calculate(single(employment=60_100, children=(3, 5)))["breakdown"]["child_benefit"]
    assert just_over == pytest.approx(full * 0.995, abs=0.01)
    assert calculate(single(employment=80_000, children=(3, 5)))["breakdown"]["child_benefit"] == 0.0


def test_a_child_aged_sixteen_gets_no_child_benefit():
    assert calculate(single(employment=20_000, children=(16,)))["breakdown"]["child_benefit"] == 0.0


def test_housing_support_is_the_capped_cost_minus_the_taper_on_earnings():
    # 10,000 earned: no tax or SI; north cap 7,800; no children so no work
    # allowance; 7,800 - 0.55 * 10,000 = 2,300.
    r = calculate(single(employment=10_000, housing=9_000))
    assert r["breakdown"]["housing_support"] == 2_300.0
    with_child = calculate(single(employment=10_000, housing=9_000, children=(2,)))
    assert with_child["breakdown"]["housing_support"] == pytest.approx(7_800 - 0.55 * (10_000 - 4_620))


def test_a_pensioner_pays_no_social_insurance():
    assert calculate(single(self_employment=30_000, age=70))["breakdown"]["social_insurance"] == 0.0
    assert calculate(single(self_employment=30_000, age=65))["breakdown"]["social_insurance"] > 0


def test_explain_traces_the_same_net_income_that_calculate_returns():
    hh = single(employment=64_000, children=(1, 9, 17), housing=12_000, region="capital")
    e = explain(hh)
    assert e["net_income"] == calculate(hh)["net_income"]
    assert "child benefit" in e["trace"] and "housing support" in e["trace"]
    assert e["trace"].splitlines()[-1].endswith(f"{e['net_income']:,.2f}")


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {},
        {"adults": []},
        {"adults": [{"age": 30, "employment_income": -1}], "region": "north"},
        {"adults": [{"age": 30, "employment_income": True}], "region": "north"},
        {"adults": [{"age": 30}], "region": "atlantis"},
    ],
)
def test_a_malformed_household_is_refused_with_invalid_household(bad):
    with pytest.raises(InvalidHousehold):
        calculate(bad)


def test_the_bundled_households_are_exactly_what_the_generator_makes():
    bundled = resources.files("confirmatory.demo").joinpath("households.jsonl").read_bytes()
    assert bundled == households.to_jsonl(households.generate())
    rows = [json.loads(line) for line in bundled.splitlines()]
    assert [r["id"] for r in rows] == [f"hh-{i:03d}" for i in range(len(rows))]
    for r in rows:
        assert calculate(r)["net_income"] > 0


def test_the_calculator_answers_known_values_for_two_bundled_households():
    rows = {
        json.loads(line)["id"]: json.loads(line) for line in households.to_jsonl(households.generate()).splitlines()
    }
    assert calculate(rows["hh-001"])["net_income"] == 19_003.60
    assert calculate(rows["hh-011"])["net_income"] == 28_610.80


incomes = st.floats(min_value=0, max_value=400_000, allow_nan=False).map(lambda x: round(x, 2))
adult = st.fixed_dictionaries(
    {
        "age": st.integers(18, 90),
        "employment_income": incomes,
        "self_employment_income": incomes,
    }
)
household = st.fixed_dictionaries(
    {
        "adults": st.lists(adult, min_size=1, max_size=2),
        "children": st.lists(st.fixed_dictionaries({"age": st.integers(0, 18)}), max_size=4),
        "housing_cost": st.floats(min_value=0, max_value=30_000, allow_nan=False).map(lambda x: round(x, 2)),
        "region": st.sampled_from(sorted(calculator.HOUSING_CAPS)),
    }
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(household, st.floats(min_value=1, max_value=50_000, allow_nan=False))
def test_earning_more_never_lowers_net_income(hh, raise_by):
    richer = json.loads(json.dumps(hh))
    richer["adults"][0]["employment_income"] = round(richer["adults"][0]["employment_income"] + raise_by, 2)
    # Cents are rounded per component, so allow a few of them.
    assert calculate(richer)["net_income"] >= calculate(hh)["net_income"] - 0.05


# Where the schedule has kinks, a random income rarely lands: probe each one.
THRESHOLDS = (
    calculator.SI_LOWER,
    calculator.PERSONAL_ALLOWANCE + calculator.BASIC_BAND,
    calculator.SI_UPPER,
    calculator.CB_TAPER_START,
    calculator.CB_TAPER_START + 100 * calculator.CB_TAPER_STEP,
    calculator.ALLOWANCE_TAPER_START,
    calculator.ADDITIONAL_START,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    household,
    st.sampled_from(THRESHOLDS),
    st.one_of(st.floats(-1_500, 1_500), st.integers(-5, 105).map(lambda k: k * 200 - 0.01)),
    st.floats(0.01, 600),
)
def test_earning_a_little_more_near_a_threshold_never_lowers_net_income(hh, threshold, offset, raise_by):
    hh = json.loads(json.dumps(hh))
    hh["adults"][0]["employment_income"] = round(max(threshold + offset, 0.0), 2)
    hh["adults"][0]["self_employment_income"] = 0.0
    hh["children"].append({"age": 3})  # so the child benefit taper is in play
    richer = json.loads(json.dumps(hh))
    richer["adults"][0]["employment_income"] = round(hh["adults"][0]["employment_income"] + raise_by, 2)
    assert calculate(richer)["net_income"] >= calculate(hh)["net_income"] - 0.05


@settings(max_examples=300, deadline=None)
@given(household)
def test_components_are_never_negative_and_add_up_to_the_net_income(hh):
    r = calculate(hh)
    b = r["breakdown"]
    assert all(v >= 0 for v in b.values())
    expected = b["gross_income"] - b["income_tax"] - b["social_insurance"] + b["child_benefit"] + b["housing_support"]
    assert r["net_income"] == pytest.approx(expected, abs=0.01)
    assert b["housing_support"] <= min(hh["housing_cost"], calculator.HOUSING_CAPS[hh["region"]]) + 0.005


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(household, st.integers(0, 15))
def test_another_young_child_never_lowers_net_income(hh, age):
    bigger = json.loads(json.dumps(hh))
    bigger["children"].append({"age": age})
    assert calculate(bigger)["net_income"] >= calculate(hh)["net_income"] - 0.01


@settings(max_examples=200, deadline=None)
@given(household)
def test_the_calculator_is_deterministic(hh):
    assert calculate(hh) == calculate(json.loads(json.dumps(hh)))
