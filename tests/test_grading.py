"""``sgrad grade NOTEBOOK`` grades the classes a student's notebook defines, in a sandbox, on fresh inputs.

The graded notebooks are notebooks/07_homework.ipynb as shipped (its stubs), and copies of it whose stub
cells hold the solutions: all correct, one planted mistake per exercise, or broken (a syntax error, a
method that never returns).  Each is graded by the real command in a subprocess.  What a determined
student tries against the grader is in tests/test_grading_attacks.py.
"""

import csv
import importlib.util
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from grading_helpers import (COMMAND, CORRECT, NOTEBOOK, SETUP, WRONG, Run, environment, grade, grade_notebook,
                             left_running, needs_the_sandbox, none_left, notebook_of, start_grading)
from sgrad.course.grader import EXERCISES, MIN_ADDRESS_SPACE, MIN_MEMORY
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, edited, handed_in

pytestmark = [pytest.mark.skipif(not pathlib.Path("/proc/self/cmdline").exists(), reason="reads processes in /proc"),
              needs_the_sandbox]

CORRECT_ANSWERS = {"MyLayer": MY_LAYER, "MyDNI": MY_DNI, "MyFullDNI": MY_FULL_DNI}
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
    2: "forward_and_synthetic_update() called self.backward()",
    3: "Hint (the condition left out)",
}
TIMEOUT = 20  # seconds, for the notebook whose method never returns


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{name: Run} for each notebook, graded at the same time, each by the real command in its own process."""
    folder = tmp_path_factory.mktemp("handed_in")
    notebooks = {"correct": handed_in(CORRECT_ANSWERS), "mistakes": handed_in(MISTAKES), "broken": handed_in(BROKEN)}
    paths = {"stubs": NOTEBOOK}
    for name, notebook in notebooks.items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(notebook, paths[name])
    options = {"broken": ["--timeout", str(TIMEOUT)]}
    started = {name: start_grading([path, *options.get(name, [])], scratch=folder / f"{name}-tmp")
               for name, path in paths.items()}
    runs = {}
    for name, process in started.items():
        report, errors = process.communicate(timeout=300)
        runs[name] = Run(process.returncode, report, errors)
    runs["left"] = none_left(str(folder))
    return runs


def test_every_process_of_a_grading_ends_with_it(graded):
    assert graded["left"]


def test_grading_expects_the_class_names_of_the_shipped_stubs():
    sources = [cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells if cell.cell_type == "code"]
    for exercise in EXERCISES:
        assert sum(source.startswith(f"class {exercise.class_name}(") for source in sources) == 1, exercise


def test_a_correct_notebook_passes_every_exercise_and_exits_0(graded):
    run = graded["correct"]
    assert run.status == 0, run.report + run.errors
    for exercise in EXERCISES:
        assert run.exercise(exercise.number).startswith(f"✓ {exercise.title}\n"), run.report
    assert run.score == "3 of 3"
    assert "Cells that raised an error" not in run.report, run.report


def test_the_report_gives_the_seed_of_its_inputs_and_no_sandbox_warning(graded):
    seeds = {name: re.search(r"on inputs drawn from seed (\d+)", graded[name].report) for name in ("correct", "stubs")}
    assert all(seeds.values()), graded["correct"].report
    assert seeds["correct"].group(1) != seeds["stubs"].group(1)  # drawn afresh: equal once in 2**31
    assert "WARNING" not in graded["correct"].report and graded["correct"].errors == ""


def test_the_shipped_stubs_fail_every_exercise_as_not_implemented_and_exit_1(graded):
    run = graded["stubs"]
    assert run.status == 1, run.report + run.errors
    methods = {1: "backward()", 2: "forward_and_synthetic_update()", 3: "update_synthetic_weights()"}
    for exercise in EXERCISES:
        assert run.exercise(exercise.number) == (
            f"✗ {exercise.title}\n    not implemented yet: fill in {methods[exercise.number]}"), run.report
    assert run.score == "0 of 3"


@pytest.mark.parametrize("number", sorted(MISTAKE_NAMED))
def test_a_planted_mistake_fails_its_exercise_with_the_checkers_message(graded, number):
    run = graded["mistakes"]
    assert run.status == 1
    section = run.exercise(number)
    assert section.startswith(f"✗ {EXERCISES[number - 1].title}\n"), run.report
    assert MISTAKE_NAMED[number] in section, section


def test_a_class_cell_that_does_not_compile_fails_its_exercise_and_says_why(graded):
    run = graded["broken"]
    assert run.exercise(1).startswith("✗ Exercise 1, Layer.backward (MyLayer)\n    MyLayer is not defined: keep the name")
    listed = run.report[run.report.index("Cells that raised an error:"):run.report.index("✗ Exercise 1")]
    assert "(`class MyLayer(Layer)`): SyntaxError" in listed


def test_a_method_that_never_returns_fails_its_exercise_alone_within_the_timeout(graded):
    run = graded["broken"]
    assert run.status == 1
    assert run.exercise(2) == ("✗ Exercise 2, DNI.forward_and_synthetic_update (MyDNI)\n    the check did not "
                               f"finish within half of --timeout {TIMEOUT} s: does the method loop forever?")
    assert run.exercise(3).startswith("✓ Exercise 3")


@pytest.mark.parametrize("contents, message", [
    (None, "error: no notebook at"),
    ("hello", "is not a Jupyter notebook (NotJSONError"),
    ("{}", "is not a Jupyter notebook"),
])
def test_a_missing_file_or_one_that_is_not_a_notebook_exits_2(tmp_path, contents, message):
    path = tmp_path / "homework.ipynb"
    if contents is not None:
        path.write_text(contents)
    run = grade(path, scratch=tmp_path / "tmp", timeout=60)
    assert run.status == 2
    assert run.report == ""
    assert run.errors.startswith("sgrad grade: error: ") and message in run.errors
    assert len(run.errors.splitlines()) == 1


READS_A_NOTEBOOK = """
import pathlib, sys
from sgrad.course.grader import read_notebook
notebook = read_notebook(pathlib.Path(sys.argv[1]))
print(sum(cell.cell_type == "code" for cell in notebook.cells), "rfc3987_syntax" in sys.modules)
import rfc3987_syntax  # once nbformat has loaded, it imports as before
print(rfc3987_syntax.__name__)
"""


def test_reading_a_notebook_holds_back_jsonschemas_iri_formats_while_nbformat_loads_and_leaves_imports_as_they_were():
    """A grader reads its notebook in a fresh process: jsonschema's optional package for the IRI formats (which
    builds a grammar as it is imported) is not loaded for nbformat, and can be imported as before afterwards."""
    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987_syntax is not installed here: jsonschema does not import it")
    run = subprocess.run([sys.executable, "-c", READS_A_NOTEBOOK, str(NOTEBOOK)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    code_cells = sum(cell.cell_type == "code" for cell in nbformat.read(NOTEBOOK, as_version=4).cells)
    assert run.stdout.split() == [str(code_cells), "False", "rfc3987_syntax"]


@pytest.mark.parametrize("option, value, said", [
    ("--timeout", "0", "--timeout: expected at least 1 second; got 0"),
    ("--memory", "200", f"--memory: expected 0 (no limit) or at least {MIN_MEMORY} MiB (the least with which a "
                        "kernel starts); got 200"),
    ("--seed", "-1", "--seed: expected at least 0; got -1"),
])
def test_limits_a_grading_cannot_work_with_are_refused_before_grading(tmp_path, option, value, said):
    run = grade(NOTEBOOK, option, value, scratch=tmp_path, timeout=60)
    assert run.status == 2
    assert said in run.errors, run.errors
    assert run.report == ""


def test_the_least_memory_allowed_is_enough_for_the_whole_homework(tmp_path):
    run = grade_notebook(tmp_path, "correct", handed_in(CORRECT_ANSWERS), "--memory", str(MIN_MEMORY))
    assert run.status == 0, run.report + run.errors
    assert "Cells that raised an error" not in run.report and "stopped" not in run.report, run.report


def test_without_a_sandbox_the_memory_limit_is_per_process_and_a_small_one_is_refused_before_grading(tmp_path):
    small = grade_notebook(tmp_path, "small", handed_in(CORRECT_ANSWERS), "--no-sandbox", "--memory", "600")
    assert small.status == 2 and small.report == ""
    assert small.errors == ("sgrad grade: error: --memory 600 MiB is too small for a kernel to start where the limit "
                            f"is kept per process (RLIMIT_AS): give at least {MIN_ADDRESS_SPACE} (or 0 for no limit)\n")
    enough = grade_notebook(tmp_path, "enough", handed_in(CORRECT_ANSWERS), "--no-sandbox", "--memory",
                            str(MIN_ADDRESS_SPACE))
    assert enough.status == 0, enough.report + enough.errors


def test_the_same_seed_gives_the_same_report(tmp_path):
    notebook = handed_in(MISTAKES)
    first = grade_notebook(tmp_path, "a", notebook, "--seed", "12345")
    second = grade_notebook(tmp_path, "b", notebook, "--seed", "12345")
    assert "on inputs drawn from seed 12345" in first.report
    without_path_and_time = [re.sub(r"Graded in [0-9.]+ s", "", run.report.split("\n", 1)[1]) for run in (first, second)]
    assert without_path_and_time[0] == without_path_and_time[1]


def test_without_bubblewrap_grading_refuses_in_one_line_and_no_sandbox_grades_with_a_warning(tmp_path):
    path = tmp_path / "correct.ipynb"
    nbformat.write(notebook_of(SETUP, *CORRECT), path)
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    env = {**environment(tmp_path / "tmp"), "PATH": str(no_bwrap)}  # no bwrap on the PATH
    refused = subprocess.run(COMMAND + [str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2
    assert refused.stderr.startswith("sgrad grade: error: ") and len(refused.stderr.splitlines()) == 1
    assert "bubblewrap" in refused.stderr and "--no-sandbox" in refused.stderr
    bare = subprocess.run(COMMAND + [str(path), "--no-sandbox"], capture_output=True, text=True, timeout=300, env=env)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert bare.stdout.splitlines()[1].startswith("WARNING: graded without a sandbox (--no-sandbox)")
    assert "sgrad grade: warning: graded without a sandbox" in bare.stderr


@pytest.mark.parametrize("sent, status, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_prints_one_line_and_ends_every_process_within_seconds(tmp_path, sent, status, said):
    notebook = tmp_path / "loops.ipynb"
    ignoring = "import signal, time\nfor sig in (signal.SIGINT, signal.SIGTERM):\n    signal.signal(sig, signal.SIG_IGN)\n"
    nbformat.write(notebook_of(ignoring + "while True:\n    time.sleep(0.05)"), notebook)
    with_kernel = str(tmp_path / "tmp")
    run = start_grading([notebook], scratch=tmp_path / "tmp")
    try:
        deadline = time.monotonic() + 60
        while not any("ipykernel" in pathlib.Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
                      for pid in left_running(with_kernel) if pathlib.Path(f"/proc/{pid}").exists()):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        time.sleep(3)  # the kernel is into the endless cell
        sent_at = time.monotonic()
        run.send_signal(sent)
        report, errors = run.communicate(timeout=60)
        took = time.monotonic() - sent_at
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == status
    assert report == ""
    assert errors == f"sgrad grade: {said}; nothing was graded; the notebook is as it was\n"
    assert took < 5
    assert none_left(str(tmp_path))


def test_the_instructors_page_covers_the_homework_and_names_only_real_options():
    page = (NOTEBOOK.parents[1] / "docs" / "instructors.md").read_text()
    for heading in ("## Where the solutions live", "## The student release", "## Grading one notebook",
                    "## Grading a class", "## Verdicts", "## Exit status", "## The sandbox",
                    "## What holds against a determined student"):
        assert heading in page, heading
    usage = subprocess.run(COMMAND + ["--help"], capture_output=True, text=True, timeout=60).stdout
    named = set(re.findall(r"`(--[a-z-]+)", page))  # the grader's options, in backticks
    assert named and all(option in usage for option in named), named
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 130 |", "| 143 |"):
        assert status in page
    assert "](docs/instructors.md)" in (NOTEBOOK.parents[1] / "README.md").read_text()


def test_the_one_grading_command_is_sgrad_grade_in_the_readme_the_notebook_and_the_help():
    readme = (NOTEBOOK.parents[1] / "README.md").read_text()
    student_page = NOTEBOOK.read_text()
    usage = subprocess.run([sys.executable, "-m", "sgrad", "--help"], capture_output=True, text=True, timeout=60)
    assert "sgrad grade path/to/07_homework.ipynb" in readme
    assert "`sgrad grade 07_homework.ipynb`" in student_page
    assert "sgrad grade grades students' homework notebooks" in " ".join(usage.stdout.split())


# --- a class at once ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """A folder of four notebooks graded by one command into a gradebook: right, wrong, not a notebook, hanging."""
    folder = tmp_path_factory.mktemp("class")
    nbformat.write(notebook_of(SETUP, *CORRECT), folder / "ada.ipynb")
    nbformat.write(notebook_of(SETUP, *WRONG), folder / "bob.ipynb")
    (folder / "cy.ipynb").write_text("not a notebook")
    nbformat.write(notebook_of(SETUP, "while True:\n    pass", MY_LAYER), folder / "dee.ipynb")
    gradebook = folder.parent / f"{folder.name}-grades.csv"
    run = subprocess.run(COMMAND + [str(folder), "--jobs", "2", "--timeout", "10", "--gradebook", str(gradebook)],
                         capture_output=True, text=True, timeout=600, env=environment(folder.parent / "tmp-class"))
    return run, gradebook, none_left(str(folder))


def test_a_folder_is_graded_into_a_gradebook_with_a_row_per_notebook(classroom):
    run, gradebook, _ = classroom
    rows = list(csv.DictReader(gradebook.read_text().splitlines()))
    assert [row["notebook"] for row in rows] == ["ada.ipynb", "bob.ipynb", "cy.ipynb", "dee.ipynb"]
    assert [(row["status"], row["score"], row["max_score"]) for row in rows] == [
        ("graded", "3", "3"), ("graded", "0", "3"), ("not graded", "", "3"), ("graded", "1", "3")]
    assert [row[f"exercise_{n}"] for row in rows for n in (1, 2, 3)] == (
        ["pass"] * 3 + ["fail"] * 3 + [""] * 3 + ["pass", "fail", "fail"])
    assert rows[1]["message"].startswith("Exercise 1: dL/dweights (tanh layer, 3 → 5) is wrong")
    assert "is not a Jupyter notebook" in rows[2]["message"]
    assert all(row["seed"].isdigit() for row in rows if row["status"] == "graded")
    assert len({row["seed"] for row in rows if row["status"] == "graded"}) == 3  # a seed per notebook
    assert {row["sandbox"] for row in rows} == {"yes"}
    assert run.returncode == 2, run.stderr


def test_a_class_prints_each_report_in_order_and_a_progress_line_per_notebook(classroom):
    run, gradebook, left = classroom
    starts = [run.stdout.index(f"{name}.ipynb") for name in ("ada", "bob", "cy", "dee")]
    assert starts == sorted(starts)
    assert run.stdout.count("exercises passed.") == 3 and "Not graded: " in run.stdout
    progress = [line for line in run.stderr.splitlines() if line.startswith("graded ")]
    assert len(progress) == 4 and all(" of 4 (" in line for line in progress), run.stderr
    assert run.stderr.rstrip().endswith(f"wrote {gradebook}")
    assert left


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


def test_sigterm_stops_a_class_within_seconds_with_no_gradebook_and_no_process_left(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("a", "b", "c"):
        nbformat.write(notebook_of("import time\nwhile True:\n    time.sleep(0.05)"), folder / f"{name}.ipynb")
    gradebook = tmp_path / "grades.csv"
    run = start_grading([folder, "--gradebook", gradebook], scratch=tmp_path / "tmp")
    try:
        deadline = time.monotonic() + 60
        while len([pid for pid in left_running(str(tmp_path / "tmp")) if "ipykernel" in _command(pid)]) < 2:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        time.sleep(2)
        sent_at = time.monotonic()
        run.send_signal(signal.SIGTERM)
        _, errors = run.communicate(timeout=120)
        took = time.monotonic() - sent_at
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143
    assert errors.splitlines()[-1] == ("sgrad grade: terminated; nothing was graded; the notebooks are as they were, "
                                       "and no gradebook was written")
    assert took < 10
    assert not gradebook.exists()
    assert none_left(str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers and /proc are Linux's")
def test_a_subreaper_adopts_an_orphan_and_end_orphans_ends_every_child_but_those_kept():
    """processes.set_subreaper says what the process was; end_orphans kills every child but those kept, with what is
    below each, and reaps them; a grandchild whose parent died comes to the subreaper and is ended too."""
    script = """
import os, subprocess, sys, time
from sgrad.course import processes
assert processes.set_subreaper(True) is False and processes.set_subreaper(True) is True
kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
middle = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                           "print(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']).pid)"],
                          stdout=subprocess.PIPE, text=True)
orphan = int(middle.stdout.readline())
middle.wait()  # the middle one has ended: its child is this process's now
deadline = time.monotonic() + 10
while orphan not in processes.children(os.getpid()) and time.monotonic() < deadline:
    time.sleep(0.05)
adopted = orphan in processes.children(os.getpid())
processes.end_orphans(keep=[kept.pid])
print(adopted, kept.poll() is None, os.path.exists(f"/proc/{ended.pid}"), os.path.exists(f"/proc/{orphan}"),
      processes.children(os.getpid()) == [kept.pid], processes.set_subreaper(False))
kept.kill()
kept.wait()
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["True", "True", "False", "False", "True", "True"], result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_without_a_sandbox_what_a_grader_started_ends_with_the_grader_killed_outright():
    """--no-sandbox: a grader killed by SIGKILL (no handler runs) just after it started a process through its hold,
    five times: the launcher has tied the process to the grader, so nothing is left; and a launcher whose
    parent is not the one that built its command (already dead) ends before it runs anything."""
    script = """
import subprocess, sys, time
from sgrad.course.processes import Unsandboxed
with Unsandboxed(memory_mib=0, env={}) as hold:
    started = subprocess.Popen(hold.command([sys.executable, "-c", "import time; time.sleep(60)"]))
    print(started.pid, flush=True)
    time.sleep(60)
"""
    for _ in range(5):
        grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        started = int(grader.stdout.readline())
        grader.kill()
        grader.wait(timeout=60)
        grader.stdout.close()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{started}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{started}"), "a process started without a sandbox outlived its grader"
    from sgrad.course.processes import Unsandboxed
    with Unsandboxed(memory_mib=0, env={}) as hold:
        command = hold.command([sys.executable, "-c", "print('ran')"])
    command[3] = "1"  # as if built by a process that has died: the launcher's parent is not that one
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (1, "")


def test_a_grader_that_fails_gives_not_graded_never_a_verdict(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(notebook_of(SETUP, *CORRECT), folder / "ada.ipynb")
    nbformat.write(notebook_of(SETUP, *CORRECT, "import time\ntime.sleep(60)"), folder / "bob.ipynb")
    gradebook = tmp_path / "grades.csv"
    run = start_grading([folder, "--jobs", "2", "--gradebook", gradebook], scratch=tmp_path / "tmp")
    try:
        deadline = time.monotonic() + 60
        graders = []
        while not graders:  # bob's grader, once its notebook's kernel runs
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            graders = [pid for pid in left_running(str(folder / "bob.ipynb")) if "--record" in _command(pid)]
            time.sleep(0.2)
        time.sleep(3)
        os.kill(graders[0], signal.SIGKILL)
        _, errors = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    rows = {row["notebook"]: row for row in csv.DictReader(gradebook.read_text().splitlines())}
    assert rows["ada.ipynb"]["score"] == "3"
    assert (rows["bob.ipynb"]["status"], rows["bob.ipynb"]["score"]) == ("not graded", "")
    assert "the grader stopped with exit status -9" in rows["bob.ipynb"]["message"]
    assert run.returncode == 2, errors
    assert none_left(str(tmp_path))


def _command(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


