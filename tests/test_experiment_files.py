"""The files an experiment writes (sgrad.training.results_folder): its folder, atomic writes, where checkpoints go."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sgrad import atomic_files
from sgrad.training import results_folder


def test_atomic_write_text_creates_the_folder_and_replaces_the_file(tmp_path):
    path = tmp_path / "out" / "results.md"
    atomic_files.atomic_write_text(path, "first\n")
    atomic_files.atomic_write_text(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["results.md"]


def test_an_interrupted_atomic_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "histories.json"
    atomic_files.atomic_write_text(path, json.dumps({"old": True}))

    def failing_replace(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(atomic_files.os, "replace", failing_replace)
    with pytest.raises(KeyboardInterrupt):
        atomic_files.atomic_write_text(path, json.dumps({"new": True}))
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["histories.json"]


def test_checkpoint_path_is_none_without_a_folder_or_a_period(tmp_path):
    assert results_folder.checkpoint_path(None, "dni", 5) is None
    assert results_folder.checkpoint_path(tmp_path, "dni", None) is None
    assert results_folder.checkpoint_path(tmp_path, "dni-depth3", 5) == tmp_path / "checkpoints" / "dni-depth3.npz"


def test_check_out_dir_refuses_a_folder_below_a_file_and_makes_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("a file\n")
    with pytest.raises(ValueError, match=f"out_dir {tmp_path}/notes.txt/out cannot be made: {tmp_path}/notes.txt "
                                         "is a file, not a folder"):
        results_folder.check_out_dir(tmp_path / "notes.txt" / "out")
    results_folder.check_out_dir(tmp_path / "new" / "deeper")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_out_dir_refuses_a_folder_it_may_not_write_in(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ValueError, match="you may not write in"):
        results_folder.check_out_dir(locked / "out")


def test_one_writer_refuses_a_second_holder_naming_the_first_and_lets_go_when_done(tmp_path):
    out = tmp_path / "out"
    with results_folder.one_writer(out):
        with pytest.raises(results_folder.FolderInUse) as info, results_folder.one_writer(out):
            pass
        assert str(info.value) == (f"{out} is being written by another sgrad run (process {os.getpid()}); wait for "
                                   "it to end, or give this run another folder")
    with results_folder.one_writer(out):  # let go: the next run takes the folder
        assert (out / results_folder.LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_ctrl_c_during_an_atomic_write_comes_once_the_new_file_is_in_place(tmp_path):
    """In a process of its own, with Python's own Ctrl-C handler: the write's callback signals its own process half-way,
    and the KeyboardInterrupt comes after the rename, with nothing on stderr."""
    path = tmp_path / "checkpoint.npz"
    code = f"""
import os, signal, numpy as np
from sgrad import atomic_files
signal.signal(signal.SIGINT, signal.default_int_handler)
path = {str(path)!r}
atomic_files.atomic_write(path, lambda file: np.savez(file, weights=np.zeros(3)))
def interrupted(file):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, delivered at once unless held
    np.savez(file, weights=np.ones(3))
try:
    atomic_files.atomic_write(path, interrupted)
except KeyboardInterrupt:
    print("interrupted after the write")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "interrupted after the write\n" and result.stderr == ""
    np.testing.assert_array_equal(np.load(path)["weights"], np.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]
