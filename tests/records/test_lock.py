"""The run's lock, asked about while a real second process holds it."""

from __future__ import annotations

from pathlib import Path

from processes import held_by_another_process

from confirmatory.records import lock as runlock


def test_the_lock_is_beside_the_run_directory_where_run_command_takes_it(tmp_path):
    run_dir = tmp_path / "runs" / "study-1"
    assert runlock.lock_path(run_dir) == tmp_path / "runs" / ".study-1.lock"
    assert runlock.lock_path(str(run_dir)) == runlock.lock_path(run_dir)


def test_nobody_holds_the_lock_of_a_run_nobody_runs_and_asking_leaves_no_file(tmp_path):
    # A copied run (no lock file beside it): asking made a .run.lock in the
    # reviewer's folder, which a read-only view of that folder then took for a runner's.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert runlock.held(run_dir) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    # A finished run's lock file (it stays: removing one breaks the lock for a
    # process that opened it) is held by nobody, and asking leaves it as it was.
    runlock.lock_path(run_dir).touch()
    assert runlock.held(run_dir) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock", "run"]


def test_dot_a_relative_path_and_a_symlink_name_the_runners_lock(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (tmp_path / "link").symlink_to(run_dir)
    monkeypatch.chdir(run_dir)
    with held_by_another_process(runlock.lock_path(run_dir)):
        for alias in (Path("."), Path("../r1"), tmp_path / "link"):
            assert runlock.held(alias) is True, alias


def test_a_lock_held_by_another_process_is_held_and_free_again_once_it_lets_go(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with held_by_another_process(runlock.lock_path(run_dir)):
        assert runlock.held(run_dir) is True
        assert runlock.held(run_dir) is True  # asking does not take it away
    assert runlock.held(run_dir) is False
    # The holder's file existed before we asked: it is not ours to remove.
    assert runlock.lock_path(run_dir).exists()


def test_a_run_directory_whose_parent_does_not_exist_is_held_by_nobody(tmp_path):
    assert runlock.held(tmp_path / "no" / "such" / "run") is False
    assert not (tmp_path / "no").exists()
    (tmp_path / "a-file").write_text("")
    assert runlock.held(tmp_path / "a-file" / "run") is False  # its "parent" is a file
