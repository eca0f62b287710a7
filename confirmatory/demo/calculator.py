"""The reference study's engine: a compact tax-and-benefit calculator.

Given one household, it computes the household's annual net income:

    net income = gross earnings - income tax - social insurance
                 + child benefit + housing support

under a small fictional rule set, loosely shaped like a real one so that a
model has something to get wrong (an allowance that tapers away, a benefit
withdrawn above a threshold, a means test). Every amount is annual, in one
currency unit, rounded to cents at each component. The rules, in order:

1. Personal allowance, per adult: ``PERSONAL_ALLOWANCE``, reduced by 1 for
   every 2 of the adult's income above ``ALLOWANCE_TAPER_START`` (never below 0).
2. Income tax, per adult, on income above the allowance: 20 % on the first
   ``BASIC_BAND``, 40 % up to ``ADDITIONAL_START`` of taxable income, 45 % above.
3. Social insurance, per adult under ``PENSION_AGE``: on employment income,
   8 % between ``SI_LOWER`` and ``SI_UPPER`` and 2 % above; on self-employment
   income, 6 % and 2 % on the same thresholds (each kind measured separately).
4. Child benefit, per household, for children under ``CHILD_BENEFIT_MAX_AGE``:
   ``CB_FIRST`` for the eldest eligible child, ``CB_OTHER`` for each other.
   Withdrawn at 1 % per 200 (pro rata) of the highest adult income above
   ``CB_TAPER_START``, so all of it at ``CB_TAPER_START + 20,000``. Pro rata,
   not in whole steps: a step would make a raise of one cent cost a family
   1 % of its child benefit, and net income should never fall as pay rises.
5. Housing support, per household: the housing cost up to the region's cap,
   reduced by 55 % of the household's earnings after tax and social
   insurance above a work allowance (``WORK_ALLOWANCE`` with children, 0
   without); never below 0.

Pure and deterministic: no clock, no I/O, no randomness. ``calculate`` returns
the figures; ``explain`` returns the same computation as readable lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

PERSONAL_ALLOWANCE = 12_570.0
ALLOWANCE_TAPER_START = 100_000.0
BASIC_BAND = 37_700.0
ADDITIONAL_START = 125_140.0
BASIC_RATE, HIGHER_RATE, ADDITIONAL_RATE = 0.20, 0.40, 0.45

PENSION_AGE = 66
SI_LOWER, SI_UPPER = 12_570.0, 50_270.0
SI_EMPLOYED_MAIN, SI_SELF_MAIN, SI_UPPER_RATE = 0.08, 0.06, 0.02

CHILD_BENEFIT_MAX_AGE = 16  # children strictly younger than this are eligible
CB_FIRST, CB_OTHER = 1_331.20, 881.40
CB_TAPER_START, CB_TAPER_STEP = 60_000.0, 200.0

HOUSING_CAPS = {"north": 7_800.0, "midlands": 9_000.0, "south": 11_400.0, "capital": 15_600.0}
WORK_ALLOWANCE = 4_620.0
HOUSING_TAPER = 0.55


class InvalidHousehold(ValueError):
    """The household object does not have the shape the calculator needs."""


def _cents(x: float) -> float:
    # round() on a float is exact half-to-even on the binary value; adding 0.0
    # turns a -0.0 into 0.0 so that results print and compare the same.
    return round(x, 2) + 0.0


def _fmt(x: float) -> str:
    return f"{x:,.2f}"


def _number(obj: Mapping[str, Any], key: str, where: str) -> float:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidHousehold(f"{where}.{key} must be a non-negative number, got {value!r}")
    return float(value)


def _validate(household: Any) -> tuple[list[dict[str, float]], list[float], float, str]:
    if not isinstance(household, Mapping):
        raise InvalidHousehold("the household must be an object")
    adults_raw = household.get("adults")
    if not isinstance(adults_raw, list) or not adults_raw:
        raise InvalidHousehold("household.adults must be a non-empty list")
    adults = []
    for i, a in enumerate(adults_raw):
        if not isinstance(a, Mapping):
            raise InvalidHousehold(f"household.adults[{i}] must be an object")
        where = f"household.adults[{i}]"
        adults.append({
            "age": _number(a, "age", where),
            "employment_income": _number(a, "employment_income", where),
            "self_employment_income": _number(a, "self_employment_income", where),
        })
    children_raw = household.get("children", [])
    if not isinstance(children_raw, list):
        raise InvalidHousehold("household.children must be a list")
    ages = []
    for i, c in enumerate(children_raw):
        if not isinstance(c, Mapping):
            raise InvalidHousehold(f"household.children[{i}] must be an object")
        ages.append(_number(c, "age", f"household.children[{i}]"))
    housing = _number(household, "housing_cost", "household")
    region = household.get("region")
    if region not in HOUSING_CAPS:
        raise InvalidHousehold(f"household.region must be one of {sorted(HOUSING_CAPS)}, got {region!r}")
    return adults, ages, housing, region


def _allowance(income: float) -> float:
    reduction = max(0.0, income - ALLOWANCE_TAPER_START) / 2
    return max(0.0, PERSONAL_ALLOWANCE - reduction)


def _income_tax(taxable: float) -> float:
    basic = min(taxable, BASIC_BAND)
    higher = min(max(taxable - BASIC_BAND, 0.0), ADDITIONAL_START - BASIC_BAND)
    additional = max(taxable - ADDITIONAL_START, 0.0)
    return basic * BASIC_RATE + higher * HIGHER_RATE + additional * ADDITIONAL_RATE


def _si_on(income: float, main_rate: float) -> float:
    main = min(max(income - SI_LOWER, 0.0), SI_UPPER - SI_LOWER)
    upper = max(income - SI_UPPER, 0.0)
    return main * main_rate + upper * SI_UPPER_RATE


def _compute(household: Any) -> tuple[dict[str, Any], list[str]]:
    adults, child_ages, housing_cost, region = _validate(household)
    trace: list[str] = []
    gross = tax = si = 0.0
    incomes = []
    for i, a in enumerate(adults, start=1):
        income = a["employment_income"] + a["self_employment_income"]
        incomes.append(income)
        allowance = _allowance(income)
        taxable = max(income - allowance, 0.0)
        a_tax = _cents(_income_tax(taxable))
        if a["age"] >= PENSION_AGE:
            a_si = 0.0
            si_note = f"age {a['age']:g} is pension age or over, no social insurance"
        else:
            a_si = _cents(_si_on(a["employment_income"], SI_EMPLOYED_MAIN)
                          + _si_on(a["self_employment_income"], SI_SELF_MAIN))
            si_note = (f"social insurance {_fmt(a_si)} (employment {_fmt(a['employment_income'])}, "
                       f"self-employment {_fmt(a['self_employment_income'])})")
        trace.append(f"adult {i}: income {_fmt(income)}; personal allowance {_fmt(allowance)}; "
                     f"taxable {_fmt(taxable)}; income tax {_fmt(a_tax)}; {si_note}")
        gross += income
        tax += a_tax
        si += a_si
    gross, tax, si = _cents(gross), _cents(tax), _cents(si)

    eligible = sorted((age for age in child_ages if age < CHILD_BENEFIT_MAX_AGE), reverse=True)
    cb_full = (CB_FIRST + CB_OTHER * (len(eligible) - 1)) if eligible else 0.0
    top = max(incomes)
    withdrawn_share = min(max(top - CB_TAPER_START, 0.0) / (100 * CB_TAPER_STEP), 1.0)
    child_benefit = _cents(cb_full * (1 - withdrawn_share))
    trace.append(f"child benefit: {len(eligible)} of {len(child_ages)} children under "
                 f"{CHILD_BENEFIT_MAX_AGE}; full amount {_fmt(cb_full)}; highest adult income "
                 f"{_fmt(top)} withdraws {withdrawn_share:.2%}; paid {_fmt(child_benefit)}")

    cap = HOUSING_CAPS[region]
    eligible_cost = min(housing_cost, cap)
    earnings_after = _cents(gross - tax - si)
    allowance = WORK_ALLOWANCE if child_ages else 0.0
    reduction = HOUSING_TAPER * max(earnings_after - allowance, 0.0)
    housing_support = _cents(max(eligible_cost - reduction, 0.0))
    trace.append(f"housing support: cost {_fmt(housing_cost)} capped at {_fmt(cap)} ({region}) "
                 f"-> {_fmt(eligible_cost)}; earnings after tax and social insurance "
                 f"{_fmt(earnings_after)}; work allowance {_fmt(allowance)}; taper reduces by "
                 f"{_fmt(reduction)}; paid {_fmt(housing_support)}")

    net = _cents(gross - tax - si + child_benefit + housing_support)
    trace.append(f"net income = {_fmt(gross)} - {_fmt(tax)} - {_fmt(si)} + {_fmt(child_benefit)} "
                 f"+ {_fmt(housing_support)} = {_fmt(net)}")
    breakdown = {
        "gross_income": gross,
        "income_tax": tax,
        "social_insurance": si,
        "child_benefit": child_benefit,
        "housing_support": housing_support,
    }
    return {"net_income": net, "breakdown": breakdown}, trace


def calculate(household: Any) -> dict[str, Any]:
    """``{"net_income": float, "breakdown": {...}}`` for one household; raises InvalidHousehold."""
    result, _trace = _compute(household)
    return result


def explain(household: Any) -> dict[str, Any]:
    """The same computation as text: ``{"trace": str, "net_income": float}``."""
    result, trace = _compute(household)
    return {"trace": "\n".join(trace), "net_income": result["net_income"]}
