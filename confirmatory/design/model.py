"""The design file's data model: what a frozen study design may say.

This module owns the *shape* of a design (docs/DESIGN-FILE.md): one frozen
pydantic model per TOML table, unknown keys refused, defaults as documented,
and the checks that involve more than one field (a reserve above its cap, a
``matched_with`` naming nobody, duplicate slugs). It reads no files; reading
the TOML, the households and the harness pins is ``confirmatory.design.load``.

Scalars are strict (TOML is typed: a seed written as the string "7" is a
mistake to report, not to coerce); lists stay lax so TOML arrays become tuples.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from confirmatory.core.billing import PriceTable
from confirmatory.design.backends import MAX_ACTOR_CPUS
from confirmatory.design.crosscheck import SIMULATOR, cross_problems
from confirmatory.design.evidence import Signer, TimestampAuthority, WitnessSpec, check_origin_value

# A slug becomes a path component under the run directory (RECORDS.md Layout);
# "." and ".." match the character class but would walk the tree, so refuse them.
SLUG_RE = re.compile(r"[A-Za-z0-9._-]+")
# A file system takes a path component of at most 255 bytes, and a record's
# path holds three slugs (model, household, arm): longer ones would pass
# `check` and then fail at the run directory's creation, or at the first
# attempt of that household, hours into the run.
MAX_SLUG_CHARS = 128
ENTRY_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
)
SHA256_RE = re.compile(r"[0-9a-f]{64}")

CLASSES: tuple[str, ...] = ("harness", "stopped", "operator", "host", "provider", "model", "inconclusive", "ok")
FAULT_KINDS: tuple[str, ...] = (
    "rate_limit",
    "server_error",
    "bad_gateway",
    "unavailable",
    "hang",
    "truncate",
    "malformed",
    "bad_answer",
    "auth",
    "quota",
    "credit",
    "empty_choices",
    "null_choices",
    "overloaded",
    "bad_request",
    "safety",
    "blocked_prompt",
)


def slug_problem(value: str) -> str | None:
    """Why ``value`` is not a slug, or None."""
    if not SLUG_RE.fullmatch(value):
        return f"must be a slug of [A-Za-z0-9._-] (got {value!r})"
    if len(value) > MAX_SLUG_CHARS:
        return (
            f"must be at most {MAX_SLUG_CHARS} characters, as it becomes a path component of the run "
            f"records (got {len(value)}: {value[:40]!r}...)"
        )
    if set(value) == {"."}:
        return f"must not be only dots (got {value!r})"
    return None


def _slug(value: str) -> str:
    problem = slug_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _sha256(value: str) -> str:
    if not SHA256_RE.fullmatch(value):
        raise ValueError(f"must be 64 lower-case hex digits (got {value!r})")
    return value


def _entry(value: str) -> str:
    if not ENTRY_RE.fullmatch(value):
        raise ValueError(f'must be "package.module:callable" (got {value!r})')
    return value


def _finite(value: float) -> float:
    # TOML allows inf and nan; neither is a budget or a duration.
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number (got {value!r})")
    return value


# At most this many engine workers per model, and lanes per model: a guard
# against a slip (100000 for 10), which `check` would otherwise meet by
# starting that many processes, and `run` that many threads per model.
MAX_WORKERS_PER_MODEL = 256
MAX_LANES = 256
# The shortest host sample interval and anchor interval a design may give:
# 1e-9 would have the sampler, or the anchorer and its pushes, go as fast as
# the disk allows (about 14 GB of anchors a day) until the disk is full.
MIN_SAMPLE_INTERVAL_S = 0.01
MIN_ANCHOR_INTERVAL_S = 0.05

# The longest duration a design may give (30 days). A run lasts hours; a
# longer value is a slip (milliseconds for seconds), and from about 9.2e9 s
# the operating system's timers overflow: a wait or a call given such a
# timeout fails ("timestamp out of range for platform time_t").
MAX_DURATION_S = 30 * 86400

# Strict float still accepts a TOML integer; inf and nan (TOML has both) are
# refused before any bound is compared, so the message says "finite".
Num = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Study(_Frozen):
    id: StrictStr = Field(min_length=1)
    seed: StrictInt
    spend_before_stage_usd: Num = Field(default=0.0, ge=0)

    _fin = field_validator("spend_before_stage_usd")(_finite)


class Ceiling(_Frozen):
    overall_cap_usd: Num = Field(ge=0)
    margin_usd: Num = Field(default=25.0, ge=0)

    _fin = field_validator("overall_cap_usd", "margin_usd")(_finite)

    @property
    def ceiling_usd(self) -> float:
        return self.overall_cap_usd + self.margin_usd


class Harness(_Frozen):
    entry: StrictStr
    pins: dict[StrictStr, StrictStr] = Field(min_length=1)

    _e = field_validator("entry")(_entry)

    @field_validator("pins")
    @classmethod
    def _pins(cls, pins: dict[str, str]) -> dict[str, str]:
        for path, digest in pins.items():
            if not path:
                raise ValueError("a pinned path must not be empty")
            if not SHA256_RE.fullmatch(digest):
                raise ValueError(f'"{path}": must be 64 lower-case hex digits (got {digest!r})')
        return pins


class Engine(_Frozen):
    """``factory`` (a callable that starts the pool) or ``target`` (the
    function every worker runs, in a pool the runner starts on ``backend``);
    ``address`` and ``num_cpus`` only for ``backend = "ray"``. What spans the
    keys is checked in ``cross_problems``, which names each key."""

    factory: StrictStr | None = None
    target: StrictStr | None = None
    workers_per_model: StrictInt = Field(default=2, ge=1, le=MAX_WORKERS_PER_MODEL)
    backend: Literal["processes", "ray"] = "processes"
    address: StrictStr | None = Field(default=None, min_length=1)
    num_cpus: Num | None = Field(default=None, ge=0, le=MAX_ACTOR_CPUS)

    _e = field_validator("factory", "target")(lambda v: v if v is None else _entry(v))

    @property
    def entry(self) -> str:
        """The callable the design names: the factory, else the target."""
        return self.factory or self.target or ""


class HouseholdsFile(_Frozen):
    path: StrictStr = Field(min_length=1)
    sha256: StrictStr

    _h = field_validator("sha256")(_sha256)


class Arm(_Frozen):
    name: StrictStr
    features: dict[StrictStr, Any] = Field(default_factory=dict)

    _s = field_validator("name")(_slug)


class Price(_Frozen):
    """A model's price table in USD per million tokens, as its provider publishes it.

    The runner counts every call at this table, frozen in the design: the
    reply's usage by kind (``confirmatory.core.billing``) times these prices.
    ``cached_input`` prices tokens read from a cache, ``cache_write`` tokens
    written to one (Anthropic's cache creation: its 1-hour rate when the
    study's calls ask for 1-hour caching), ``reasoning`` reasoning tokens
    (``output`` when not given). A kind the model's API can bill and the
    table lacks is refused by ``check`` and ``run``. The same prices are
    registered with litellm, whose ``response_cost`` is kept beside the
    runner's as a cross-check."""

    input: Num = Field(ge=0)
    output: Num = Field(ge=0)
    cached_input: Num | None = Field(default=None, ge=0)
    cache_write: Num | None = Field(default=None, ge=0)
    reasoning: Num | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _not_free(self) -> Price:
        if not (self.input > 0 or self.output > 0):
            raise ValueError(
                "input and output are both 0: every call would count as free "
                "and the spend ceiling could not be enforced"
            )
        return self

    def table(self) -> PriceTable:
        """The table the runner counts calls at."""
        return PriceTable(
            input=self.input,
            output=self.output,
            cached_input=self.cached_input,
            cache_write=self.cache_write,
            reasoning=self.reasoning,
        )

    def per_token(self) -> dict[str, float]:
        """litellm's model-map fields, USD per token (a kind the table lacks at ``input``'s price)."""
        m = 1e6
        fields = {
            "input_cost_per_token": self.input / m,
            "output_cost_per_token": self.output / m,
            "cache_read_input_token_cost": (self.input if self.cached_input is None else self.cached_input) / m,
            "cache_creation_input_token_cost": (self.input if self.cache_write is None else self.cache_write) / m,
        }
        if self.reasoning is not None:
            fields["output_cost_per_reasoning_token"] = self.reasoning / m
        return fields


class ModelSpec(_Frozen):
    name: StrictStr
    litellm_model: StrictStr = Field(min_length=1)
    cap_usd: Num = Field(ge=0)
    reserve_usd: Num = Field(ge=0)
    lanes: StrictInt = Field(default=2, ge=1, le=MAX_LANES)
    params: dict[StrictStr, Any] = Field(default_factory=dict)
    timeout_s: Num = Field(default=120.0, gt=0, le=MAX_DURATION_S)
    api_base: StrictStr | None = None
    matched_with: StrictStr | None = None
    price_usd_per_mtok: Price | None = None
    # "litellm": count calls at litellm's price map as it stands at the run's
    # start (recorded in config.json), instead of a table of the design's own.
    price: Literal["litellm"] | None = None

    _s = field_validator("name")(_slug)
    _fin = field_validator("cap_usd", "reserve_usd", "timeout_s")(_finite)

    @field_validator("reserve_usd")
    @classmethod
    def _reserve_within_cap(cls, reserve: float, info: Any) -> float:
        cap = info.data.get("cap_usd")
        if cap is not None and reserve > cap:
            raise ValueError(f"must be <= cap_usd {cap} (got {reserve})")
        return reserve

    @model_validator(mode="after")
    def _one_price(self) -> ModelSpec:
        if self.price is not None and self.price_usd_per_mtok is not None:
            raise ValueError('give price_usd_per_mtok or price = "litellm", not both')
        return self

    @field_validator("params")
    @classmethod
    def _params(cls, params: dict[str, Any]) -> dict[str, Any]:
        for key in ("max_tokens", "max_completion_tokens"):
            if key in params and (type(params[key]) is not int or params[key] < 1):
                raise ValueError(f"{key} must be a positive integer (got {params[key]!r})")
        if "max_tokens" in params and "max_completion_tokens" in params:
            raise ValueError("give max_tokens or max_completion_tokens, not both")
        if "seed" in params and type(params["seed"]) is not int:
            raise ValueError(f"seed must be an integer (got {params['seed']!r})")
        if "temperature" in params and type(params["temperature"]) not in (int, float):
            raise ValueError(f"temperature must be a number (got {params['temperature']!r})")
        return params

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str | None) -> str | None:
        if value is not None and value != SIMULATOR and not value.startswith(("http://", "https://")):
            raise ValueError(f'must be "simulator" or an http(s) URL (got {value!r})')
        return value

    @property
    def simulated(self) -> bool:
        return self.api_base == SIMULATOR

    @property
    def served_name(self) -> str:
        """The model name the provider sees (after litellm's provider prefix)."""
        return self.litellm_model.rsplit("/", 1)[-1]


class Rules(_Frozen):
    max_reruns_per_arm: StrictInt = Field(default=2, ge=0)
    attempt_deadline_s: Num = Field(default=3600, gt=0, le=MAX_DURATION_S)
    inconclusive_household_limit: StrictInt = Field(default=5, ge=0)
    stop_follow_s: Num = Field(default=5, gt=0, le=MAX_DURATION_S)
    # before pass p >= 1 a lane waits rerun_wait_s * 2**(p-1) (rules.rerun_wait_s)
    rerun_wait_s: Num = Field(default=15, ge=0, le=MAX_DURATION_S)
    precedence: tuple[StrictStr, ...] = CLASSES

    _fin = field_validator("attempt_deadline_s", "stop_follow_s", "rerun_wait_s")(_finite)

    @field_validator("precedence")
    @classmethod
    def _permutation(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if sorted(value) != sorted(CLASSES):
            raise ValueError(f"must list each of {', '.join(CLASSES)} exactly once (got {list(value)})")
        return value


class Evidence(_Frozen):
    name: StrictStr
    path: StrictStr | None = Field(default=None, min_length=1)
    command: tuple[StrictStr, ...] | None = Field(default=None, min_length=1)
    # The design's directory, set by the loader: a relative ``path`` and a
    # relative command are taken from there (confirmatory.host.sources).
    _base_dir: Path | None = PrivateAttr(default=None)

    _s = field_validator("name")(_slug)

    @property
    def base_dir(self) -> Path | None:
        return self._base_dir

    @model_validator(mode="after")
    def _one_source(self) -> Evidence:
        if (self.path is None) == (self.command is None):
            raise ValueError("give exactly one of path or command")
        return self


def _instant(value: Any) -> float:
    """An ISO-8601 string, a TOML datetime or epoch seconds, as epoch seconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO-8601 time (got {value!r})") from None
    if isinstance(value, datetime):
        # A time without an offset means a different instant on every machine.
        if value.tzinfo is None:
            raise ValueError(f"time needs a UTC offset (got {value.isoformat()!r})")
        return value.timestamp()
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    raise ValueError(f"must be an ISO-8601 time or epoch seconds (got {value!r})")


class Host(_Frozen):
    sample_interval_s: Num = Field(default=30, ge=MIN_SAMPLE_INTERVAL_S, le=MAX_DURATION_S)
    max_gap_s: Num = Field(default=45, gt=0, le=MAX_DURATION_S)
    sampler_failure_s: Num = Field(default=300, gt=0, le=MAX_DURATION_S)
    read_tries: StrictInt = Field(default=5, ge=1)
    pressure_threshold: Num = Field(default=10.0, ge=0, le=100)
    window: tuple[float, float] | None = None
    evidence: tuple[Evidence, ...] = ()

    _fin = field_validator("sample_interval_s", "max_gap_s", "sampler_failure_s", "pressure_threshold")(_finite)

    @field_validator("max_gap_s")
    @classmethod
    def _gap_covers_interval(cls, gap: float, info: Any) -> float:
        # A gap shorter than the interval would make every attempt a host failure.
        interval = info.data.get("sample_interval_s")
        if interval is not None and gap < interval:
            raise ValueError(f"must be >= sample_interval_s {interval} (got {gap})")
        return gap

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ValueError(f"must be [start, end] (got {value!r})")
        start, end = _instant(value[0]), _instant(value[1])
        if end <= start:
            raise ValueError("end must come after start")
        return (start, end)


class Anchors(_Frozen):
    interval_s: Num = Field(default=900, ge=MIN_ANCHOR_INTERVAL_S, le=MAX_DURATION_S)
    # Required: a run whose anchors are never pushed can never verify
    # (RECORDS.md: the final anchor's push must have returned 0).
    command: tuple[StrictStr, ...] = Field(min_length=1)
    # The checkpoints' origin line; None: made from the run id (evidence_origin).
    origin: StrictStr | None = None
    signer: Signer | None = None
    timestamps: tuple[TimestampAuthority, ...] = ()
    witnesses: tuple[WitnessSpec, ...] = ()
    # None: every witness must cosign the final checkpoint.
    cosignatures_required: StrictInt | None = Field(default=None, ge=0)
    # None: every TSA must stamp the final checkpoint.
    timestamps_required: StrictInt | None = Field(default=None, ge=0)

    _fin = field_validator("interval_s")(_finite)
    _o = field_validator("origin")(check_origin_value)

    @field_validator("timestamps", "witnesses")
    @classmethod
    def _signed(cls, value: tuple[Any, ...], info: Any) -> tuple[Any, ...]:
        # (an invalid signer is not in info.data: its own problem is reported)
        if value and "signer" in info.data and info.data["signer"] is None:
            raise ValueError(
                "needs [anchors.signer] (key_file, verifier_key): time stamps and witnesses "
                "are of the study's signed checkpoints"
            )
        if info.field_name == "witnesses":
            keys = [w.verifier_key for w in value]
            if len(set(keys)) != len(keys):
                raise ValueError("names a witness key twice (the cosignatures counted are of distinct witnesses)")
        return value

    @field_validator("cosignatures_required", "timestamps_required")
    @classmethod
    def _within_sources(cls, value: int | None, info: Any) -> int | None:
        kind = "witnesses" if info.field_name == "cosignatures_required" else "timestamps"
        sources = info.data.get(kind)
        if value is not None and sources is not None and value > len(sources):
            what = "witnesses" if kind == "witnesses" else "time-stamping authorities"
            raise ValueError(f"must be <= the number of {what}, {len(sources)} (got {value})")
        return value

    @property
    def has_evidence(self) -> bool:
        """Whether the run signs its checkpoints (and stamps and witnesses them, as the design asks)."""
        return self.signer is not None

    @property
    def required_cosignatures(self) -> int:
        return len(self.witnesses) if self.cosignatures_required is None else self.cosignatures_required

    @property
    def required_timestamps(self) -> int:
        return len(self.timestamps) if self.timestamps_required is None else self.timestamps_required


class Fault(_Frozen):
    # Only the TOML spelling "pass" is read; the attribute is pass_ ("pass" is a keyword).
    kind: Literal[FAULT_KINDS]  # type: ignore[valid-type]
    model: StrictStr | None = None
    household: StrictStr | None = None
    arm: StrictStr | None = None
    pass_: StrictInt | None = Field(default=None, alias="pass", ge=0)
    call: StrictInt | None = Field(default=None, ge=0)
    rate: Num = Field(default=1.0, ge=0, le=1)
    hang_s: Num | None = Field(default=None, ge=0, le=30)  # this fault's hang; else the table's


class Simulator(_Frozen):
    seed: StrictInt = 0
    hang_s: Num = Field(default=5.0, ge=0, le=30)  # how long a "hang" sleeps (the server caps it at 30 s)
    faults: tuple[Fault, ...] = ()


class Design(_Frozen):
    study: Study
    ceiling: Ceiling
    harness: Harness
    engine: Engine
    households: HouseholdsFile
    arms: tuple[Arm, ...] = Field(min_length=1)
    models: tuple[ModelSpec, ...] = Field(min_length=1)
    rules: Rules = Rules()
    host: Host = Host()
    anchors: Anchors
    simulator: Simulator | None = None

    @model_validator(mode="after")
    def _across_tables(self) -> Design:
        problems = cross_problems(self.model_dump(by_alias=True))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def model(self, name: str) -> ModelSpec:
        for spec in self.models:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(frozen=True)
class Household:
    """One case of the study: its slug id and the whole JSON object."""

    id: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class LoadedDesign:
    """A validated design with its households read and its pins verified."""

    design: Design
    path: Path
    base_dir: Path
    raw: bytes
    sha256: str
    households: tuple[Household, ...]
    pins: dict[str, str] = field(default_factory=dict)


class DesignError(Exception):
    """The design was refused; ``problems`` holds one line per problem, naming the key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


__all__ = [
    "Anchors",
    "Arm",
    "Ceiling",
    "CLASSES",
    "Design",
    "DesignError",
    "Engine",
    "Evidence",
    "FAULT_KINDS",
    "Fault",
    "Harness",
    "Host",
    "Household",
    "HouseholdsFile",
    "LoadedDesign",
    "ModelSpec",
    "Rules",
    "Signer",
    "Simulator",
    "Study",
    "TimestampAuthority",
    "WitnessSpec",
    "slug_problem",
]
