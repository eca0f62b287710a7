"""A continuation killed between any two of its writes is continued again.

The crashed run (continuation_kills.make_base: killed right after a record,
torn tails in two logs) is carried on by a continuation that a real SIGKILL
stops at one step of its own progress on disk, named from the write trace
of an uncut continuation of the same crash: each step of its start (the torn
tails moved aside, its line in each log in turn, the crash's stop, the
replaced attempt lines, the cut households' lines), its first anchor and
that anchor's push, the first decision, a round-1 record, attempt line and
household line, a lane's end, the close line, the final anchor. Each point:
verify says crashed or complete with no violation, the next `continue`
completes the run, verify says complete with every household of every draw
ended, show agrees, and every line acknowledged before the kill is kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import continuation_kills as ck  # noqa: E402

# step -> how it is found in the uncut continuation's trace: ("n", regex, k)
# kills after the k-th matching write by its number (the start is written by
# one thread, so its numbers are stable); ("at", regex, k) kills at the k-th
# write the regex matches in the killed process itself (the lanes' work).
STEPS = {
    "the first torn tail moved aside": ("n", r"\ttorn-tail$", 1),
    "every torn tail moved aside, no line yet": ("n", r"\ttorn-tail$", 2),
    "its line in run.jsonl only": ("n", r"^run\.jsonl\tcontinuation$", 1),
    "its line in host.jsonl too": ("n", r"^host\.jsonl\tcontinuation$", 1),
    "its line in anchors.jsonl too": ("n", r"^anchors\.jsonl\tcontinuation$", 1),
    "its line in the first model's run log": ("n", r"^models/m0/run\.jsonl\tcontinuation$", 1),
    "its line in the first model's logs": ("n", r"^models/m0/admission\.jsonl\tcontinuation$", 1),
    "its line in every log": ("n", r"^models/m1/admission\.jsonl\tcontinuation$", 1),
    "the crash's stop in run.jsonl, in no model's log": ("n", r"^run\.jsonl\tstop$", 1),
    "the crash's stop in the first model's log": ("n", r"^models/m0/run\.jsonl\tstop$", 1),
    "the first model's first cut_by line": ("n", r"^models/m0/run\.jsonl\thousehold$", 1),
    "one model's replaced lines written, not the other's": ("n", r"^models/m1/run\.jsonl\tstop$", 1),
    "the last model's first cut_by line": ("n", r"^models/m1/run\.jsonl\thousehold$", 1),
    "its first anchor, not pushed": ("n", r"^anchors\.jsonl\tanchor$", 1),
    "its first anchor pushed": ("n", r"^anchor-pushes\.jsonl\tpush$", 1),
    "its first decision": ("at", r"/admission\.jsonl\tdecision$", 1),
    "a round-1 record on disk": ("at", r"\.r1\.json\tfile$", 1),
    "a round-1 household line": ("at", r"/run\.jsonl\thousehold r1$", 1),
    "a lane ended": ("at", r"/run\.jsonl\tlane-end$", 1),
    "the close line": ("at", r"/run/run\.jsonl\tclose$", 1),
    "the final anchor": ("at", r"/run/anchors\.jsonl\tanchor$", 1000),  # resolved from the trace below
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return ck.make_base(tmp_path_factory.mktemp("again"))


def kill_of(base: ck.Base, step: str) -> dict:
    how, pattern, k = STEPS[step]
    if step == "the final anchor":
        return {"at": pattern, "count": sum(1 for _, p, lab in base.trace if p == "anchors.jsonl" and lab == "anchor")}
    if how == "n":
        return {"after": base.write_number(pattern, k)}
    found = sum(1 for _, p, lab in base.trace if __import__("re").search(pattern, f"/run/{p}\t{lab}"))
    assert found >= k, f"the uncut continuation never wrote {step!r}"
    return {"at": pattern, "count": k}


@pytest.mark.slow
def test_the_uncut_continuation_wrote_every_step_of_its_start_in_order(base):
    """The trace the points are named from is the order docs/RUN.md gives."""
    names = [f"{p}\t{lab}" for _, p, lab in base.trace]
    first = [
        names.index(f"{rel}\tcontinuation")
        for rel in (
            "run.jsonl",
            "host.jsonl",
            "anchors.jsonl",
            "anchor-pushes.jsonl",
            "resume.jsonl",
            "models/m0/run.jsonl",
            "models/m0/admission.jsonl",
            "models/m1/run.jsonl",
            "models/m1/admission.jsonl",
        )
    ]
    assert first == sorted(first) and first[0] == 2, names[:12]
    assert names[:2] == ["host.jsonl\ttorn-tail", "models/m0/run.jsonl\ttorn-tail"]
    # the crash cut a household with a record not yet lined (the kill came
    # right after a record): its replaced attempt line is in the start
    start = names[: names.index("anchors.jsonl\tanchor")]
    assert any(n.endswith("/run.jsonl\tattempt") for n in start), start


@pytest.mark.slow
@pytest.mark.parametrize("step", list(STEPS))
def test_a_continuation_killed_at_this_step_is_continued_to_a_complete_run(base, step):
    ck.carried_on(base, [kill_of(base, step)])


@pytest.mark.slow
@pytest.mark.parametrize(
    "steps",
    [
        ("its line in run.jsonl only", "its line in run.jsonl only"),
        ("the first model's first cut_by line", "its line in the first model's logs"),
        ("every torn tail moved aside, no line yet", "a round-1 record on disk"),
    ],
    ids=["twice at the same step", "cut lines, then its line", "torn tails, then a round-1 record"],
)
def test_two_continuations_killed_in_turn_are_continued_to_a_complete_run(base, steps):
    ck.carried_on(base, [kill_of(base, s) for s in steps])
