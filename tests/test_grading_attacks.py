"""``sgrad grade`` against a determined student: the marks without the work, or harm to a classmate.

Six classes of attack, each tried at least three ways, by notebooks graded with the real command:

1. reaching sgrad's own implementation of an exercise from the notebook, by indirection;
2. tampering with the grading channel (the driver, the record, the gradebook);
3. processes that outlive the notebook;
4. planting something that changes the next notebook's grading;
5. reaching classmates' notebooks;
6. limits: time, output, memory.

Each trick broke the grader before it sandboxed each notebook; here each must earn nothing and harm
nothing.  The correct solution still gets 3 of 3 and each planted mistake its hint (tests/test_grading.py).
"""

import csv
import json
import pathlib
import re
import site
import subprocess
import time
import uuid

import nbformat
import pytest

from grading_helpers import (COMMAND, CORRECT, NOTEBOOK, SETUP, WRONG, Run, environment, grade_notebook,
                             needs_the_sandbox, none_left, notebook_of)
from sgrad import Layer
from sgrad.course import checkers
from solutions import MY_LAYER

pytestmark = [pytest.mark.skipif(not pathlib.Path("/proc/self/cmdline").exists(), reason="reads processes in /proc"),
              needs_the_sandbox]

TAG = str(900000 + uuid.uuid4().int % 90000)  # in the command line of every process a trick leaves behind

# --- 1. sgrad's own implementation, by indirection ---------------------------------------------------------

FOR_LOOP_ALIAS = [SETUP, """\
for sgrad_backward in [Layer.backward]:
    pass
for sgrad_dni_step in [DNI.forward_and_synthetic_update]:
    pass
for sgrad_generator_step in [DNI.update_synthetic_weights]:
    pass""", """\
class MyLayer(Layer):
    def backward(self, output_delta):
        return sgrad_backward(self, output_delta)""", """\
class MyDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        return sgrad_dni_step(self, input, condition)""", """\
class MyFullDNI(MyDNI):
    def update_synthetic_weights(self, target_gradient):
        return sgrad_generator_step(self, target_gradient)"""]

DEFAULT_ARGUMENT = [SETUP, """\
_ = [(layer_step := f) for f in (Layer.backward,)]
_ = [(dni_step := f) for f in (DNI.forward_and_synthetic_update,)]
_ = [(generator_step := f) for f in (DNI.update_synthetic_weights,)]""", """\
class MyLayer(Layer):
    def backward(self, output_delta, done=layer_step):
        return done(self, output_delta)""", """\
class MyDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None, done=dni_step):
        return done(self, input, condition)""", """\
class MyFullDNI(MyDNI):
    def update_synthetic_weights(self, target_gradient, done=generator_step):
        return done(self, target_gradient)"""]

GETATTR_ON_THE_MRO = [SETUP, """\
class MyLayer(Layer):
    def backward(self, output_delta):
        return getattr(type(self).mro()[1], "backward")(self, output_delta)""", """\
class MyDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        return getattr(type(self).mro()[1], "forward_and_synthetic_update")(self, input, condition)""", """\
class MyFullDNI(MyDNI):
    def update_synthetic_weights(self, target_gradient):
        return getattr(type(self).mro()[2], "update_synthetic_weights")(self, target_gradient)"""]

# A search of the whole disk: each folder and its files, but the system's folders and the installed packages, which
# no grader fills (walking them takes longer than an exercise's check may when the disk cache is cold).
EVERYWHERE = """\
import os

def everywhere():
    for root, folders, files in os.walk("/"):
        folders[:] = [f for f in folders if f not in ("proc", "sys", "dev", "usr", "site-packages", ".git")]
        yield root, files"""

# The instructor's answers, looked for on the disk (a clone holds them in notebooks/instructor/) and imported.
FIND_THE_SOLUTIONS = """\
import os, sys

def instructors_answers():
    for root, files in everywhere():
        if os.path.basename(root) == "instructor" and "solutions.py" in files:
            sys.path.insert(0, root)
            import solutions
            return solutions
    raise RuntimeError("no solutions found")
"""
SOLUTIONS_AT_RUN_TIME = [SETUP, EVERYWHERE, FIND_THE_SOLUTIONS, """\
class MyLayer(Layer):
    def backward(self, output_delta):
        answers = instructors_answers()
        return getattr(answers.planted(answers.MY_LAYER), "backward")(self, output_delta)""", """\
class MyDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        answers = instructors_answers()
        return getattr(answers.planted(answers.MY_DNI), "forward_and_synthetic_update")(self, input, condition)""", """\
class MyFullDNI(MyDNI):
    def update_synthetic_weights(self, target_gradient):
        answers = instructors_answers()
        return getattr(answers.planted(answers.MY_FULL_DNI), "update_synthetic_weights")(self, target_gradient)"""]

# --- 2. the grading channel ------------------------------------------------------------------------------

# Methods that look like work but are wrong, for the tricks that forge the grader's answers instead.
LOOKS_LIKE_WORK = list(WRONG)

# The grader's cell once ran `exec(compile(driver source), ...)` in the notebook's namespace: a notebook-level
# `exec`, or `compile`, took the builtin's place and answered with sgrad's own classes.
FORGER = """\
from sgrad.course import exercise_runner as grading_driver
references = {"MyLayer": Layer, "MyDNI": DNI, "MyFullDNI": DNI}

def forged_send(key, name, inputs, nonce, _):
    grading_driver.send(key, name, inputs, nonce, references)
"""
SHADOWED_EXEC = [SETUP, FORGER + """
def exec(code, namespace=None):
    namespace["send"] = forged_send""", *LOOKS_LIKE_WORK]
SHADOWED_COMPILE = [SETUP, FORGER + """
def compile(source, filename, mode):
    return "import __main__; send = __main__.forged_send"  # what the grader's exec then runs""", *LOOKS_LIKE_WORK]

# A process that finds the grader's record and gradebook in the command lines of /proc and writes a pass into
# them, again and again for a while, after the notebook's kernel is gone.
FORGED_RECORDS = f"""\
import json, os, subprocess, sys
forger = '''
import json, os, pathlib, time
forged = {{"seed": 0, "sandboxed": True, "exercises": [
    {{"title": "Exercise %d" % n, "passed": True, "message": ""}} for n in (1, 2, 3)]}}
end = time.monotonic() + 20
while time.monotonic() < end:
    for entry in pathlib.Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().decode().split(chr(0))
        except OSError:
            continue
        for flag in ("--record", "--gradebook"):
            if flag in words and words.index(flag) + 1 < len(words):
                try:
                    pathlib.Path(words[words.index(flag) + 1]).write_text(
                        json.dumps(forged) if flag == "--record" else "forged")
                except OSError:
                    pass
    time.sleep(0.2)
'''
subprocess.Popen([sys.executable, "-c", forger, "{TAG}"], start_new_session=True, env={{}})"""
FORGES_RECORDS = [SETUP, FORGED_RECORDS, *LOOKS_LIKE_WORK]

# Kill every grader the notebook can see (and its own parent), as a notebook that wants its grading to fail
# open, or its record forged, would.  (Only sgrad's processes: outside a sandbox this reaches the whole machine.)
KILLS_THE_GRADER = [SETUP, """\
import os, signal
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\\0")
    except OSError:
        continue
    if pid != os.getpid() and (b"sgrad" in words or b"grade" in words):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
if os.getppid() > 1:
    os.kill(os.getppid(), signal.SIGKILL)""", *LOOKS_LIKE_WORK]

# A method that writes a passing record of its own onto every open file descriptor, the driver's pipe among them.
WRITES_ON_THE_PIPE = [SETUP, MY_LAYER.replace("        return self.weight_output_delta @ self.weights.T", """\
        import os
        for fd in range(3, 64):
            try:
                os.write(fd, b'{"cases": []}\\n')
            except OSError:
                pass
        return self.weight_output_delta @ self.weights.T"""), *LOOKS_LIKE_WORK[1:]]

# --- 3. outliving the notebook ---------------------------------------------------------------------------

DETACHED = [SETUP, f"""\
import os, subprocess
subprocess.Popen(["sleep", "{TAG}.1"], start_new_session=True)
subprocess.Popen(["sleep", "{TAG}.2"], start_new_session=True, env={{}})
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{TAG}.3"])
    os._exit(0)""", *CORRECT]

FORKS_ON = [SETUP, f"""\
import os, time
for _ in range(2000):  # bounded: the sandbox stops it at 128 processes
    try:
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "{TAG}.4"])
    except OSError:
        break""", *CORRECT]

# A daemon that waits for the grading to end, then writes into the class folder and the notebook's own folder.
LATE_WRITER = [SETUP, f"""\
import os, subprocess, sys
late = ("import pathlib, time\\ntime.sleep(6)\\nfor folder in ('.', '..', '../..'):\\n    try:\\n"
        "        (pathlib.Path(folder) / 'late.txt').write_text('written after grading')\\n"
        "    except OSError:\\n        pass\\n")
subprocess.Popen([sys.executable, "-c", late, "{TAG}.5"], start_new_session=True, env={{}})""", *CORRECT]

# --- 5. classmates ---------------------------------------------------------------------------------------


def stealing(class_name, base, method, arguments, find):
    """A class whose ``method`` runs a classmate's: it looks for their notebook with ``find`` (an expression
    that gives paths), writes their class to a module, and imports it."""
    return f"""\
class {class_name}({base}):
    def {method}(self, {arguments}):
        import json, os, pathlib, sys
        for path in {find}:
            try:
                sources = ["".join(cell["source"]) for cell in json.loads(pathlib.Path(path).read_text())["cells"]]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            theirs = [s for s in sources if s.startswith("class {class_name}(") and "NotImplementedError" not in s
                      and "stolen" not in s]
            if theirs:
                os.makedirs("/tmp/stolen", exist_ok=True)
                pathlib.Path("/tmp/stolen/stolen_{class_name.lower()}.py").write_text(
                    "import numpy as np\\nfrom sgrad import DNI, Layer\\nclass MyDNI(DNI):\\n    pass\\n" + theirs[0])
                sys.path.insert(0, "/tmp/stolen")
                import stolen_{class_name.lower()} as theirs
                return getattr(theirs.{class_name}, "{method}")(self, {arguments.replace("=None", "")})
        raise RuntimeError("no classmate's {class_name} found")"""


READS_CLASSMATES = [SETUP, EVERYWHERE,
                    stealing("MyLayer", "Layer", "backward", "output_delta", 'sorted(pathlib.Path(".").glob("*.ipynb"))'),
                    stealing("MyDNI", "DNI", "forward_and_synthetic_update", "input, condition=None",
                             '[os.path.join(root, name) for root, names in everywhere() for name in names '
                             'if name.endswith(".ipynb")]'),
                    stealing("MyFullDNI", "MyDNI", "update_synthetic_weights", "target_gradient",
                             'sorted(pathlib.Path("..").glob("*/*.ipynb")) + sorted(pathlib.Path("..").glob("*.ipynb"))')]

SPOILS_CLASSMATES = [SETUP, """\
import glob, os
for pattern in ("*.ipynb", "../*.ipynb", "../*/*.ipynb", os.path.expanduser("~/*.ipynb")):
    for path in glob.glob(pattern):
        try:
            with open(path, "w") as file:
                file.write("spoiled")
        except OSError:
            pass""", *WRONG]

ATTACKS = {
    "for_loop_alias": FOR_LOOP_ALIAS, "default_argument": DEFAULT_ARGUMENT, "getattr_on_the_mro": GETATTR_ON_THE_MRO,
    "solutions_at_run_time": SOLUTIONS_AT_RUN_TIME, "shadowed_exec": SHADOWED_EXEC, "shadowed_compile": SHADOWED_COMPILE,
    "forges_records": FORGES_RECORDS, "kills_the_grader": KILLS_THE_GRADER, "writes_on_the_pipe": WRITES_ON_THE_PIPE,
    "detached": DETACHED, "forks_on": FORKS_ON, "late_writer": LATE_WRITER, "reads_classmates": READS_CLASSMATES,
    "spoils_classmates": SPOILS_CLASSMATES,
}
# What each notebook may earn: the tricks that also hand in correct classes earn those; the rest nothing.
EARNED = {"detached": 3, "forks_on": 3, "late_writer": 3, "writes_on_the_pipe": 1}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """The class: an honest student (ada) and a notebook per attack, graded at once into a gradebook; returns
    (gradebook rows by name, reports by name, the run, whether any process was left, the class folder)."""
    root = tmp_path_factory.mktemp("attacked")
    folder = root / "class"
    folder.mkdir()
    nbformat.write(notebook_of(SETUP, *CORRECT), folder / "ada.ipynb")
    for name, sources in ATTACKS.items():
        nbformat.write(notebook_of(*sources), folder / f"{name}.ipynb")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    gradebook = root / "grades.csv"
    run = subprocess.run(COMMAND + [str(folder), "--jobs", "2", "--timeout", "40", "--gradebook", str(gradebook)],
                         capture_output=True, text=True, timeout=1200, env=environment(root / "tmp"))
    time.sleep(8)  # the late writer's wait, and then some
    rows = {row["notebook"].removesuffix(".ipynb"): row for row in csv.DictReader(gradebook.read_text().splitlines())}
    reports = {}
    for part in re.split(r"^Grading ", run.stdout, flags=re.MULTILINE)[1:]:
        path, _, report = part.partition("\n")
        reports[pathlib.Path(path).stem] = Run(0, report, "")
    left = none_left(str(root), TAG)
    return rows, reports, run, left, folder, before


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_attack_earns_what_its_classes_do_not(attacked, name):
    rows, reports, run, _, _, _ = attacked
    assert rows[name]["status"] == "graded", (rows[name], run.stderr)
    assert rows[name]["score"] == str(EARNED.get(name, 0)), reports[name].report


def test_the_honest_student_beside_them_gets_every_mark(attacked):
    rows, reports, _, _, _, _ = attacked
    assert rows["ada"]["score"] == "3", reports["ada"].report


@pytest.mark.parametrize("name, said", [
    ("for_loop_alias", "NameError: name 'sgrad_backward' is not defined"),  # a for loop is not a definition
    ("default_argument", "MyLayer is not defined"),  # nor is a walrus in a comprehension: its class cell raises
    ("getattr_on_the_mro", "Layer.backward is withheld while sgrad grade runs"),  # sgrad's own method
    ("solutions_at_run_time", "RuntimeError: no solutions found"),
])
def test_sgrads_own_implementation_cannot_be_reached(attacked, name, said):
    _, reports, _, _, _, _ = attacked
    assert said in reports[name].report and reports[name].exercise(1).startswith("✗"), reports[name].report


def test_the_gradebook_and_every_record_are_the_graders_own(attacked):
    rows, _, run, _, _, _ = attacked
    assert rows["forges_records"]["exercise_1"] == "fail"
    assert run.returncode == 1, run.stderr  # every notebook graded, some failed


def test_a_notebook_that_kills_all_it_can_reaches_no_grader(attacked):
    rows, reports, _, _, _, _ = attacked
    assert rows["kills_the_grader"]["status"] == "graded"
    assert "Exercise 1: dL/dweights" in rows["kills_the_grader"]["message"], reports["kills_the_grader"].report


def test_a_method_that_writes_on_every_descriptor_cannot_answer_for_the_driver(attacked):
    rows, reports, _, _, _, _ = attacked
    assert rows["writes_on_the_pipe"]["exercise_1"] == "pass", reports["writes_on_the_pipe"].report


def test_no_process_outlives_the_grading(attacked):
    assert attacked[3]


def test_the_class_folder_is_as_it_was(attacked):
    _, _, _, _, folder, before = attacked
    after = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert after == before  # nothing spoiled, nothing written late


@pytest.mark.parametrize("name, number", [("reads_classmates", 1), ("reads_classmates", 2), ("reads_classmates", 3)])
def test_no_classmate_can_be_found(attacked, name, number):
    section = attacked[1][name].exercise(number)
    assert "found" in section and section.startswith("✗"), section


# --- 4. nothing persists ---------------------------------------------------------------------------------

IPYTHON_STARTUP = """\
import os, pathlib
startup = pathlib.Path.home() / ".ipython" / "profile_default" / "startup"
startup.mkdir(parents=True, exist_ok=True)
(startup / "00-forge.py").write_text("PLANTED = True\\n")
user_site = pathlib.Path.home() / ".local" / "lib"
for version in ("python3.10", "python3.11", "python3.12", "python3.13"):
    folder = user_site / version / "site-packages"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "usercustomize.py").write_text("PLANTED = True\\n")"""
PTH_FILE = """\
import site, pathlib
for folder in site.getsitepackages():
    try:
        (pathlib.Path(folder) / "zz_forge.pth").write_text("import builtins; builtins.PLANTED = True\\n")
        (pathlib.Path(folder) / "sitecustomize.py").write_text("PLANTED = True\\n")
    except OSError as error:
        print(error)"""
TMP_MODULE = """\
import pathlib
pathlib.Path("/tmp/numpy_forge.py").write_text("PLANTED = True\\n")
pathlib.Path("/tmp/planted").write_text("PLANTED")"""


def snapshot(*folders):
    """Every file under ``folders``, with its size and modification time."""
    found = {}
    for folder in folders:
        for path in pathlib.Path(folder).rglob("*"):
            try:
                if path.is_file():
                    stat = path.stat()
                    found[str(path)] = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                pass
    return found


def test_what_a_notebook_plants_reaches_neither_the_machine_nor_the_next_notebook(tmp_path):
    home = pathlib.Path.home()
    watched = [home / ".ipython", home / ".local", *site.getsitepackages()]
    before = snapshot(*watched)
    planter = grade_notebook(tmp_path, "planter", notebook_of(SETUP, IPYTHON_STARTUP, PTH_FILE, TMP_MODULE))
    assert planter.status == 1, planter.errors
    assert "Read-only file system" in planter.report or "Permission denied" in planter.report or \
        "Cells that raised an error" not in planter.report  # the .pth cell prints its OSError and goes on
    check = ("import builtins, pathlib, sys\nassert not hasattr(builtins, 'PLANTED'), 'a .pth file ran'\n"
             "assert 'usercustomize' not in sys.modules and 'sitecustomize' not in sys.modules or "
             "not hasattr(sys.modules.get('sitecustomize'), 'PLANTED')\n"
             "assert 'PLANTED' not in globals(), 'a startup file ran'\n"
             "assert not pathlib.Path('/tmp/planted').exists(), '/tmp is shared'\n"
             "assert not (pathlib.Path.home() / '.ipython' / 'profile_default' / 'startup' / '00-forge.py').exists()")
    stub = nbformat.read(NOTEBOOK, as_version=4)
    stub.cells.insert(2, nbformat.v4.new_code_cell(check))
    graded = grade_notebook(tmp_path, "stub", stub)
    assert graded.score == "0 of 3", graded.report
    assert "Cells that raised an error" not in graded.report or "AssertionError" not in graded.report, graded.report
    assert snapshot(*watched) == before
    assert not pathlib.Path("/tmp/planted").exists()


# --- fresh inputs ----------------------------------------------------------------------------------------


def precomputed_layer(seed):
    """A MyLayer whose backward returns sgrad's answers for the checker's inputs at ``seed``, looked up by shape."""
    table = {}
    for case in checkers.exercise_inputs("backward", seed)["cases"]:
        layer = Layer(case["input_dim"], case["output_dim"], case["nonlin"], seed=case["seed"])
        layer.forward(case["x"].copy())
        input_delta = layer.backward(case["R"].copy())
        table[(case["input_dim"], case["output_dim"], layer.nonlin.__name__)] = {
            "input_delta": input_delta.tolist(), "weights_grad": layer.weights_grad.tolist(),
            "bias_grad": layer.bias_grad.tolist(), "weight_output_delta": layer.weight_output_delta.tolist()}
    return f"""\
ANSWERS = {json.dumps({"|".join(map(str, key)): value for key, value in table.items()})}


class MyLayer(Layer):
    def backward(self, output_delta):
        key = "|".join(map(str, (self.weights.shape[0], self.weights.shape[1], self.nonlin.__name__)))
        answer = ANSWERS[key]
        self.weight_output_delta = np.array(answer["weight_output_delta"])
        self.weights_grad = np.array(answer["weights_grad"])
        self.bias_grad = np.array(answer["bias_grad"])
        return np.array(answer["input_delta"])"""


def test_answers_precomputed_for_one_seed_pass_only_on_that_seed(tmp_path):
    notebook = notebook_of(SETUP, precomputed_layer(0))
    on_that_seed = grade_notebook(tmp_path, "seed0", notebook, "--seed", "0")
    assert on_that_seed.exercise(1).startswith("✓"), on_that_seed.report
    afresh = grade_notebook(tmp_path, "afresh", notebook)
    assert afresh.exercise(1).startswith("✗"), afresh.report


# --- 6. limits as the user reads them --------------------------------------------------------------------

IGNORES_SIGNALS = ("import signal\nfor sig in (signal.SIGINT, signal.SIGTERM):\n    signal.signal(sig, signal.SIG_IGN)\n"
                   "while True:\n    pass")
SLOW_CELL = "import time\ntime.sleep(2)"


@pytest.mark.parametrize("name, cells", [("ignores_signals", [IGNORES_SIGNALS]), ("slow_cells", [SLOW_CELL] * 20)])
def test_the_timeout_ends_the_whole_notebook_within_seconds_of_it(tmp_path, name, cells):
    run = grade_notebook(tmp_path, name, notebook_of(SETUP, *CORRECT, *cells), "--timeout", "12")
    assert run.score == "3 of 3", run.report + run.errors
    assert run.seconds < 12 + 8, run.seconds
    assert "ran past --timeout" in run.report
    assert none_left(str(tmp_path))


FLOOD = ("import sys\nline = 'x' * 1_000_000\nfor _ in range(300):\n    print(line)\n"
         "print('y' * 50_000_000)\nraise ValueError('z' * 20_000_000)")


def peak_memory_of_grading(folder, name, notebook):
    """The grader's own peak resident memory (VmHWM, kB) over a grading, read while it runs."""
    path = folder / f"{name}.ipynb"
    nbformat.write(notebook, path)
    process = subprocess.Popen(COMMAND + [str(path), "--timeout", "60"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=environment(folder / f"{name}-tmp"))
    peak = 0
    while process.poll() is None:
        try:
            status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
            peak = max(peak, int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
        except (OSError, AttributeError):
            pass
        time.sleep(0.05)
    report, _ = process.communicate()
    return peak, report


def test_a_flood_of_output_leaves_the_graders_memory_flat(tmp_path):
    quiet, _ = peak_memory_of_grading(tmp_path, "quiet", notebook_of(SETUP, *CORRECT))
    flooded, report = peak_memory_of_grading(tmp_path, "flood", notebook_of(SETUP, *CORRECT, FLOOD))
    assert "3 of 3 exercises passed." in report, report
    assert flooded < quiet + 30_000, (quiet, flooded)  # kB: 350 MB printed, not read


def test_a_memory_hog_is_stopped_by_the_sandboxs_limit_and_the_rest_is_graded(tmp_path):
    hog = "import numpy as np\nhogs = [np.ones(2**27) for _ in range(16)]  # 16 GiB, a GiB at a time"
    helper = ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
              "'import numpy as np; a = np.ones(2**26); import time; time.sleep(30)'])")
    run = grade_notebook(tmp_path, "hog", notebook_of(SETUP, *CORRECT, helper, hog), "--memory", "1024",
                         "--timeout", "60")
    assert run.score == "3 of 3", run.report + run.errors
    assert "MemoryError" in run.report or "ran out of memory" in run.report, run.report
    assert none_left(str(tmp_path))
