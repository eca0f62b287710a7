"""The pure rules: admission, classes, actions, rerun plans, stop rules."""

from __future__ import annotations

import importlib
import inspect
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from confirmatory.core import errors, rules
from confirmatory.core.rules import Action, Cls


def err(type_, mro=None, message="boom", status=None):
    return {
        "type": type_,
        "mro": mro or [type_, "builtins.Exception", "builtins.BaseException", "builtins.object"],
        "message": message,
        "status_code": status,
        "escalated_after_truncation": False,
    }


def rec(status="error", error=None):
    return {"status": status, "error": error}


def litellm_exceptions():
    """Every BaseException subclass litellm exports: {qualified name: mro names}."""
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    litellm = importlib.import_module("litellm")
    found = {}
    for module in (litellm, importlib.import_module("litellm.exceptions")):
        for name in dir(module):
            obj = getattr(module, name, None)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found[errors.qualified_name(obj)] = [errors.qualified_name(c) for c in obj.__mro__]
    return found


@pytest.fixture(scope="module")
def exported():
    return litellm_exceptions()


# ---- class lists against litellm itself ------------------------------------------------------


def test_every_exception_class_litellm_exports_is_in_a_class_list_or_excluded_with_a_reason(exported):
    listed = {n for c in ("provider", "model", "operator") for n in rules.CLASS_LISTS[c]}
    missed = sorted(set(exported) - listed - set(rules.NOT_LISTED))
    assert not missed, f"litellm exports classes no list names: {missed}"
    assert all(reason for reason in rules.NOT_LISTED.values())


def test_no_class_is_listed_after_one_of_its_bases_within_a_list(exported):
    for cls_name in ("provider", "model", "operator"):
        names = rules.CLASS_LISTS[cls_name]
        for i, name in enumerate(names):
            for base in exported.get(name, [])[1:]:
                if base in names:
                    assert names.index(base) > i, f"{name} listed after its base {base} in {cls_name}"


def test_no_class_is_in_two_lists():
    seen = {}
    for c in ("provider", "model", "operator"):
        for n in rules.CLASS_LISTS[c]:
            assert n not in seen, f"{n} in {seen[n]} and {c}"
            seen[n] = c


def test_each_exported_class_gets_its_listed_class_when_raised_as_recorded(exported):
    for name, mro in exported.items():
        got = rules.record_class(rec(error=err(name, mro)))
        expected = next((c for n in mro for c in ("provider", "model", "operator") if n in rules.CLASS_LISTS[c]), None)
        if expected is None:
            assert got in (Cls.INCONCLUSIVE, Cls.HARNESS), name
        else:
            assert got == Cls(expected), name


@pytest.mark.parametrize(
    "name,expected",
    [
        ("RateLimitError", Cls.PROVIDER),
        ("InternalServerError", Cls.PROVIDER),
        ("BadGatewayError", Cls.PROVIDER),
        ("ServiceUnavailableError", Cls.PROVIDER),
        ("Timeout", Cls.PROVIDER),
        ("APIConnectionError", Cls.PROVIDER),
        ("MidStreamFallbackError", Cls.PROVIDER),
        ("APIResponseValidationError", Cls.PROVIDER),
        ("ContextWindowExceededError", Cls.MODEL),
        ("ContentPolicyViolationError", Cls.MODEL),
        ("BadRequestError", Cls.MODEL),
        ("UnprocessableEntityError", Cls.MODEL),
        ("JSONSchemaValidationError", Cls.MODEL),
        ("AuthenticationError", Cls.OPERATOR),
        ("PermissionDeniedError", Cls.OPERATOR),
        ("NotFoundError", Cls.OPERATOR),
        ("BudgetExceededError", Cls.OPERATOR),
        ("CallerCredentialAuthenticationError", Cls.OPERATOR),
        ("CallerCredentialRateLimitError", Cls.PROVIDER),
        ("ModelNotMappedError", Cls.OPERATOR),
        ("LiteLLMUnknownProvider", Cls.OPERATOR),
    ],
)
def test_litellm_failures_that_the_design_names_get_the_designs_class(exported, name, expected):
    q = f"litellm.exceptions.{name}"
    assert rules.record_class(rec(error=err(q, exported[q]))) == expected


def test_a_litellm_timeout_is_provider_even_though_it_subclasses_openais_connection_error(exported):
    q = "litellm.exceptions.Timeout"
    assert "openai.APIConnectionError" in exported[q]
    assert rules.record_class(rec(error=err(q, exported[q]))) == Cls.PROVIDER


@pytest.mark.parametrize(
    "status,expected",
    [
        (403, Cls.OPERATOR),
        (401, Cls.OPERATOR),
        (404, Cls.OPERATOR),
        (429, Cls.PROVIDER),
        (409, Cls.PROVIDER),
        (None, Cls.PROVIDER),
    ],
)
def test_a_plain_api_error_is_classified_by_its_recorded_status(exported, status, expected):
    q = "litellm.exceptions.APIError"
    assert rules.record_class(rec(error=err(q, exported[q], status=status))) == expected


def test_the_recorded_classes_of_litellm_need_no_litellm_import():
    # a subclass unknown to the lists falls to its first listed base
    mro = ["litellm.exceptions.SomeNewRateLimit", "litellm.exceptions.RateLimitError", "openai.RateLimitError"]
    assert rules.record_class(rec(error=err(mro[0], mro))) == Cls.PROVIDER


def test_an_unlisted_error_of_a_provider_package_is_inconclusive_and_any_other_is_harness():
    assert rules.record_class(rec(error=err("openai.SomethingNew"))) == Cls.INCONCLUSIVE
    assert rules.record_class(rec(error=err("httpx.Weird"))) == Cls.INCONCLUSIVE
    assert rules.record_class(rec(error=err("builtins.KeyError"))) == Cls.HARNESS
    assert rules.record_class(rec(error=err("demo.harness.Oops"))) == Cls.HARNESS


def test_the_confirmatory_model_faults_are_model_class():
    for exc in (errors.TruncationSurvived(), errors.EscalatedTimeout(), errors.UnparseableAnswer()):
        assert rules.record_class(rec(error=errors.describe_exception(exc))) == Cls.MODEL


def test_record_statuses_map_to_stopped_harness_ok():
    deadline = errors.describe_exception(errors.AttemptDeadline("late"))
    assert deadline["type"] == rules.DEADLINE_TYPE
    assert rules.record_class(rec("deadline", deadline)) == Cls.HARNESS
    assert rules.record_class(rec("budget_stop", None)) == Cls.STOPPED
    assert rules.record_class(rec("ok", None)) == Cls.OK
    assert rules.record_class(rec("error", None)) == Cls.HARNESS
    with pytest.raises(ValueError):
        rules.record_class(rec("weird", None))


# ---- precedence and host -------------------------------------------------------------------


def test_host_evidence_makes_an_ok_or_provider_or_model_attempt_host_class():
    for r in (
        rec("ok"),
        rec(error=err("litellm.exceptions.RateLimitError")),
        rec(error=err("confirmatory.core.errors.UnparseableAnswer")),
    ):
        assert rules.classify(r, ["pressure 30.0 > 10.0"]) == Cls.HOST


def test_harness_stopped_and_operator_beat_host_evidence():
    assert rules.classify(rec(error=err("builtins.KeyError")), ["gap"]) == Cls.HARNESS
    assert rules.classify(rec("budget_stop"), ["gap"]) == Cls.STOPPED
    assert rules.classify(rec(error=err("litellm.exceptions.AuthenticationError")), ["gap"]) == Cls.OPERATOR


def test_the_recorded_precedence_decides_not_the_default():
    custom = ["provider", "host", "harness", "stopped", "operator", "model", "inconclusive", "ok"]
    r = rec(error=err("litellm.exceptions.RateLimitError"))
    assert rules.classify(r, ["gap"], precedence=custom) == Cls.PROVIDER
    with pytest.raises(ValueError):
        rules.classify(r, [], precedence=["ok"])


# ---- actions and passes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls,expected",
    [
        (Cls.HARNESS, Action.STOP),
        (Cls.STOPPED, Action.KEEP),
        (Cls.OPERATOR, Action.PAUSE),
        (Cls.HOST, Action.RERUN),
        (Cls.PROVIDER, Action.RERUN),
        (Cls.INCONCLUSIVE, Action.RERUN),
        (Cls.MODEL, Action.KEEP),
        (Cls.OK, Action.KEEP),
    ],
)
def test_each_class_has_its_action(cls, expected):
    assert rules.action_for(cls, reruns_used=0, max_reruns=2) == expected


def test_a_rerun_past_the_limit_becomes_keep_but_a_pause_stays_a_pause():
    assert rules.action_for(Cls.PROVIDER, reruns_used=2, max_reruns=2) == Action.KEEP
    assert rules.action_for(Cls.PROVIDER, reruns_used=1, max_reruns=2) == Action.RERUN
    assert rules.action_for(Cls.OPERATOR, reruns_used=2, max_reruns=2) == Action.PAUSE


def test_the_next_pass_reruns_and_resumes_arms_in_arm_order():
    actions = {"a": Action.KEEP, "b": Action.PAUSE, "c": Action.RERUN}
    assert rules.next_pass_arms(["c", "a", "b"], actions) == ["c", "b"]
    assert rules.next_pass_arms(["c", "a", "b"], actions, reruns_used={"b": 2, "c": 1}, max_reruns=2) == ["c"]


def test_stop_causes_of_harness_attempts_tell_deadline_from_harness():
    assert rules.stop_cause_for(Cls.HARNESS, rec("deadline", err(rules.DEADLINE_TYPE))) == "deadline"
    assert rules.stop_cause_for(Cls.HARNESS, rec(error=err("builtins.KeyError"))) == "harness"
    assert rules.stop_cause_for(Cls.PROVIDER, rec(error=err("openai.RateLimitError"))) is None


def test_stop_scopes_cover_every_cause():
    assert {c for c, s in rules.STOP_SCOPE.items() if s == "model"} == {"harness", "inconclusive", "deadline", "pool"}
    assert {c for c, s in rules.STOP_SCOPE.items() if s == "run"} == {"runner-error", "interrupt", "sampler", "crash"}


# ---- signatures and the inconclusive rule ------------------------------------------------------


def test_error_signatures_ignore_ids_numbers_case_and_spacing():
    a = err("openai.Odd", message="Request 12 failed:  id=3f2a9c1e-0b1d-4c2e-9a7f-1234567890ab at  0xdeadbeef01")
    b = err("openai.Odd", message="request 977 FAILED: id=00000000-1111-2222-3333-444444444444 at 0x12345678ab")
    assert rules.error_signature(a) == rules.error_signature(b)
    assert rules.error_signature(a).startswith("openai.Odd: request # failed")
    assert rules.error_signature(None) is None
    assert len(rules.error_signature(err("x.Y", message="z" * 999))) == len("x.Y: ") + 200
    assert rules.error_signature(err("x.Y", message="a")) != rules.error_signature(err("x.Z", message="a"))


# the characters and pieces where the hex-id pattern's edges lie: hex digits and letters,
# the run's `_` and `-`, `0x`, a word character outside the run (`g`, `x`, `é`), a digit
# outside it (`٣`), spaces and punctuation
_HEX_PIECES = [*"0123456789abcdef", "_", "-", "0x", "x", "g", "é", "٣", " ", ".", "\n", "a-", "1-", "abcd", "be-ef"]


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_HEX_PIECES), max_size=60).map("".join))
@example("id abcdefab-٣ x")  # the lookahead's digit just after the run
@example("at 0xabcdefab1 and 0x-abcdefab1 and 0xabc")  # 0x, and its fallback
@example("abcdefab-1g abcdefa1 abcdef-ab1-")  # the greedy tail backs off to the last boundary
@example("a-a-a-a-a-a-a-a-a-a1 _-_-_-_-_-_-_-_-1")
def test_the_linear_hex_id_substitution_is_the_pattern_s(msg):
    assert rules._sub_hex_ids(msg) == rules._HEXID.sub("#", msg)


def test_a_long_run_of_hex_letters_and_dashes_takes_the_linear_path_with_the_same_signature():
    # the pattern takes seconds on 40 kB of this; this size it does quickly, for the comparison
    for msg in ["a-" * 1500, "a-" * 1500 + "1", "0x" + "ab-" * 1000 + "7g", "_-" * 1500 + "٣", "f" * 70 + "1"]:
        assert rules._LONG_HEX_RUN.search(msg)
        want = rules._HEXID.sub("#", rules._UUID.sub("#", msg))
        want = f"x.Y: {rules._SPACE.sub(' ', rules._DIGITS.sub('#', want)).strip()[:200]}"
        assert rules.error_signature(err("x.Y", message=msg)) == want


def test_the_inconclusive_trigger_fires_only_beyond_the_household_limit():
    assert rules.inconclusive_trigger({"s": {"h1", "h2", "h3", "h4", "h5"}}, 5) is None
    assert rules.inconclusive_trigger({"s": {f"h{i}" for i in range(6)}, "t": {"h1"}}, 5) == "s"


def test_decide_gives_the_attempt_that_crosses_the_inconclusive_limit_a_stop():
    r = rec(error=err("openai.Odd", message="x"))
    sig = rules.error_signature(r["error"])
    d = rules.decide(
        r, [], reruns_used=2, max_reruns=2, inconclusive_households={sig: {"a", "b"}}, inconclusive_limit=1
    )
    assert (d.cls, d.action, d.stop_cause) == (Cls.INCONCLUSIVE, Action.STOP, "inconclusive")
    d = rules.decide(r, [], reruns_used=0, max_reruns=2, inconclusive_households={sig: {"a"}}, inconclusive_limit=1)
    assert (d.action, d.stop_cause) == (Action.RERUN, None)


# ---- admission -----------------------------------------------------------------------------


def test_admission_admits_while_every_reserve_fits_under_the_cap_and_never_after_a_refusal():
    kw = dict(finished_nusd=50, reserve_nusd=10, cap_nusd=100)
    assert rules.admit(refused_before=False, under_way=4, **kw)  # 50 + 50 <= 100
    assert not rules.admit(refused_before=False, under_way=5, **kw)  # 50 + 60 > 100
    assert not rules.admit(refused_before=True, under_way=0, **kw)


# ---- money said in words: quota and credit exhaustion are operator failures ---------------------
# Messages as litellm 1.110.2 records them, measured against a loopback server
# answering with each provider's documented error body (docs/LITELLM.md).

QUOTA_TEXT = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
)
OPENAI_QUOTA_CHAT = "litellm.RateLimitError: RateLimitError: OpenAIException - " + QUOTA_TEXT
OPENAI_QUOTA_RESPONSES = (
    'litellm.RateLimitError: RateLimitError: OpenAIException - {"error": {"message": "'
    + QUOTA_TEXT
    + '", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}'
)
CREDIT_TEXT = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)
ANTHROPIC_CREDIT = (
    'litellm.BadRequestError: AnthropicException - {"type": "error", "error": {"type": '
    '"invalid_request_error", "message": "' + CREDIT_TEXT + '"}}'
)
ANTHROPIC_CREDIT_VIA_OPENAI_COMPAT = "litellm.BadRequestError: OpenAIException - " + CREDIT_TEXT
OPENAI_TPM = (
    "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for gpt-4o in "
    "organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. "
    "Please try again in 2s."
)
ANTHROPIC_RPM = (
    'litellm.RateLimitError: AnthropicException - {"type": "error", "error": {"type": '
    '"rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}'
)
VERTEX_QUOTA = (
    "litellm.RateLimitError: vertex_aiException - 429 Quota exceeded for "
    "aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model"
)


def litellm_err(exported, name, message, status):
    q = f"litellm.exceptions.{name}"
    return err(q, exported[q], message=message, status=status)


@pytest.mark.parametrize(
    "name,message,status",
    [
        ("RateLimitError", OPENAI_QUOTA_CHAT, 429),
        ("RateLimitError", OPENAI_QUOTA_RESPONSES, 429),
        ("RateLimitError", OPENAI_QUOTA_CHAT.upper(), 429),
        ("APIError", OPENAI_QUOTA_CHAT.replace("RateLimitError", "APIError"), 429),
        ("BadRequestError", ANTHROPIC_CREDIT, 400),
        ("BadRequestError", ANTHROPIC_CREDIT_VIA_OPENAI_COMPAT, 400),
    ],
)
def test_an_exhausted_quota_or_credit_balance_is_an_operator_failure_that_pauses(exported, name, message, status):
    r = rec(error=litellm_err(exported, name, message, status))
    assert rules.record_class(r) == Cls.OPERATOR
    d = rules.decide(r, [], reruns_used=0, max_reruns=2)
    assert (d.cls, d.action) == (Cls.OPERATOR, Action.PAUSE)
    assert rules.classify(r, ["pressure 30.0 > 10.0"]) == Cls.OPERATOR  # operator beats host evidence


@pytest.mark.parametrize(
    "name,message,status,expected",
    [
        ("RateLimitError", OPENAI_TPM, 429, Cls.PROVIDER),
        ("RateLimitError", ANTHROPIC_RPM, 429, Cls.PROVIDER),
        ("RateLimitError", VERTEX_QUOTA, 429, Cls.PROVIDER),
        ("RateLimitError", "litellm.RateLimitError: simulated rate_limit", 429, Cls.PROVIDER),
        ("BadRequestError", "litellm.BadRequestError: OpenAIException - Invalid 'messages[1].content'", 400, Cls.MODEL),
        # a marker under another status or class is not the provider's documented signal
        ("RateLimitError", OPENAI_QUOTA_CHAT, None, Cls.PROVIDER),
        ("InternalServerError", OPENAI_QUOTA_CHAT, 500, Cls.PROVIDER),
        ("RateLimitError", CREDIT_TEXT, 429, Cls.PROVIDER),
        ("BadRequestError", QUOTA_TEXT, 400, Cls.MODEL),
    ],
)
def test_ordinary_rate_limits_and_bad_requests_keep_their_class(exported, name, message, status, expected):
    assert rules.record_class(rec(error=litellm_err(exported, name, message, status))) == expected


def test_a_quota_marker_in_an_error_the_harness_raised_is_still_a_harness_failure():
    assert rules.record_class(rec(error=err("builtins.ValueError", message=QUOTA_TEXT, status=429))) == Cls.HARNESS


def test_the_message_rules_are_data_in_the_class_lists_the_manifest_pins_and_verify_reads(exported, tmp_path):
    import json

    from confirmatory.design.load import load_design
    from confirmatory.records.rundir import run_manifest
    from confirmatory.verify.context import RulesView
    from confirmatory.verify.report import Findings

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    loaded = load_design(os.path.join(root, "confirmatory", "demo", "minimal.toml"))
    manifest = run_manifest(loaded, run_id="r", created_t=1.0, anchors_cwd=str(tmp_path), run_dir=tmp_path / "run")
    pinned = json.loads(json.dumps(manifest))  # as written to and read back from manifest.json
    assert pinned["rules"]["class_lists"]["message_overrides"] == rules.CLASS_LISTS["message_overrides"]
    view = RulesView.from_manifest(pinned, Findings())
    quota = rec(error=litellm_err(exported, "RateLimitError", OPENAI_QUOTA_CHAT, 429))
    d = rules.decide(
        quota, (), reruns_used=0, max_reruns=view.max_reruns, precedence=view.precedence, class_lists=view.class_lists
    )
    assert (d.cls, d.action) == (Cls.OPERATOR, Action.PAUSE)
    # The rule is read from the class lists it is given, not from the code: a
    # manifest written before it existed is verified by what that run decided.
    older = {k: v for k, v in pinned["rules"]["class_lists"].items() if k != "message_overrides"}
    assert rules.record_class(quota, class_lists=older) == Cls.PROVIDER
