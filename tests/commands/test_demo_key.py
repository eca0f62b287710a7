"""The demo signs with a key of its own, made outside its run directories (issue 33)."""

from __future__ import annotations

import hashlib
import stat

from confirmatory.commands.demo import DEMO_DIR, REFERENCE_DESIGN, demo_key, signed_demo_design
from confirmatory.design.load import load_design
from confirmatory.engine.preflight import signer_problems


def test_the_demo_key_is_made_once_at_mode_0600_beside_the_runs_and_reused(tmp_path):
    path, vkey = demo_key(tmp_path / "runs")
    assert path == tmp_path / "runs" / ".keys" / "demo.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    assert demo_key(tmp_path / "runs") == (path, vkey)
    assert path.read_bytes() == before


def test_the_demo_runs_a_copy_of_the_bundled_design_that_pins_its_key_and_keeps_every_pin(tmp_path):
    bundled = REFERENCE_DESIGN.read_bytes()
    copy = signed_demo_design(REFERENCE_DESIGN, tmp_path / "runs")
    assert copy == tmp_path / "runs" / ".designs" / "reference.toml"
    assert REFERENCE_DESIGN.read_bytes() == bundled  # the bundled design is never changed
    loaded, original = load_design(copy), load_design(REFERENCE_DESIGN)
    _, vkey = demo_key(tmp_path / "runs")
    assert loaded.design.anchors.signer is not None and loaded.design.anchors.signer.verifier_key == vkey
    assert signer_problems(loaded) == []
    # the same pinned files, with the same sha256, and the same households
    assert {k.rsplit("/", 1)[-1]: v for k, v in loaded.pins.items()} == original.pins
    assert loaded.households == original.households
    assert sorted(loaded.pins.values()) == sorted(
        hashlib.sha256((DEMO_DIR / rel).read_bytes()).hexdigest() for rel in original.pins
    )


def test_a_design_of_the_users_own_is_run_as_it_is(tmp_path):
    mine = tmp_path / "study.toml"
    mine.write_text(REFERENCE_DESIGN.read_text())
    assert signed_demo_design(mine, tmp_path / "runs") == mine
    assert not (tmp_path / "runs" / ".keys").exists()
