"""``sgrad grade NOTEBOOK`` runs a student's notebook and grades the classes it defines.

The graded notebooks are notebooks/08_homework.ipynb as shipped (its stubs), and copies of it whose stub
cells hold the answers of sgrad/course/solutions.py: all correct, one planted mistake per exercise, or
broken (a syntax error, a method that never returns, a deleted check cell); and a notebook whose kernel
dies.  Each is graded once, all at the same time, by the real command in a subprocess (module-scoped
fixture); the tests read its report and exit status.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import nbformat
import pytest

from conftest import started
from sgrad.course.grader import EXERCISES
from sgrad.course.solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, edited

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "08_homework.ipynb"
COMMAND = [sys.executable, "-m", "sgrad", "grade"]
MARK = "SGRAD_TEST_GRADER"  # an environment variable set for each grader; its kernel inherits it


def marked(value):
    """The pids of the processes whose environment holds MARK=value: a grader and the kernels it started."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{MARK}={value}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def grader(arguments, value, **options):
    """Start the grader with MARK=value in its environment, in a session of its own."""
    return subprocess.Popen(arguments, env={**os.environ, MARK: value}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **options)
TIMEOUT = 5  # seconds, for the notebook whose method never returns: the longest of its other cells takes about 1 s

CORRECT = {"MyLayer": MY_LAYER, "MyDNI": MY_DNI, "MyFullDNI": MY_FULL_DNI}
MISTAKES = {
    "MyLayer": edited(MY_LAYER, ("self.nonlin_deriv(self.output)",
                                 "self.nonlin_deriv(self.input @ self.weights + self.bias)")),
    "MyDNI": edited(MY_DNI, ("delta_z @ self.weights.T", "self.backward(self.synthetic_gradient)"),
                    ("self.weights -= self.alpha * input.T @ delta_z\n        self.bias -= self.alpha * delta_z.sum(axis=0)",
                     "self.update(self.alpha)")),
    "MyFullDNI": edited(MY_FULL_DNI, ("h_c.T", "self.output.T")),
}
BROKEN = {
    "MyLayer": edited(MY_LAYER, ("class MyLayer(Layer):", "class MyLayer(Layer)")),
    "MyDNI": edited(MY_DNI, ("        output = self.forward(input)\n", "        while True:\n            pass\n")),
    "MyFullDNI": MY_FULL_DNI,
}
# What each exercise's report says about the planted mistake.
MISTAKE_NAMED = {
    1: "Hint (f' evaluated at the pre-activation)",
    2: "forward_and_synthetic_update() called self.backward() and self.update(), which this exercise forbids.",
    3: "Hint (the condition left out)",
}


def handed_in(answers, *, without=()):
    """Notebook 08 with the stub cell of each class in ``answers`` replaced by its answer, and the cells
    whose source is in ``without`` deleted."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        for class_name, answer in answers.items():
            if cell.cell_type == "code" and cell.source.startswith(f"class {class_name}("):
                cell.source = answer
    notebook.cells = [cell for cell in notebook.cells if cell.source not in without]
    return notebook


@dataclass
class Run:
    status: int
    report: str
    errors: str

    def exercise(self, number):
        """The lines of the report about exercise ``number``, from its ✓ or ✗ line to the next blank one."""
        lines = self.report.splitlines()
        start = next(i for i, line in enumerate(lines) if line[2:].startswith(f"Exercise {number},"))
        end = next(i for i in range(start + 1, len(lines) + 1) if i == len(lines) or not lines[i].strip()
                   or lines[i][2:].startswith("Exercise "))
        return "\n".join(lines[start:end])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{name: Run} for each notebook, graded at the same time, each by the real command in its own process."""
    folder = tmp_path_factory.mktemp("handed_in")
    notebooks = {"correct": handed_in(CORRECT), "mistakes": handed_in(MISTAKES),
                 "broken": handed_in(BROKEN, without=("dni_result = check_dni_update(MyDNI)\nprint(dni_result)",)),
                 "exits": nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nos._exit(1)")])}
    paths = {"stubs": NOTEBOOK}
    for name, notebook in notebooks.items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(notebook, paths[name])
    options = {"broken": ["--timeout", str(TIMEOUT)]}
    value = uuid.uuid4().hex
    processes = {name: grader(COMMAND + [str(path)] + options.get(name, []), value) for name, path in paths.items()}
    runs = {}
    try:
        for name, process in processes.items():
            report, errors = process.communicate(timeout=300)
            runs[name] = Run(process.returncode, report, errors)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    runs["left running"] = marked(value)
    return runs


def test_every_kernel_ends_with_its_grader(graded):
    assert graded["left running"] == []


def test_grading_expects_the_class_names_of_the_shipped_stubs():
    sources = [cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells if cell.cell_type == "code"]
    for exercise in EXERCISES:
        assert sum(source.startswith(f"class {exercise.class_name}(") for source in sources) == 1, exercise


def test_a_correct_notebook_passes_every_exercise_and_exits_0(graded):
    run = graded["correct"]
    assert run.status == 0, run.report + run.errors
    for exercise in EXERCISES:
        assert run.exercise(exercise.number).startswith(f"✓ {exercise.title}\n"), run.report
    assert run.report.rstrip().endswith("3 of 3 exercises passed.")
    assert "Cells that raised an error" not in run.report


def test_the_shipped_stubs_fail_every_exercise_as_not_implemented_and_exit_1(graded):
    run = graded["stubs"]
    assert run.status == 1, run.report + run.errors
    methods = {1: "backward()", 2: "forward_and_synthetic_update()", 3: "update_synthetic_weights()"}
    for exercise in EXERCISES:
        assert run.exercise(exercise.number) == (
            f"✗ {exercise.title}\n    not implemented yet: fill in {methods[exercise.number]}"), run.report
    assert run.report.rstrip().endswith("0 of 3 exercises passed.")


@pytest.mark.parametrize("number", sorted(MISTAKE_NAMED))
def test_a_planted_mistake_fails_its_exercise_with_the_checkers_message(graded, number):
    run = graded["mistakes"]
    assert run.status == 1
    section = run.exercise(number)
    assert section.startswith(f"✗ {EXERCISES[number - 1].title}\n"), run.report
    assert MISTAKE_NAMED[number] in section


def test_a_class_cell_that_does_not_compile_fails_its_exercise_and_says_why(graded):
    section = graded["broken"].exercise(1)
    assert section.startswith("✗ Exercise 1, Layer.backward (MyLayer)\n    MyLayer is not defined: keep the name")
    assert "\n    The cell that defines it, code cell 3 (`class MyLayer(Layer)`), raised SyntaxError" in section


def test_a_method_that_never_returns_is_interrupted_and_fails_its_exercise_alone(graded):
    run = graded["broken"]
    assert run.status == 1
    assert run.exercise(2) == (f"✗ Exercise 2, DNI.forward_and_synthetic_update (MyDNI)\n    the check did not "
                               f"finish within {TIMEOUT} s: does DNI.forward_and_synthetic_update loop forever?")
    assert run.exercise(3).startswith("✓ Exercise 3")


def test_the_cells_that_raised_are_listed_before_the_exercises(graded):
    report = graded["broken"].report
    listed = report[report.index("Cells that raised an error:"):report.index("✗ Exercise 1")]
    assert "(`class MyLayer(Layer)`): SyntaxError" in listed
    assert "(`backward_result = check_layer_backward(MyLayer)`): NameError: name 'MyLayer' is not defined" in listed


def test_a_kernel_that_dies_fails_every_exercise_and_says_so(graded):
    run = graded["exits"]
    assert run.status == 1
    for exercise in EXERCISES:
        assert run.exercise(exercise.number) == (f"✗ {exercise.title}\n    the kernel died before this check "
                                                 "finished: does the notebook call exit(), or run out of memory?")


@pytest.mark.parametrize("contents, message", [
    (None, "error: no notebook at"),
    ("hello", "is not a Jupyter notebook (NotJSONError"),
    ("{}", "is not a Jupyter notebook"),
])
def test_a_missing_file_or_one_that_is_not_a_notebook_exits_2(tmp_path, contents, message):
    path = tmp_path / "homework.ipynb"
    if contents is not None:
        path.write_text(contents)
    run = subprocess.run(COMMAND + [str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith("sgrad grade: error: ") and message in run.stderr


def test_a_timeout_that_is_not_a_positive_number_exits_2():
    run = subprocess.run(COMMAND + [str(NOTEBOOK), "--timeout", "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--timeout: expected at least 1 second; got 0" in run.stderr


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_ctrl_c_prints_one_line_exits_130_and_ends_the_kernel(tmp_path):
    notebook = tmp_path / "loops.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(0.05)")]), notebook)
    value = uuid.uuid4().hex
    with started([sys.executable, "-m", "sgrad", "grade", str(notebook)], env={**os.environ, MARK: value}) as run:
        deadline = time.monotonic() + 60
        while len(marked(value)) < 2:  # the grader and its kernel
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        time.sleep(2)  # the kernel is into the endless cell
        run.send_signal(signal.SIGINT)
        report, errors = run.communicate(timeout=60)
    assert run.returncode == 130
    assert report == ""
    assert errors == "sgrad grade: interrupted; nothing was graded; the notebook is as it was\n"
    deadline = time.monotonic() + 10  # the kernel's last moments after its shutdown message
    while marked(value) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(value) == []


LAUNCHER = """\
import os, pathlib, sys
starts = pathlib.Path(os.environ["SGRAD_TEST_KERNEL_STARTS"])
started = int(starts.read_text()) if starts.exists() else 0
starts.write_text(str(started + 1))
# A kernel's own log, as ipykernel's can be at shutdown: it belongs to no report.
print("Traceback (most recent call last): ZMQError: Socket operation on non-socket", file=sys.stderr, flush=True)
if started < int(os.environ["SGRAD_TEST_KERNEL_FAILURES"]):
    sys.exit(f"lost the race for its ports (start {started + 1})")  # dies before it answers
from ipykernel.kernelapp import launch_new_instance
launch_new_instance()
"""


def flaky_kernel(tmp_path, failures):
    """An environment whose python3 kernel logs a traceback to its stderr and dies at its first ``failures``
    starts, and a file counting its starts."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "launch.py").write_text(LAUNCHER)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(spec / "launch.py"), "-f", "{connection_file}"],
        "display_name": "Python 3 (dies at its first starts)", "language": "python"}))
    starts = tmp_path / "starts"
    return {**os.environ, "JUPYTER_PATH": str(tmp_path / "jupyter"), "SGRAD_TEST_KERNEL_STARTS": str(starts),
            "SGRAD_TEST_KERNEL_FAILURES": str(failures)}, starts


def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path):
    env, starts = flaky_kernel(tmp_path, failures=1)
    path = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    run = subprocess.run(COMMAND + [str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert starts.read_text() == "2"
    assert run.returncode == 1, run.stderr
    assert run.stdout.rstrip().endswith("0 of 3 exercises passed.")
    assert "MyLayer is not defined" in run.stdout
    assert "Traceback" not in run.stderr


def test_a_kernel_that_never_answers_exits_2_after_three_starts(tmp_path):
    env, starts = flaky_kernel(tmp_path, failures=10)
    run = subprocess.run(COMMAND + [str(NOTEBOOK)], capture_output=True, text=True, timeout=120, env=env)
    assert starts.read_text() == "3"
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith("sgrad grade: error: could not run a python3 Jupyter kernel (")
    assert ("3 tries; its last words: 'lost the race for its ports (start 3)'); "
            "install one with: pip install -e '.[notebooks]'") in run.stderr
    assert "Traceback" not in run.stderr


def test_the_one_grading_command_is_sgrad_grade_in_the_readme_the_notebook_and_the_help():
    readme = (NOTEBOOK.parents[1] / "README.md").read_text()
    student_page = NOTEBOOK.read_text()
    usage = subprocess.run([sys.executable, "-m", "sgrad", "--help"], capture_output=True, text=True, timeout=60)
    assert "sgrad grade path/to/08_homework.ipynb" in readme
    assert "`sgrad grade 08_homework.ipynb`" in student_page
    assert "sgrad grade checks a student's homework notebook" in " ".join(usage.stdout.split())
    for text in (readme, student_page, usage.stdout):
        assert "sgrad.grading" not in text and "sgrad.checks" not in text
    old_command = subprocess.run([sys.executable, "-m", "sgrad.grading"], capture_output=True, text=True, timeout=60)
    assert "No module named sgrad.grading" in old_command.stderr
