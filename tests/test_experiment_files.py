"""The files an experiment writes (sgrad.experiments.files): its folder, atomic writes, where checkpoints go."""

import json
import os

import pytest

from sgrad.experiments import files


def test_atomic_write_text_creates_the_folder_and_replaces_the_file(tmp_path):
    path = tmp_path / "out" / "results.md"
    files.atomic_write_text(path, "first\n")
    files.atomic_write_text(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["results.md"]


def test_an_interrupted_atomic_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "histories.json"
    files.atomic_write_text(path, json.dumps({"old": True}))

    def failing_replace(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(files.os, "replace", failing_replace)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write_text(path, json.dumps({"new": True}))
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["histories.json"]


def test_checkpoint_path_is_none_without_a_folder_or_a_period(tmp_path):
    assert files.checkpoint_path(None, "dni", 5) is None
    assert files.checkpoint_path(tmp_path, "dni", None) is None
    assert files.checkpoint_path(tmp_path, "dni-depth3", 5) == tmp_path / "checkpoints" / "dni-depth3.npz"


def test_check_out_dir_refuses_a_folder_below_a_file_and_makes_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("a file\n")
    with pytest.raises(ValueError, match=f"out_dir {tmp_path}/notes.txt/out cannot be made: {tmp_path}/notes.txt "
                                         "is a file, not a folder"):
        files.check_out_dir(tmp_path / "notes.txt" / "out")
    files.check_out_dir(tmp_path / "new" / "deeper")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_out_dir_refuses_a_folder_it_may_not_write_in(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ValueError, match="you may not write in"):
        files.check_out_dir(locked / "out")
