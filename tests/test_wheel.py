"""The wheel that ``python -m build`` makes: it holds no answer, installs into a fresh environment and runs the
course's commands.

The answers (notebooks/instructor/: ``solutions.py`` and the Otter-Grader notebook) live in the repository,
beside the course's notebooks, and not in the package, so that a student's install has none.

The build runs on a copy of the checkout's files (so no build folder is left in it), without build isolation
(no download of setuptools); the fresh virtual environment gets the wheel with ``--no-index`` and, for its
two dependencies, a folder that links numpy's and matplotlib's installed files and theirs, and nothing
else of this environment: so it is the README's plain install, offline, with no notebook libraries.
"""

import importlib.metadata
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement

import sgrad
from conftest import answer_lines

ROOT = Path(__file__).resolve().parents[1]
# What the build reads: the packages, the notebooks it puts in the wheel, and the build's own files.
BUILD_INPUTS = ("sgrad", "data_gen", "notebooks", "setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in",
                "README.md")

pytest.importorskip("build", reason="the dev extra's 'build' makes the wheel")


def plain_dependencies():
    """The installed distributions that sgrad's own requirements (numpy, matplotlib) bring in, by name."""
    found, todo = {}, [Requirement(r).name for r in importlib.metadata.requires("sgrad")
                       if not Requirement(r).marker]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)
        for text in found[name].requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def link_dependencies(folder):
    """A folder of links to every top-level file and folder of the plain dependencies (and their metadata)."""
    folder.mkdir()
    for dist in plain_dependencies().values():
        tops = {Path(str(file)).parts[0] for file in dist.files or [] if not str(file).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel, built from a copy of the checkout's files."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for name in BUILD_INPUTS:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")}
                                             if (ROOT / name).is_dir() else {}))
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel, = (root / "dist").glob("sgrad-*-py3-none-any.whl")
    assert wheel.name == f"sgrad-{sgrad.__version__}-py3-none-any.whl"
    return wheel


@pytest.fixture(scope="module")
def fresh(built):
    """``(bin, workdir)``: a fresh environment with the wheel installed, and an empty folder to run in."""
    wheel, root = built, built.parents[1]
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    installed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    site = subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "plain_dependencies.pth").write_text(f"{link_dependencies(root / 'dependencies')}\n")
    work = root / "work"
    work.mkdir()
    return bin_dir, work


def run(fresh, program, *args, timeout=120):
    """``program`` (``sgrad`` or ``python``) of the fresh environment, in its empty folder, with a bare environment."""
    bin_dir, work = fresh
    return subprocess.run([str(bin_dir / program), *args], cwd=work, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1", "HOME": str(work)})


def test_the_wheel_holds_the_students_notebooks_and_no_solution(fresh):
    bin_dir, _ = fresh
    result = run(fresh, "python", "-c", "import sgrad, pathlib; p = pathlib.Path(sgrad.__file__).parent; print(p); "
                                        "print(sorted(f.name for f in (p / 'notebooks').iterdir()))")
    assert result.returncode == 0, result.stderr
    listing = result.stdout.splitlines()
    assert listing[0].startswith(str(bin_dir.parent))  # the wheel's sgrad, not the checkout's
    assert eval(listing[1]) == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_version(fresh):
    result = run(fresh, "sgrad", "--version")
    assert (result.returncode, result.stdout) == (0, f"sgrad {sgrad.__version__}\n")


def test_compare_at_tiny_sizes(fresh):
    result = run(fresh, "sgrad", "compare", "--bits", "5", "--train", "64", "--test", "32", "--epochs", "2",
                 "--hidden", "8,8", "--out", "out", "--checkpoint-every", "0")
    assert result.returncode == 0, result.stderr
    assert [line.split("|")[1].strip() for line in result.stdout.splitlines()[2:]] == ["backprop", "no-bprop", "dni",
                                                                                      "cdni"]
    assert {"compare.png", "history.json", "results.md"} <= {p.name for p in (fresh[1] / "out").iterdir()}


def test_notebooks_copies_the_course_for_a_student(fresh):
    result = run(fresh, "sgrad", "notebooks", "class")
    assert result.returncode == 0, result.stderr
    copied = sorted((fresh[1] / "class").iterdir())
    assert [p.name for p in copied] == [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    assert all(p.read_bytes() == (ROOT / "notebooks" / p.name).read_bytes() for p in copied)
    again = run(fresh, "sgrad", "notebooks", "class")
    assert again.returncode == 2 and len(again.stderr.splitlines()) == 1


def test_grade_without_the_notebook_libraries_says_what_to_install_in_one_line(fresh):
    result = run(fresh, "sgrad", "grade", "missing.ipynb")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "sgrad grade: error: grading runs notebooks in a Jupyter kernel and needs nbformat, jupyter_client, ipykernel; "
        "this Python has no nbformat and no jupyter_client and no ipykernel: install them with 'python -m pip install "
        "nbformat jupyter_client ipykernel' (or sgrad's notebooks extra, see the README)"]


@pytest.fixture(scope="module")
def wheel_files(built):
    """The files of the wheel: ``{name: bytes}``."""
    with zipfile.ZipFile(built) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_the_wheel_holds_the_two_packages_and_nothing_of_the_repository_around_them(wheel_files):
    tops = {name.split("/")[0] for name in wheel_files}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"sgrad", "data_gen"}
    assert "sgrad/nn/layers.py" in wheel_files and "sgrad/course/edition.py" in wheel_files


def test_the_wheel_holds_no_solution(wheel_files):
    # sgrad.course.autograder writes Otter's markers around the answers it reads from a clone, so it names them.
    marked = [name for name, data in wheel_files.items() if b"BEGIN SOLUTION" in data]
    assert marked in ([], ["sgrad/course/autograder.py"])
    assert [name for name in wheel_files if PurePosixPath(name).stem == "solutions"] == []
    students = {f"sgrad/notebooks/{p.name}" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert {name for name in wheel_files if name.endswith(".ipynb")} == students
    assert [name for name in wheel_files if "otter" in name or "instructor" in name] == []
    holding = [(name, line) for name, data in wheel_files.items() for line in answer_lines() if line.encode() in data]
    assert holding == []


def test_the_solutions_the_wheel_leaves_out_are_in_the_repository():
    """The test above can fail: what it looks for is in the checkout, where the instructor keeps it."""
    instructor = ROOT / "notebooks" / "instructor"
    assert "BEGIN SOLUTION" in (instructor / "07_homework.ipynb").read_text()
    answers = (instructor / "solutions.py").read_text()
    assert len(answer_lines()) > 10 and all(line in answers for line in answer_lines())
