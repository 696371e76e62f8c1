"""What ``pip install`` gives: a wheel of sgrad and data_gen, without the homework's answers.

The answers (notebooks/instructor/: ``solutions.py`` and the Otter-Grader notebook) live in the repository,
beside the course's notebooks, and not in the package, so that a student's install has none.  The wheel is
built from a copy of the checkout, by pip with this environment's setuptools, and read as the zip it is.
"""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import answer_lines

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The files of a wheel built from the checkout: ``{name: bytes}``."""
    folder = tmp_path_factory.mktemp("wheel")
    src = folder / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "dist",
                                                             "*.egg-info", ".*_cache", ".hypothesis", "_build"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(folder / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (built,) = (folder / "dist").glob("sgrad-*.whl")
    with zipfile.ZipFile(built) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_the_wheel_holds_the_two_packages_and_nothing_of_the_repository_around_them(wheel):
    tops = {name.split("/")[0] for name in wheel}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"sgrad", "data_gen"}
    assert "sgrad/layers.py" in wheel and "sgrad/course/checkers.py" in wheel and "sgrad/course/edition.py" in wheel


def test_the_wheel_holds_no_solution(wheel):
    # sgrad.course.autograder writes Otter's markers around the answers it reads from a clone, so it names them.
    marked = [name for name, data in wheel.items() if b"BEGIN SOLUTION" in data]
    assert marked in ([], ["sgrad/course/autograder.py"])
    assert [name for name in wheel if pathlib.PurePosixPath(name).stem == "solutions"] == []
    assert [name for name in wheel if name.endswith(".ipynb") or "otter" in name or "instructor" in name] == []
    holding = [(name, line) for name, data in wheel.items() for line in answer_lines()
               if line.encode() in data]
    assert holding == []


def test_the_solutions_the_wheel_leaves_out_are_in_the_repository():
    """The test above can fail: what it looks for is in the checkout, where the instructor keeps it."""
    instructor = ROOT / "notebooks" / "instructor"
    assert "BEGIN SOLUTION" in (instructor / "07_homework.ipynb").read_text()
    answers = (instructor / "solutions.py").read_text()
    assert len(answer_lines()) > 10 and all(line in answers for line in answer_lines())
