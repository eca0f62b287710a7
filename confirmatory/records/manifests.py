"""What the manifests take from the design: one pure mapping, shared by the
writer (runfiles) and by ``verify``, which recomputes it from the run's own
design.toml and compares field by field (invariant 11).

Only fields that follow from the design alone are here. What the runner
adds at start (run id, times, the pins as verified, the anchor command as
expanded for this interpreter and folder, the draw of the households file)
is not: verify checks those otherwise or cannot.
"""

from __future__ import annotations

import re
from typing import Any

from confirmatory.core import rules
from confirmatory.core.billing import design_price
from confirmatory.core.money import usd_to_nusd
from confirmatory.records.layout import tsa_files


def run_fields(d: Any) -> dict[str, Any]:
    """The run manifest's fields that the design (a ``design.Design``) fixes."""
    return {
        "study_id": d.study.id,
        "seed": d.study.seed,
        "models": [m.name for m in d.models],
        "arms": [a.name for a in d.arms],
        "ceiling_nusd": usd_to_nusd(d.ceiling.overall_cap_usd) + usd_to_nusd(d.ceiling.margin_usd),
        "spend_before_nusd": usd_to_nusd(d.study.spend_before_stage_usd),
        "harness": {"entry": d.harness.entry},
        "engine": engine_fields(d.engine),
        "rules": {
            "precedence": list(d.rules.precedence),
            "max_reruns_per_arm": d.rules.max_reruns_per_arm,
            "attempt_deadline_s": d.rules.attempt_deadline_s,
            "inconclusive_household_limit": d.rules.inconclusive_household_limit,
            "stop_follow_s": d.rules.stop_follow_s,
            "rerun_wait_s": d.rules.rerun_wait_s,
            "class_lists": rules.CLASS_LISTS,
            "host": {
                "sample_interval_s": d.host.sample_interval_s,
                "max_gap_s": d.host.max_gap_s,
                "pressure_threshold": d.host.pressure_threshold,
            },
        },
        "anchors": {"interval_s": d.anchors.interval_s},
    }


def default_origin(run_id: str) -> str:
    """The checkpoints' origin when the design names none: unique to the run (RECORDS.md)."""
    return "confirmatory/" + re.sub(r"[\s+]", "-", run_id)


def redact_url(url: str) -> str:
    """``url`` without a user:password part."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def evidence_fields(a: Any, run_id: str) -> dict[str, Any] | None:
    """The run manifest's ``evidence`` for the design's ``[anchors]`` (an
    ``Anchors``) and the run id (the default origin's): None when the design
    signs nothing. The TSA copies' names are the layout's (``tsa_files``)."""
    if a.signer is None:
        return None
    return {
        "origin": a.origin or default_origin(run_id),
        "verifier_key": a.signer.verifier_key,
        "timestamps": [
            {"url": redact_url(t.url), "certificate": tsa_files(i)[0], "ca": tsa_files(i)[1]}
            for i, t in enumerate(a.timestamps)
        ],
        "witnesses": [{"url": redact_url(w.url), "verifier_key": w.verifier_key} for w in a.witnesses],
        "cosignatures_required": a.required_cosignatures,
        "timestamps_required": a.required_timestamps,
    }


def engine_fields(e: Any) -> dict[str, Any]:
    """The manifest's ``engine``: the design's ``factory`` (or ``target``) and
    ``workers_per_model``. What the runner adds at start (``backend``: where
    the pool ran and what it got) is not here: it does not follow from the
    design alone."""
    named = {"factory": e.factory} if e.factory is not None else {"target": e.target}
    return {**named, "workers_per_model": e.workers_per_model}


# Fields the runner writes that RECORDS.md does not name: compared when present.
# rules.rerun_wait_s: a run made before the rule existed has none (verify
# then checks no wait, as that runner waited none).
RUN_OPTIONAL = frozenset({"study_id", "seed", "arms", "anchors", "rules.rerun_wait_s"})
# A manifest made before a design could say timestamps_required asks every TSA.
EVIDENCE_OPTIONAL = frozenset({"evidence.timestamps_required"})
# A model manifest made before price tables existed has no price.
MODEL_OPTIONAL = frozenset({"price"})


def model_fields(d: Any, spec: Any) -> dict[str, Any]:
    """A model manifest's fields that the design fixes (``spec``: its ``ModelSpec``)."""
    return {
        "model": spec.name,
        "litellm_model": spec.litellm_model,
        "cap_nusd": usd_to_nusd(spec.cap_usd),
        "reserve_nusd": usd_to_nusd(spec.reserve_usd),
        "lanes": spec.lanes,
        "seed": d.study.seed,
        "price": design_price(spec),
    }


def differences(expected: Any, actual: Any, key: str = "", optional: frozenset[str] = frozenset()) -> list[str]:
    """Where ``actual`` (a manifest as read back from JSON) differs from
    ``expected``: dotted keys, each with both values. Values are compared as
    JSON (a tuple is a list), and by kind: True is not 1, "2" is not 2. A
    number equals a number of the same value (the validator keeps an integer
    default as it is and makes a TOML integer a float), except money (keys
    ending ``_nusd``), which is an integer (RECORDS.md "Encoding").
    Keys of ``optional`` missing from ``actual`` are not compared."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{key or 'the manifest'} is {actual!r}, the design gives an object"]
        out = []
        for k, v in expected.items():
            sub = f"{key}.{k}" if key else k
            if k not in actual:
                if sub in optional:
                    continue
                out.append(f"{sub} is missing (the design gives {v!r})")
            else:
                out.extend(differences(v, actual[k], sub, optional))
        return out
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{key} is {actual!r}, the design gives {list(expected)!r}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{key}[{i}]", optional)]
    if _number(expected) and _number(actual) and not (key.endswith("_nusd") and type(actual) is not int):
        same = expected == actual  # 60 and 60.0 alike: a validator's version may keep either
    else:
        same = type(expected) is type(actual) and expected == actual
    return [] if same else [f"{key} is {actual!r}, the design gives {expected!r}"]


def _number(value: Any) -> bool:
    return type(value) in (int, float)
