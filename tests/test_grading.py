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
    return graded_together({name: COMMAND + [str(path)] + options.get(name, []) for name, path in paths.items()})


def graded_together(commands):
    """{name: Run} for each grader command, all run at the same time, and under "left running" the processes
    that any of them left behind."""
    value = uuid.uuid4().hex
    processes = {name: grader(command, value) for name, command in commands.items()}
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
@pytest.mark.parametrize("sent, status, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_prints_one_line_exits_130_or_143_and_ends_the_kernel(tmp_path, sent, status, said):
    notebook = tmp_path / "loops.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(0.05)")]), notebook)
    value = uuid.uuid4().hex
    with started(COMMAND + [str(notebook)], env={**os.environ, MARK: value}) as run:
        deadline = time.monotonic() + 60
        while len(marked(value)) < 2:  # the grader and its kernel
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        time.sleep(2)  # the kernel is into the endless cell
        run.send_signal(sent)
        report, errors = run.communicate(timeout=60)
    assert run.returncode == status
    assert report == ""
    assert errors == f"sgrad grade: {said}; nothing was graded; the notebook is as it was\n"
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
    assert "sgrad grade grades students' homework notebooks" in " ".join(usage.stdout.split())
    for text in (readme, student_page, usage.stdout):
        assert "sgrad.grading" not in text and "sgrad.checks" not in text
    old_command = subprocess.run([sys.executable, "-m", "sgrad.grading"], capture_output=True, text=True, timeout=60)
    assert "No module named sgrad.grading" in old_command.stderr


# --- verdicts a notebook cannot fake (issue 27, points 1 to 3) ------------------------------------------

SETUP = "import numpy as np\nfrom sgrad import DNI, Layer"
EMPTY = ["class MyLayer(Layer):\n    pass", "class MyDNI(DNI):\n    pass", "class MyFullDNI(MyDNI):\n    pass"]
DELEGATING = [
    "class MyLayer(Layer):\n    def backward(self, output_delta):\n        return Layer.backward(self, output_delta)",
    "class MyDNI(DNI):\n    def forward_and_synthetic_update(self, input, condition=None):\n"
    "        return super().forward_and_synthetic_update(input, condition)",
    "def hand_over(layer, target):\n    return layer.generator.update(target, layer.generator_alpha)\n\n"
    "class MyFullDNI(MyDNI):\n    def update_synthetic_weights(self, target_gradient):\n"
    "        return hand_over(self, target_gradient)"]
WRONG = [edited(MY_LAYER, ("self.nonlin_deriv(self.output)", "1.0")), edited(MY_DNI, ("-=", "+=")),
         edited(MY_FULL_DNI, ("0.5 * np.sum", "np.sum"))]
# A pre_run_cell hook that answers each grader's cell itself, with sgrad's own classes driven on the grader's
# inputs (the right arrays, the right nonce), and silences the grader's own answer.
FORGING_HOOK = '''\
import ast, json
import IPython.display
from IPython import get_ipython
from sgrad.course import driver

def forge(info):
    if "_sgrad_grader" not in info.raw_cell:
        return
    call = ast.parse(info.raw_cell).body[1].value
    key, class_name, inputs, nonce = [ast.literal_eval(argument) for argument in call.args[:4]]
    made = {"MyLayer": Layer, "MyDNI": DNI, "MyFullDNI": DNI}[class_name]
    record = driver.drive(key, made, driver.decode(json.loads(inputs)))
    IPython.display.display({driver.RESULT_TYPE: {"nonce": nonce, "record": driver.encode(record)}}, raw=True)
    IPython.display.display = lambda *args, **kwargs: None

get_ipython().events.register("pre_run_cell", forge)'''
OLD_FORMAT_HOOK = '''\
from IPython import get_ipython
from IPython.display import display

get_ipython().events.register("pre_run_cell", lambda info: display(
    {"application/vnd.sgrad.check+json": {"passed": True, "message": "ok"}}, raw=True))'''
PATCHES = '''\
import base64, json
import sgrad.course
import sgrad.course.checkers
from sgrad.course import CheckResult
np.allclose = lambda *args, **kwargs: True
np.testing.assert_allclose = lambda *args, **kwargs: None
np.array_equal = lambda *args, **kwargs: True
sgrad.course.checkers.judge = lambda *args, **kwargs: CheckResult("x", True, "ok")
sgrad.course.check_layer_backward = lambda *args, **kwargs: CheckResult("x", True, "ok")
base64.b64encode = lambda data: b"bm90IGFuIGFycmF5"'''
FAKE_LINES = '''\
print("✓ Exercise 1, Layer.backward (MyLayer)\\n\\n3 of 3 exercises passed.")
raise RuntimeError("\\n✓ Exercise 1, Layer.backward (MyLayer)\\n\\r\\x1b[2K✓ Exercise 2\\n3 of 3 exercises passed.")'''
ODD_RETURNS = [
    "class Always:\n    def __eq__(self, other):\n        return True\n\n    @property\n    def __class__(self):\n"
    "        return np.ndarray\n\n"
    + edited(MY_LAYER, ("return self.weight_output_delta @ self.weights.T", "return Always()")),
    "class Agreeable(np.ndarray):\n    def __eq__(self, other):\n        return np.ones(np.shape(other), bool)\n\n"
    + edited(MY_DNI, ("return input_delta, output", "return (2 * input_delta).view(Agreeable), output")),
    edited(MY_FULL_DNI, ("return loss", "return np.zeros((3000, 3000))"))]
EXITS = [MY_LAYER, edited(MY_DNI, ("        output = self.forward(input)\n",
                                   "        import os\n        os._exit(3)\n")), MY_FULL_DNI]


def notebook_of(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])


TRICKS = {
    "empty": notebook_of(SETUP, *EMPTY),
    "delegating": notebook_of(SETUP, *DELEGATING),
    "forging hook": notebook_of(SETUP, FORGING_HOOK, *EMPTY),
    "old-format hook": notebook_of(SETUP, OLD_FORMAT_HOOK, *EMPTY),
    "patches": notebook_of(SETUP, PATCHES, *WRONG),
    # The kernel speaks JSON to the grader: replaced, it dies at its next message.
    "json replaced": notebook_of(SETUP, "import json\njson.loads = lambda text: {'cases': []}\n"
                                        "json.dumps = lambda *args, **kwargs: '{}'", *EMPTY),
    "fake lines": notebook_of(SETUP, FAKE_LINES, *EMPTY),
    "odd returns": notebook_of(SETUP, *ODD_RETURNS),
    "exits": notebook_of(SETUP, *EXITS),
}


@pytest.fixture(scope="module")
def tricked(tmp_path_factory):
    """{name: Run} for each notebook of TRICKS, graded at the same time by the real command."""
    folder = tmp_path_factory.mktemp("tricks")
    commands = {}
    for name, notebook in TRICKS.items():
        path = folder / f"{name.replace(' ', '_')}.ipynb"
        nbformat.write(notebook, path)
        commands[name] = COMMAND + [str(path), "--timeout", "60"]
    return graded_together(commands)


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_no_trick_passes_an_exercise_it_did_not_earn(tricked, name):
    run = tricked[name]
    assert run.status == 1, run.report + run.errors
    earned = {"exits": {1}}.get(name, set())
    for exercise in EXERCISES:
        assert run.exercise(exercise.number).startswith("✓" if exercise.number in earned else "✗"), run.report
    assert run.report.rstrip().splitlines()[-1] == f"{len(earned)} of 3 exercises passed."
    assert tricked["left running"] == []


def test_a_class_that_defines_nothing_fails_each_exercise_for_not_defining_its_method(tricked):
    run = tricked["empty"]
    for exercise in EXERCISES:
        method = exercise.method_name
        assert f"{exercise.class_name} does not define {method}: it runs sgrad's {exercise.method}, which it " \
               "inherits." in run.exercise(exercise.number)
        assert f"class {exercise.class_name} (code cell {exercise.number + 1}, line 1) does not define {method} in " \
               "its body" in run.exercise(exercise.number)


def test_a_method_that_hands_its_work_to_sgrad_fails(tricked):
    run = tricked["delegating"]
    assert "backward() called Layer.backward(), which this exercise forbids." in run.exercise(1)
    assert ("forward_and_synthetic_update() called super().forward_and_synthetic_update(), which this exercise "
            "forbids.") in run.exercise(2)
    assert "update_synthetic_weights() called layer.generator.update(), which this exercise forbids." in run.exercise(3)


def test_a_hook_that_forges_the_graders_answers_is_read_in_the_source(tricked):
    run = tricked["forging hook"]
    for exercise in EXERCISES:
        section = run.exercise(exercise.number)
        # The forged arrays are sgrad's own, so they match; the verdict still fails, on the notebook's source.
        assert f"does not define {exercise.method_name} in its body" in section
        assert "The notebook changes what the grader relies on (listed above), so no verdict can be a pass." in section
    assert "Its answers on the grader's inputs match sgrad's, but the verdict cannot be a pass." in run.exercise(1)
    assert "    │ code cell 2, line 16 (`get_ipython().events.register(\"pre_run_cell\", forge)`): uses get_ipython" \
        in run.report


def test_a_hook_that_displays_a_passing_result_of_the_old_kind_changes_nothing(tricked):
    run = tricked["old-format hook"]
    for exercise in EXERCISES:
        assert f"does not define {exercise.method_name}: it runs sgrad's" in run.exercise(exercise.number)


def test_patched_comparisons_checkers_json_and_base64_leave_wrong_answers_wrong(tricked):
    run = tricked["patches"]
    for exercise in EXERCISES:
        section = run.exercise(exercise.number)
        assert ("the kernel's answer could not be read" in section or "could not run" in section
                or "is wrong" in section), section
        assert "The notebook changes what the grader relies on (listed above)" in section
    assert "(`np.allclose = lambda *args, **kwargs: True`): changes np.allclose at run time" in run.report
    assert "changes sgrad.course.checkers.judge at run time" in run.report


def test_what_the_notebook_prints_or_raises_is_quoted_and_the_verdicts_come_last(tricked):
    report = tricked["fake lines"].report
    lines = report.splitlines()
    verdicts = [line for line in lines if line.startswith(("✓", "✗"))]
    assert verdicts == [f"✗ {exercise.title}" for exercise in EXERCISES]
    assert lines[-1] == "0 of 3 exercises passed."
    raised = [line for line in lines if "RuntimeError" in line]
    assert len(raised) == 1 and raised[0].startswith("    │ code cell 2 (`print(")
    assert "\\n✓ Exercise 1" in raised[0] and "\\r\\x1b[2K✓ Exercise 2" in raised[0]
    assert "\r" not in report and "\x1b" not in report


def test_odd_objects_subclasses_and_huge_arrays_are_judged_by_their_numbers(tricked):
    run = tricked["odd returns"]
    assert "dL/dinput (tanh layer, 3 → 5) is a value of type Always; expected an array of numbers" in run.exercise(1)
    assert "the returned input_delta (tanh DNI, 3 → 5) is wrong" in run.exercise(2)
    assert ("the returned loss L_M (tanh DNI, 5 outputs) is an array of shape (3000, 3000), far larger than asked"
            in run.exercise(3))


def test_a_kernel_that_exits_during_a_check_fails_that_check_and_the_rest(tricked):
    run = tricked["exits"]
    for number in (2, 3):
        assert "the kernel died before this check finished" in run.exercise(number)


# --- limits that hold (issue 27, points 4 and 5) ----------------------------------------------------------


def running(argument):
    """The pids of the processes whose command line holds ``argument``."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def graded_alone(tmp_path, *sources, options=()):
    path = tmp_path / "handed_in.ipynb"
    nbformat.write(notebook_of(*sources), path)
    start = time.monotonic()
    run = subprocess.run(COMMAND + [str(path), *options], capture_output=True, text=True, timeout=300)
    return Run(run.returncode, run.stdout, run.stderr), time.monotonic() - start


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_a_cell_that_ignores_the_interrupt_is_killed_after_the_grace_and_the_rest_is_graded(tmp_path):
    loop = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    run, seconds = graded_alone(tmp_path, SETUP, loop, MY_LAYER, MY_DNI, MY_FULL_DNI, options=["--timeout", "3"])
    assert run.status == 0, run.report + run.errors
    assert ("    │ code cell 2 (`import signal`): killed: it ran past --timeout 3 s and went on 5 s after the "
            "interrupt; the grader ran the notebook again without it") in run.report
    assert run.report.rstrip().endswith("3 of 3 exercises passed.")
    assert seconds < 3 + 5 + 60


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_a_check_that_ignores_the_interrupt_is_killed_and_fails_alone(tmp_path):
    looping = edited(MY_DNI, ("        output = self.forward(input)\n",
                              "        import signal\n        signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                              "        while True:\n            pass\n"))
    run, _ = graded_alone(tmp_path, SETUP, MY_LAYER, looping, MY_FULL_DNI, options=["--timeout", "3"])
    assert run.status == 1
    assert run.exercise(2) == ("✗ Exercise 2, DNI.forward_and_synthetic_update (MyDNI)\n    the check did not finish "
                               "within 3 s, and ignored the interrupt for 5 s more: it was killed. Does "
                               "DNI.forward_and_synthetic_update loop forever?")
    assert run.exercise(1).startswith("✓") and run.exercise(3).startswith("✓")


def test_a_cell_that_allocates_past_the_memory_limit_fails_with_memory_error(tmp_path):
    run, _ = graded_alone(tmp_path, SETUP, "x = np.ones(2**28)  # 2 GiB", MY_LAYER, MY_DNI, MY_FULL_DNI,
                          options=["--memory", "1024"])
    assert "    │ code cell 2 (`x = np.ones(2**28)  # 2 GiB`): MemoryError: Unable to allocate 2.00 GiB" in run.report
    assert run.status == 0, run.report


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_every_process_the_notebook_started_ends_with_grading(tmp_path):
    tag = str(4000 + uuid.uuid4().int % 1000)
    detached = (f"import os, subprocess\nsubprocess.Popen(['sleep', '{tag}.1'], start_new_session=True)\n"
                f"subprocess.Popen(['sleep', '{tag}.2'], start_new_session=True, env={{}})\n"
                f"if os.fork() == 0:\n    os.setsid()\n    subprocess.Popen(['sleep', '{tag}.3'])\n    os._exit(0)")
    run, _ = graded_alone(tmp_path, SETUP, detached, MY_LAYER)
    assert "code cell 2" not in run.report, run.report
    assert running(f"{tag}.1") == running(f"{tag}.2") == running(f"{tag}.3") == []


# --- where the notebook runs (issue 27, point 6) ----------------------------------------------------------


def test_the_notebook_runs_in_a_scratch_copy_of_its_folder(tmp_path):
    (tmp_path / "data.txt").write_text("beside the notebook")
    cell = ("import os, pathlib\n"
            "assert pathlib.Path('data.txt').read_text() == 'beside the notebook'\n"
            "pathlib.Path('written.txt').write_text('by the notebook')\n"
            "pathlib.Path('data.txt').unlink()\n"
            f"assert os.getcwd() != {str(tmp_path)!r}")
    run, _ = graded_alone(tmp_path, SETUP, cell, MY_LAYER)
    assert "code cell 2" not in run.report, run.report
    assert "in a scratch copy of its folder" in run.report
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.txt", "handed_in.ipynb"]


# --- a class at once (issue 27, point 7) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """A folder of four notebooks graded by one command into a gradebook: right, wrong, not a notebook, hanging."""
    folder = tmp_path_factory.mktemp("class")
    nbformat.write(notebook_of(SETUP, MY_LAYER, MY_DNI, MY_FULL_DNI), folder / "ada.ipynb")
    nbformat.write(notebook_of(SETUP, *WRONG), folder / "bob.ipynb")
    (folder / "cy.ipynb").write_text("not a notebook")
    nbformat.write(notebook_of(SETUP, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n"
                               "    pass", MY_LAYER), folder / "dee.ipynb")
    value = uuid.uuid4().hex
    gradebook = folder / "grades.csv"
    run = subprocess.run(COMMAND + [str(folder), "--jobs", "2", "--timeout", "3", "--gradebook", str(gradebook)],
                         capture_output=True, text=True, timeout=600, env={**os.environ, MARK: value})
    return run, gradebook, marked(value)


def test_a_folder_is_graded_into_a_gradebook_with_a_row_per_notebook(classroom):
    import csv

    run, gradebook, _ = classroom
    rows = list(csv.DictReader(gradebook.read_text().splitlines()))
    assert [row["notebook"] for row in rows] == ["ada.ipynb", "bob.ipynb", "cy.ipynb", "dee.ipynb"]
    assert [(row["status"], row["score"], row["max_score"]) for row in rows] == [
        ("graded", "3", "3"), ("graded", "0", "3"), ("not graded", "", "3"), ("graded", "1", "3")]
    assert [row[f"exercise_{n}"] for row in rows for n in (1, 2, 3)] == (
        ["pass"] * 3 + ["fail"] * 3 + [""] * 3 + ["pass", "fail", "fail"])
    assert rows[1]["message"].startswith("Exercise 1: dL/dweights (tanh layer, 3 → 5) is wrong")
    assert rows[2]["message"].endswith("cy.ipynb is not a Jupyter notebook (JSONDecodeError: Expecting value: "
                                       "line 1 column 1 (char 0))") or "is not a Jupyter notebook" in rows[2]["message"]
    assert run.returncode == 2, run.stderr


def test_a_class_prints_each_report_in_order_and_a_progress_line_per_notebook(classroom):
    run, gradebook, left = classroom
    starts = [run.stdout.index(f"{name}.ipynb") for name in ("ada", "bob", "cy", "dee")]
    assert starts == sorted(starts)
    assert run.stdout.count("exercises passed.") == 3 and "Not graded: " in run.stdout
    progress = [line for line in run.stderr.splitlines() if line.startswith("graded ")]
    assert len(progress) == 4 and all(" of 4 (" in line for line in progress), run.stderr
    assert run.stderr.rstrip().endswith(f"wrote {gradebook}")
    assert left == []


def test_the_progress_bar_redraws_one_line_on_a_terminal():
    import io

    from sgrad.course.gradebook import Row, _Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    bar = _Progress(2, screen)
    bar.started()
    bar.finished(Row(pathlib.Path("a.ipynb"), 2, error="not a notebook"))
    bar.close()
    frames = screen.getvalue().split("\r")[1:]
    assert frames[0].startswith("[..............................] 0/2 graded, 1 running, 0:00")
    assert frames[-1].startswith("[###############...............] 1/2 graded, 0 running, 0:00")
    assert screen.getvalue().endswith("\n") and screen.getvalue().count("\n") == 1


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_sigterm_stops_a_class_with_no_gradebook_and_no_process_left(tmp_path):
    for name in ("a", "b", "c"):
        nbformat.write(notebook_of("import time\nwhile True:\n    time.sleep(0.05)"), tmp_path / f"{name}.ipynb")
    value = uuid.uuid4().hex
    gradebook = tmp_path / "grades.csv"
    with started(COMMAND + [str(tmp_path), "--gradebook", str(gradebook)], env={**os.environ, MARK: value}) as run:
        deadline = time.monotonic() + 60
        while len(marked(value)) < 5:  # the class's grader, two notebooks' graders and their kernels
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        time.sleep(2)
        run.send_signal(signal.SIGTERM)
        _, errors = run.communicate(timeout=120)
    assert run.returncode == 143
    assert errors.splitlines()[-1] == ("sgrad grade: terminated; nothing was graded; the notebooks are as they were, "
                                       "and no gradebook was written")
    assert not gradebook.exists()
    assert marked(value) == []


# --- the instructor's page (issue 27, point 9) --------------------------------------------------------------


def test_the_instructors_page_covers_the_homework_and_names_only_real_options():
    import re

    page = (NOTEBOOK.parents[1] / "docs" / "instructors.md").read_text()
    for heading in ("## Where the solutions live", "## The student release", "## Grading one notebook",
                    "## Grading a class", "## Verdicts", "## Exit status", "## What the grader does not protect against"):
        assert heading in page
    assert "**The grader is not a security boundary.**" in page and "--network none" in page
    usage = subprocess.run(COMMAND + ["--help"], capture_output=True, text=True, timeout=60).stdout
    named = set(re.findall(r"`(--[a-z]+)", page)) - {"--network"}  # the grader's options, in backticks
    assert named and all(option in usage for option in named), named
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 130 |", "| 143 |"):
        assert status in page
    assert "](docs/instructors.md)" in (NOTEBOOK.parents[1] / "README.md").read_text()
