"""The homework in Otter-Grader: Otter's own commands build the student release and the autograder from the
instructor's notebook (notebooks/instructor/07_homework.ipynb), and grade as ``sgrad grade`` does.

Runs ``otter assign`` once, then ``otter run`` and ``sgrad grade`` on the same three notebooks: Otter's
student release with the answers, as released (the stubs), and with one planted mistake per exercise.
Needs the autograder extra (``pip install -e '.[autograder]'``, which CI installs); slow (about a minute
of kernels), and run by CI like every test.
"""

import json
import os
import pathlib
import subprocess
import sys
import uuid

import nbformat
import pytest

from conftest import copy_of_the_code
from sgrad.course import autograder
from sgrad.course.grader import EXERCISES
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, handed_in
from grading_helpers import Run, none_left
from test_grading import MISTAKES

MARK = "SGRAD_TEST_AUTOGRADER"  # in the environment of each command; Otter's kernels inherit it


def marked(value):
    """The pids of the processes whose environment holds MARK=value."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{MARK}={value}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found

OTTER = pathlib.Path(sys.executable).parent / "otter"
pytestmark = pytest.mark.skipif(not OTTER.exists(), reason="needs Otter-Grader: pip install -e '.[autograder]'")
ENV = {**os.environ, "SGRAD_SMOKE": "1"}
QUESTIONS = [name for name, *_ in autograder.QUESTIONS]


def test_the_instructor_notebook_is_notebook_08_with_the_answers_and_the_checkers():
    built = autograder.instructor_notebook()
    committed = nbformat.read(autograder.INSTRUCTOR, as_version=4)
    assert [(cell.cell_type, cell.source) for cell in committed.cells] == [
        (cell.cell_type, cell.source) for cell in built.cells], "run: python -m sgrad.course.autograder"
    tests = [cell.source for cell in built.cells if "raise_on_failure=True" in cell.source]
    assert tests == [f"from sgrad.course import {checker}\n_ = {checker}({name}, raise_on_failure=True)"
                     for _, name, _, checker in autograder.QUESTIONS]


@pytest.fixture(scope="module")
def assigned(tmp_path_factory):
    """``otter assign``'s output folder: student/ (the release) and autograder/ (the zip)."""
    dist = tmp_path_factory.mktemp("otter") / "dist"
    run = subprocess.run([str(OTTER), "assign", str(autograder.INSTRUCTOR), str(dist)], capture_output=True,
                         text=True, timeout=600, env=ENV)
    assert run.returncode == 0, run.stdout + run.stderr
    return dist


def test_otter_assign_releases_notebook_08s_stubs(assigned):
    released = nbformat.read(assigned / "student" / "07_homework.ipynb", as_version=4)
    homework = nbformat.read(autograder.HOMEWORK, as_version=4)
    stubs = [cell.source for cell in homework.cells if cell.source.startswith("class My")]
    assert [cell.source.rstrip() for cell in released.cells if cell.source.startswith("class My")] == stubs
    assert sum(cell.source.startswith("grader.check(") for cell in released.cells) == 3
    assert not any("BEGIN SOLUTION" in cell.source or "self.weights_grad =" in cell.source
                   for cell in released.cells)


@pytest.fixture(scope="module")
def verdicts(assigned, tmp_path_factory):
    """{notebook: (Otter's pass per exercise, sgrad grade's)}, each graded by both tools' real commands."""
    folder = tmp_path_factory.mktemp("submissions")
    released = assigned / "student" / "07_homework.ipynb"
    zip_file = next((assigned / "autograder").glob("*.zip"))
    answers = {"correct": {"MyLayer": MY_LAYER, "MyDNI": MY_DNI, "MyFullDNI": MY_FULL_DNI}, "stubs": {},
               "mistakes": MISTAKES}
    found = {}
    value = uuid.uuid4().hex
    env = {**ENV, MARK: value}
    for name, answer in answers.items():
        path = folder / name / "07_homework.ipynb"
        path.parent.mkdir()
        nbformat.write(handed_in(answer, released), path)
        graded = subprocess.Popen([sys.executable, "-m", "sgrad", "grade", str(path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        out = folder / f"{name}-results"
        out.mkdir()
        otter = subprocess.run([str(OTTER), "run", "-a", str(zip_file), "-o", str(out), str(path)],
                               capture_output=True, text=True, timeout=600, env=env)
        report, errors = graded.communicate(timeout=600)
        assert otter.returncode == 0, otter.stdout + otter.stderr
        scores = {test["name"]: test["score"] for test in json.loads((out / "results.json").read_text())["tests"]
                  if test["name"] in QUESTIONS}
        run = Run(graded.returncode, report, errors)
        found[name] = ([scores[question] == 1 for question in QUESTIONS],
                       [run.exercise(exercise.number).startswith("✓") for exercise in EXERCISES])
    found["left running"] = marked(value)
    found["sandboxes left"] = not none_left(str(folder))
    return found


@pytest.mark.parametrize("name, expected", [("correct", [True] * 3), ("stubs", [False] * 3),
                                            ("mistakes", [False] * 3)])
def test_otter_run_and_sgrad_grade_give_the_same_verdicts(verdicts, name, expected):
    otter, sgrad = verdicts[name]
    assert otter == sgrad == expected


def test_no_kernel_of_either_tool_outlives_it(verdicts):
    assert verdicts["left running"] == []
    assert not verdicts["sandboxes left"]


def test_the_answers_are_read_as_text_from_the_instructor_folder_of_the_clone():
    assert autograder.answers() == {"MY_LAYER": MY_LAYER, "MY_DNI": MY_DNI, "MY_FULL_DNI": MY_FULL_DNI}
    assert autograder.SOLUTIONS.parent == autograder.INSTRUCTOR.parent == autograder.HOMEWORK.parent / "instructor"


def test_without_the_answers_the_instructor_notebook_says_where_they_live(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"notebooks/instructor/solutions\.py\), not in an installed sgrad"):
        autograder.instructor_notebook(solutions=tmp_path / "solutions.py")


def test_the_command_fails_in_one_line_where_the_package_has_no_clone_around_it(tmp_path):
    src = copy_of_the_code(tmp_path)  # sgrad and data_gen alone, as an installed package has them
    run = subprocess.run([sys.executable, "-m", "sgrad.course.autograder"], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(src)}, timeout=120)
    assert run.returncode == 1
    assert run.stderr.startswith(f"sgrad.course.autograder: the reference answers {src / 'notebooks'}")
    assert len(run.stderr.splitlines()) == 1 and run.stdout == ""
