"""``sgrad notebooks DEST``, run as a student's instructor runs it: the console script in a subprocess.

It copies the course's numbered notebooks, exactly as committed, and nothing else; it never overwrites a
notebook already in DEST unless told to, and a bad DEST ends the command in one line.
"""

import subprocess
import sys
from pathlib import Path

SGRAD = Path(sys.executable).parent / "sgrad"
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
STUDENT_NOTEBOOKS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def sgrad_notebooks(cwd, *args):
    return subprocess.run([str(SGRAD), "notebooks", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_students_notebooks_are_the_twelve_of_the_course():
    assert [p.name[:3] for p in STUDENT_NOTEBOOKS] == [f"{i:02d}_" for i in range(1, 13)]


def test_copies_every_students_notebook_as_committed_and_nothing_else(tmp_path):
    result = sgrad_notebooks(tmp_path, "class/week1")
    assert result.returncode == 0, result.stderr
    dest = tmp_path / "class" / "week1"
    assert sorted(p.name for p in dest.iterdir()) == [p.name for p in STUDENT_NOTEBOOKS]
    assert all((dest / p.name).read_bytes() == p.read_bytes() for p in STUDENT_NOTEBOOKS)
    assert result.stderr.strip() == "copied 12 notebooks into class/week1: open them with 'jupyter lab class/week1' " \
                                    "(Jupyter is in sgrad's notebooks extra)"


def test_the_homework_goes_out_with_its_exercises_as_stubs(tmp_path):
    assert sgrad_notebooks(tmp_path, "out").returncode == 0
    homework = (tmp_path / "out" / "07_homework.ipynb").read_text()
    assert homework.count("raise NotImplementedError") >= 3
    assert not list((tmp_path / "out").rglob("*instructor*")) and not list((tmp_path / "out").rglob("*solution*"))


def test_refuses_to_overwrite_a_students_notebook_and_copies_nothing(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "07_homework.ipynb").write_text("my answers")
    result = sgrad_notebooks(tmp_path, "mine")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "sgrad notebooks: error: mine already holds 07_homework.ipynb; a student's work may be in them, so nothing "
        "was copied: choose another folder, or add --force to overwrite them"]
    assert sorted(p.name for p in dest.iterdir()) == ["07_homework.ipynb"]
    assert (dest / "07_homework.ipynb").read_text() == "my answers"


def test_force_overwrites(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "07_homework.ipynb").write_text("my answers")
    assert sgrad_notebooks(tmp_path, "mine", "--force").returncode == 0
    assert (dest / "07_homework.ipynb").read_bytes() == (NOTEBOOKS / "07_homework.ipynb").read_bytes()
    assert len(list(dest.iterdir())) == 12


def test_a_file_as_the_destination_fails_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    result = sgrad_notebooks(tmp_path, "notes.txt")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "sgrad notebooks: error: notes.txt is a file, not a folder; choose a folder for the notebooks"]


def test_a_destination_below_a_file_fails_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    result = sgrad_notebooks(tmp_path, "notes.txt/class")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "sgrad notebooks: error: cannot copy the notebooks into notes.txt/class: Not a directory"]


def test_no_destination_is_a_usage_error_in_one_line(tmp_path):
    result = sgrad_notebooks(tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["sgrad notebooks: error: the following arguments are required: DEST "
                                          "(see 'sgrad notebooks --help')"]
