"""The run config: what was pinned, what was not, and never a secret."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from runhelpers import DEMO, minimal_design

import confirmatory
from confirmatory.core.redaction import is_secret_name, redact, redact_argv
from confirmatory.design.load import load_design
from confirmatory.design.model import Design, DesignError
from confirmatory.engine.config import IDENTITY_FIELDS, build_config, identity, known_confounds, write_config

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "ant-test-key-9876543210zyx"
SERVICE_TOKEN = "svc-tok-ABCDEFGH123"
PARAM_KEY = "param-embedded-key-55555"
HEADER_VALUE = "hdr-secret-value-77777"

FULL = {f: "x" for f in IDENTITY_FIELDS} | {
    "parameter_count": 1,
    "parameter_count_verified": True,
    "seed_supported": True,
    "seed_reproducible": True,
}


def design_copy(tmp_path: Path, extra_model_lines: str = "", harness_src: str | None = None) -> Path:
    return minimal_design(
        tmp_path,
        f"cfg_harness_{uuid.uuid4().hex[:8]}",
        harness_src or "def run(*a):\n    return {'answer': None}\n",
        extra_model_lines,
    )


def registry(tmp_path: Path, models: dict) -> Path:
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"format": "confirmatory-models/1", "models": models}))
    return path


def test_no_secret_from_the_environment_argv_or_params_reaches_config_json(tmp_path, monkeypatch):
    # A design holding a credential is refused (test_a_credential_in_the_design_is_refused_by_name), so
    # the secrets are put into the loaded design, as a library caller could: config.json must still
    # withhold or redact every one of them.
    design = design_copy(tmp_path)
    loaded = load_design(design)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SERVICE_TOKEN)
    d = loaded.design
    # truncates' params carry a key and a header value; an arm's features a secret (caught by the
    # last pass over every string)
    models = tuple(
        m.model_copy(
            update={
                "params": {
                    **m.params,
                    "api_key": PARAM_KEY,
                    "extra_headers": {"X-Api-Key": HEADER_VALUE},
                    "user": SERVICE_TOKEN,
                }
            }
        )
        if m.name == "truncates"
        else m
        for m in d.models
    )
    arms = tuple(
        a.model_copy(update={"features": {**a.features, "note": SERVICE_TOKEN}}) if a.name == "alone" else a
        for a in d.arms
    )
    loaded = dataclasses.replace(loaded, design=d.model_copy(update={"models": models, "arms": arms}))
    argv = ["confirmatory", "run", str(design), "--api-key", OPENAI_KEY, f"--token={SERVICE_TOKEN}", ANTHROPIC_KEY]
    cfg = build_config(loaded, argv=argv, registry_path=Path(__file__).parents[2] / "models.json")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    digest = write_config(run_dir, cfg)
    written = (run_dir / "config.json").read_bytes()
    assert hashlib.sha256(written).hexdigest() == digest
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, SERVICE_TOKEN, PARAM_KEY, HEADER_VALUE):
        assert secret.encode() not in written
    truncates = cfg["models"]["truncates"]
    assert truncates["params_withheld"] == ["api_key", "extra_headers"]
    assert truncates["params_sent"]["max_tokens"] == 512  # "tokens" counts are not secrets
    assert truncates["params_sent"]["user"] == "[redacted:MY_SERVICE_TOKEN]"
    assert cfg["arms"]["alone"]["note"] == "[redacted:MY_SERVICE_TOKEN]"
    assert "truncates: the parameters api_key, extra_headers were sent but are not recorded" in " ".join(
        cfg["not_pinned_down"]
    )


def test_the_config_records_the_runner_the_design_the_harness_and_each_arm(tmp_path):
    src = (
        "DESCRIBE = {'prompts': {'system': 'Be exact.'}, 'documents': {'rules': 'Tax is 20%.'},\n"
        "            'tool_schemas': {'calc': {'type': 'function', 'name': 'calc'}}}\n"
        "def run(*a):\n    return {'answer': None}\n"
    )
    loaded = load_design(design_copy(tmp_path, harness_src=src))
    cfg = build_config(loaded, argv=["confirmatory", "run"], registry_path=tmp_path / "absent.json")
    runner = cfg["runner"]
    assert runner["version"] == "0.1.0" and runner["packages"]["litellm"] == "1.110.2"
    assert set(runner["packages"]) == {"litellm", "openai", "httpx", "pydantic", "psutil", "click", "filelock"}
    assert runner["git_commit"] is None or len(runner["git_commit"]) == 40
    assert runner["argv"] == ["confirmatory", "run"] and runner["python"].startswith("3.")
    assert cfg["design_sha256"] == loaded.sha256
    h = cfg["harness"]
    assert h["declared"] and h["pins"] == loaded.pins
    assert h["prompts"]["system"] == {"text": "Be exact.", "sha256": hashlib.sha256(b"Be exact.").hexdigest()}
    assert h["documents"]["rules"]["sha256"] == hashlib.sha256(b"Tax is 20%.").hexdigest()
    assert h["tool_schemas"]["calc"]["sha256"] == hashlib.sha256(b'{"name":"calc","type":"function"}').hexdigest()
    assert cfg["arms"]["calculator_explain"] == {"tools": ["calculate"], "explain": True}
    careful = cfg["models"]["careful"]
    assert careful["params_sent"] == {
        "temperature": 0.0,
        "max_tokens": 512,
        "seed": 7,
        "timeout": 10.0,
        "num_retries": 0,
    }
    assert careful["token_parameter"] == {"name": "max_tokens", "value": 512}
    assert careful["provider"] == "openai" and "seed" in careful["supported_params"]
    assert cfg["not_pinned_down"][0].startswith("The model registry")
    assert cfg["model_registry"] == {"path": str(tmp_path / "absent.json"), "sha256": None}
    present = registry(tmp_path, {})
    assert build_config(loaded, argv=[], registry_path=present)["model_registry"] == {
        "path": str(present),
        "sha256": hashlib.sha256(present.read_bytes()).hexdigest(),
    }


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_the_runner_and_the_harness_carry_the_commit_of_the_checkout_that_tracks_them(tmp_path):
    # The study's own repository holds the design and its harness, and a
    # virtualenv it ignores. The runner installed there (not an editable
    # checkout) was recorded with the study's commit and dirty flag as its
    # own; the harness's checkout was not recorded at all.
    study = tmp_path / "study"
    study.mkdir()
    git(study, "init", "-q")
    loaded = load_design(design_copy(study))
    (study / ".gitignore").write_text(".venv/\n")
    site = study / ".venv" / "lib" / "site-packages"
    shutil.copytree(
        Path(confirmatory.__file__).parent, site / "confirmatory", ignore=shutil.ignore_patterns("__pycache__")
    )
    git(study, "add", "-A")
    git(study, "commit", "-q", "-m", "design")
    head = git(study, "rev-parse", "HEAD")
    probe = (
        "import json, confirmatory.engine.config as c; assert c.__file__.startswith(%r), c.__file__; "  # noqa: UP031
        "r = c.runner_identity([]); print(json.dumps([r['git_commit'], r['git_dirty']]))" % str(site)
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [None, None]
    harness = build_config(loaded, argv=[], registry_path=tmp_path / "none.json")["harness"]
    assert (harness["git_commit"], harness["git_dirty"]) == (head, False)
    (study / "notes.txt").write_text("not committed\n")
    harness = build_config(loaded, argv=[], registry_path=tmp_path / "none.json")["harness"]
    assert (harness["git_commit"], harness["git_dirty"]) == (head, True)
    # A harness outside any checkout: none.
    (tmp_path / "loose").mkdir()
    loose = load_design(design_copy(tmp_path / "loose"))
    harness = build_config(loose, argv=[], registry_path=tmp_path / "none.json")["harness"]
    assert (harness["git_commit"], harness["git_dirty"]) == (None, None)


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"models": {}}', "format must be 'confirmatory-models/1' (got None)"),
        ("{broken", "not valid JSON (Expecting property name enclosed in double quotes"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_model_registry_the_run_cannot_read_is_refused_by_check_and_run_naming_it(tmp_path, capsys, text, problem):
    # models.json beside the design, kept by hand, broken: check passed it
    # (exit 0) and run ended in build_config's traceback (exit 1).
    from confirmatory.commands.run import Refused, preflight
    from confirmatory.engine.check import check_command

    design = design_copy(tmp_path)
    (tmp_path / "models.json").write_text(text)
    line = f"model registry: {tmp_path / 'models.json'}: {problem}"
    assert check_command(design) == 3
    assert line in capsys.readouterr().err
    with pytest.raises(Refused) as refused:
        preflight(design, tmp_path / "run", workers=None)
    assert any(p.startswith(line) for p in refused.value.problems), refused.value.problems
    assert not (tmp_path / "run").exists()


def test_an_undeclaring_harness_is_named_as_not_pinned_down(tmp_path):
    cfg = build_config(load_design(design_copy(tmp_path)), argv=[], registry_path=tmp_path / "none.json")
    assert cfg["harness"]["declared"] is False
    assert any("does not declare its prompts" in s for s in cfg["not_pinned_down"])


def test_identity_lists_null_fields_and_is_sufficient_only_with_none():
    assert identity(None) == {"identity": None, "missing": list(IDENTITY_FIELDS), "sufficient_for_replication": False}
    assert identity(FULL)["sufficient_for_replication"] is True and identity(FULL)["missing"] == []
    partial = FULL | {"quantization": None, "base_model": None, "notes": None}
    assert identity(partial)["missing"] == ["quantization", "base_model"]
    assert identity(partial)["sufficient_for_replication"] is False


def test_the_shipped_registry_fully_specifies_the_simulated_models_only(tmp_path):
    loaded = load_design(DEMO / "minimal.toml")
    cfg = build_config(loaded, argv=[], registry_path=Path(__file__).parents[2] / "models.json")
    assert all(m["sufficient_for_replication"] for m in cfg["models"].values())
    data = json.loads((Path(__file__).parents[2] / "models.json").read_text())
    assert data["format"] == "confirmatory-models/1"
    real = [k for k in data["models"] if "sim-" not in k]
    assert real and not any(identity(data["models"][k])["sufficient_for_replication"] for k in real)


def sentences_for(
    tmp_path, lines: str, entry: dict | None, litellm_model: str = "openai/sim-truncates", api_base: str = "simulator"
) -> list[str]:
    design = design_copy(tmp_path)
    text = design.read_text().replace('litellm_model = "openai/sim-truncates"', f'litellm_model = "{litellm_model}"')
    text = text.replace("params = { temperature = 0.0, max_tokens = 512 }", lines)
    head, sep, tail = text.rpartition('api_base = "simulator"')  # the last model's
    text = head + f'api_base = "{api_base}"' + tail
    design.write_text(text)
    models = {} if entry is None else {litellm_model: entry}
    cfg = build_config(load_design(design), argv=[], registry_path=registry(tmp_path, models))
    return [s for s in cfg["not_pinned_down"] if s.startswith("truncates:")]


def test_a_seedless_model_is_named_and_a_measured_non_reproducing_seed_too(tmp_path):
    said = sentences_for(tmp_path, "params = { max_tokens = 5 }", FULL)
    assert said == ["truncates: no seed was passed."]
    said = sentences_for(tmp_path, "params = { seed = 1 }", FULL | {"seed_reproducible": False})
    assert said == [
        "truncates: the seed goes with chat-completions calls only; calls through the Responses API"
        " carry none (that API takes no seed).",
        "truncates: a seed is passed, but it was measured not to reproduce openai/sim-truncates's replies.",
    ]
    said = sentences_for(tmp_path, "params = { seed = 1 }", FULL | {"seed_reproducible": None})
    assert any("never measured" in s for s in said)


def test_a_real_provider_without_seed_or_snapshot_is_named_for_each(tmp_path):
    said = sentences_for(
        tmp_path,
        "params = { seed = 1 }",
        None,
        litellm_model="anthropic/claude-3-5-sonnet-20241022",
        api_base="https://api.example.test/v1",
    )
    text = " ".join(said)
    assert "the provider takes no seed" in text
    assert "a shared endpoint chooses batching and kernels" in text
    assert "has no entry in models.json" in text
    said = sentences_for(
        tmp_path,
        "params = { seed = 1 }",
        FULL | {"snapshot": None},
        litellm_model="openai/gpt-4o",
        api_base="https://api.example.test/v1",
    )
    assert any("can point at new weights" in s for s in said)
    assert any("does not record snapshot" in s for s in said)


def test_a_matched_pair_names_each_way_its_members_may_differ():
    design = load_design(DEMO / "minimal.toml").design
    reg = {
        "openai/sim-careful": FULL | {"serving_precision": "bf16"},
        "openai/sim-sloppy": FULL
        | {"serving_precision": "fp8", "seed_reproducible": False, "base_model": None, "modifications": None},
    }
    said = known_confounds(design.models, reg)
    assert said == [
        "careful and sloppy are served with different serving precision (bf16 vs fp8).",
        "careful and sloppy differ in seed determinism (careful: reproduces; sloppy: does not reproduce).",
        "careful and sloppy: the base model of sloppy is not confirmed, so the pair may not share one.",
        "careful and sloppy: the modifications of sloppy (fine-tuning, ablation, filtering) are not recorded.",
    ]
    assert known_confounds(design.models, {"openai/sim-careful": FULL, "openai/sim-sloppy": FULL}) == []
    unmatched = Design.model_validate(
        design.model_dump(by_alias=True) | {"models": [m.model_dump() | {"matched_with": None} for m in design.models]}
    )
    assert known_confounds(unmatched.models, {}) == []


def test_redact_replaces_secret_environment_values_and_token_shapes():
    env = {"MY_TOKEN": "abcdef123", "SHORT_KEY": "abc", "HOME": "/root/home-dir"}
    text = "t=abcdef123 k=abc home=/root/home-dir Authorization: Bearer eyJhbGciOi.x sk-proj-abcdefghijkl"
    assert redact(text, env) == (
        "t=[redacted:MY_TOKEN] k=abc home=/root/home-dir Authorization: Bearer [redacted] [redacted:sk-key]"
    )
    assert redact_argv(["x", "--api-key", "v", "--password=p", "--model", "m"], env) == [
        "x",
        "--api-key",
        "[redacted]",
        "--password=[redacted]",
        "--model",
        "m",
    ]
    assert is_secret_name("OPENAI_API_KEY") and is_secret_name("x-auth") and not is_secret_name("max_tokens")


@settings(max_examples=60, deadline=None)
@given(
    secret=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=6, max_size=40),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
@example(secret="SECRET]", before="", after="")  # a value inside its own marker
def test_a_secret_environment_value_never_survives_redaction(secret, before, after):
    assert secret not in redact(before + secret + after, {"SOME_SECRET": secret})


@pytest.mark.parametrize("name", ["API_KEY", "github_token", "DbPassword", "aws_secret_access_key", "CREDENTIALS"])
def test_secret_looking_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "params,key",
    [
        ('api_key = "abc123456"', "models[2].params.api_key"),
        ('access_token = "abc123456"', "models[2].params.access_token"),
        ('extra_headers = { "X-Api-Key" = "v-123456" }', "models[2].params.extra_headers.X-Api-Key"),
        (
            'extra_headers = { Authorization = "Basic dXNlcjpwYXNzd29yZA==" }',
            "models[2].params.extra_headers.Authorization",
        ),
        ('user = "sk-abcdefghijklmnop"', "models[2].params.user"),
        ('user = "the-env-value-42"', "models[2].params.user"),
    ],
)
def test_a_credential_in_the_design_is_refused_by_name(tmp_path, monkeypatch, params, key):
    """design.toml is copied byte for byte into the published run directory:
    a credential written in it would be published, so check and run refuse it."""
    monkeypatch.setenv("STUDY_SERVICE_TOKEN", "the-env-value-42")
    design = design_copy(tmp_path)
    text = design.read_text().replace(
        "params = { temperature = 0.0, max_tokens = 512 }",
        f"params = {{ temperature = 0.0, max_tokens = 512, {params} }}",
    )
    assert params in text
    design.write_text(text)
    with pytest.raises(DesignError) as err:
        load_design(design)
    assert any(p.startswith(f"{key}: ") and "must not be in the design" in p for p in err.value.problems), (
        err.value.problems
    )


def test_parameters_that_only_look_like_credentials_are_accepted(tmp_path):
    design = design_copy(tmp_path)
    text = design.read_text().replace(
        "params = { temperature = 0.0, max_tokens = 512 }",
        'params = { temperature = 0.0, max_completion_tokens = 512, prompt_cache_key = "study-7", user = "task-runner" }',
    )
    design.write_text(text)
    assert load_design(design).design.models[2].params["prompt_cache_key"] == "study-7"
