"""The homework edition of sgrad (sgrad.course.edition): what notebook 07 needs, and no answer to its exercises.

The edition is built once into a temporary folder.  Each check of it runs in a fresh interpreter started with
``python -I -S``: no site, so the editable install's path file is not read, and sys.path holds the edition,
the standard library and site-packages (for NumPy) alone; the real sgrad is not importable there.  Where
numbers are compared, the same code runs so on sgrad itself, with the checkout in the edition's place.
"""

import ast
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import nbformat
import numpy as np
import pytest

import sgrad
from conftest import answer_lines
from sgrad.course import edition as editions
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
NOTEBOOK = ROOT / "notebooks" / "07_homework.ipynb"
FINDER = ROOT / "tests" / "find_dense_backward.py"
BOOT = """\
import sys
folder, site_packages, *argv = sys.argv[1:]
sys.path[:0] = [folder]
sys.path.append(site_packages)
"""


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    return editions.build(tmp_path_factory.mktemp("edition"))


def modules_of(folder):
    """The dotted names of the modules in the packages under ``folder`` (a package by its own name)."""
    names = []
    for path in sorted(folder.glob("*/**/*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def run_python(code, folder, *arguments, cwd):
    """Run ``code`` in ``python -I -S`` with ``folder`` first on sys.path (``argv`` holds ``arguments``); returns
    what it printed, read as JSON."""
    run = subprocess.run([sys.executable, "-I", "-S", "-c", BOOT + textwrap.dedent(code), str(folder), SITE_PACKAGES,
                          *map(str, arguments)], capture_output=True, text=True, cwd=cwd, timeout=600,
                         env={"PATH": os.environ["PATH"], "OPENBLAS_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


# --- what the edition holds ---------------------------------------------------------------------------------

IMPORTS = """
import importlib.util, json, os, sys
from sgrad import DNI, Layer, bce_with_logits
from sgrad.course import check_dni_update, check_generator_update, check_layer_backward, gradient_check
from sgrad.course import numerical_gradient, relative_error
from data_gen import generate_dataset
import data_gen, sgrad, sgrad.course

print(json.dumps({
    "files": [sgrad.__file__, data_gen.__file__],
    "loaded": sorted(name for name in sys.modules if name.split(".")[0] in ("sgrad", "data_gen")),
    "holders": [entry for entry in sys.path if any(os.path.isdir(os.path.join(entry, package))
                                                   for package in ("sgrad", "data_gen"))],
    "exports": [sgrad.__all__, sgrad.course.__all__, data_gen.__all__],
    "version": sgrad.__version__,
    "absent": [name for name in argv if importlib.util.find_spec(name) is None],
}))
"""
# What a student's notebook must not reach: the answers, the checkers' references, the grader and the rest.
ABSENT = ["solutions", "sgrad.course.solutions", "sgrad.course.exercise_runner", "sgrad.course.grader",
          "sgrad.course.ownwork", "sgrad.course.autograder", "sgrad.course.edition", "sgrad.dni.steps", "sgrad.recurrent",
          "sgrad.training", "sgrad.experiments", "sgrad.parallel", "sgrad.cli", "sgrad.nn.checkpoint", "data_gen.mnist"]


def test_the_edition_imports_alone_with_notebook_07s_names_and_nothing_else(edition, tmp_path):
    found = run_python(IMPORTS, edition, *ABSENT, cwd=tmp_path)
    assert found["files"] == [str(edition / "sgrad" / "__init__.py"), str(edition / "data_gen" / "__init__.py")]
    assert found["holders"] == [str(edition)], "only the edition may hold a package named sgrad or data_gen"
    assert found["absent"] == ABSENT
    assert found["exports"] == [["DNI", "Layer", "bce_with_logits", "__version__"],
                                ["CheckResult", "check_layer_backward", "check_dni_update", "check_generator_update",
                                 "gradient_check", "numerical_gradient", "relative_error"],
                                ["generate_dataset"]]
    assert found["version"] == sgrad.__version__
    # every module the edition holds is one that notebook 07's imports load: its import closure, no more
    assert found["loaded"] == sorted(modules_of(edition))


def test_the_checkers_are_stand_ins_that_say_sgrad_grade_checks_the_exercise(edition, tmp_path):
    code = """
    import json
    from sgrad import DNI, Layer
    from sgrad.course import check_dni_update, check_generator_update, check_layer_backward
    print(json.dumps([str(check(cls)) for check, cls in ((check_layer_backward, Layer), (check_dni_update, DNI),
                                                         (check_generator_update, DNI))]))
    """
    printed = run_python(code, edition, cwd=tmp_path)
    message = f"    {editions.STAND_IN_MESSAGE}"
    assert printed == [f"✗ Layer.backward\n{message}", f"✗ DNI.forward_and_synthetic_update\n{message}",
                       f"✗ DNI.update_synthetic_weights\n{message}"]


def test_building_into_a_folder_that_holds_sgrad_is_refused(edition):
    with pytest.raises(ValueError, match="already holds sgrad and data_gen; build the edition into a folder"):
        editions.build(edition)


def test_the_build_refuses_a_withheld_name_that_sgrad_no_longer_has(monkeypatch):
    monkeypatch.setitem(editions.WITHHELD, "sgrad.nn.layers.Layer.backwards", "a name that is not there")
    with pytest.raises(ValueError, match=r"WITHHELD names what sgrad no longer has: sgrad\.nn\.layers\.Layer\.backwards"):
        editions.edition()


def test_the_build_refuses_to_keep_a_backward_pass_that_is_not_withheld(monkeypatch):
    monkeypatch.delitem(editions.WITHHELD, "sgrad.nn.kernels.rnn_step_backward")
    with pytest.raises(ValueError, match=r"would keep the backward passes sgrad\.nn\.kernels\.rnn_step_backward: add"):
        editions.edition()


# --- what it keeps works as sgrad does ------------------------------------------------------------------------

KEPT = """
import json
import numpy as np
from sgrad import DNI, Layer, bce_with_logits
from sgrad.course import numerical_gradient, relative_error
from data_gen import generate_dataset

out = {}
rng = np.random.default_rng(0)
x = rng.standard_normal((6, 4))
for nonlin in ("tanh", "sigmoid", "relu", "identity"):
    for rule in ("sgd", "momentum", "adam"):
        layer = Layer(4, 3, nonlin, update_rule=rule, seed=1)
        h = layer.forward(x)
        for step in range(3):  # the gradients a backward pass would store, then the rule's step
            layer.weights_grad, layer.bias_grad = rng.standard_normal((4, 3)), rng.standard_normal(3)
            layer.update(0.1)
        out[f"{nonlin} {rule}"] = [h, layer.weights, layer.bias, layer.predict(x)]
xs, ys = generate_dataset(output_dim=8, num_examples=50, seed=0)
out["generate_dataset"] = [xs, ys]
for name, layer in (("DNI", DNI(16, 12, "tanh", alpha=0.1, condition_dim=8, seed=1)),
                    ("DNI, blog's generator", DNI(16, 12, "sigmoid", condition_dim=8, generator_init="blog", seed=2))):
    h = layer.forward(xs)
    out[name] = [layer.weights, layer.bias, layer.generator.weights, layer.generator.bias, h,
                 layer.generator.forward(h, ys), layer.generator.predict(h, ys), layer.generator.input]
logits = rng.standard_normal((50, 8))
for reduction in ("mean", "sum", "none"):
    loss, gradient = bce_with_logits(logits, ys, reduction=reduction)
    out[f"bce {reduction}"] = [np.asarray(loss), gradient]
w = rng.standard_normal(5)
out["gradient tools"] = [w, numerical_gradient(lambda: float(np.sum(np.sin(w))), w), relative_error(w, 2 * w)]
np.savez(argv[0], **{f"{key}/{k}": np.asarray(value) for key, values in out.items() for k, value in enumerate(values)})
print(json.dumps(sorted(out)))
"""


def numbers(code, folder, saved, *arguments):
    """What ``code`` saved to the .npz file ``saved`` (its first argument), run with ``folder`` in sgrad's place."""
    run_python(code, folder, saved, *arguments, cwd=saved.parent)
    with np.load(saved) as archive:
        return {name: archive[name] for name in archive.files}


def assert_same_numbers(mine, theirs):
    assert mine.keys() == theirs.keys()
    different = [name for name in mine if not np.array_equal(mine[name], theirs[name])]
    assert different == [], f"the edition and sgrad differ in {different}"


def test_what_the_edition_keeps_gives_sgrads_numbers_bit_for_bit(edition, tmp_path):
    on_the_edition = numbers(KEPT, edition, tmp_path / "edition.npz")
    assert_same_numbers(on_the_edition, numbers(KEPT, ROOT, tmp_path / "sgrad.npz"))
    assert np.any(on_the_edition["DNI, blog's generator/5"])  # ĝ from the blog's random generator, not zeros
    w, gradient, error = (on_the_edition[f"gradient tools/{k}"] for k in range(3))
    np.testing.assert_allclose(gradient, np.cos(w), rtol=1e-8)
    assert error == pytest.approx(1 / 3)


# --- what it withholds --------------------------------------------------------------------------------------

CALL_WITHHELD = """
import importlib, inspect, json

said = {}
for name in json.loads(argv[0]):
    parts = name.split(".")  # sgrad.<module>.<function>, or sgrad.<module>.<class>.<method>
    found = importlib.import_module(".".join(parts[:2]))
    for part in parts[2:]:
        found = getattr(found, part)
    parameters = inspect.signature(found).parameters.values()
    args = [None for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    kwargs = {p.name: None for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    try:
        found(*args, **kwargs)
        said[name] = "returned"
    except NotImplementedError as error:
        said[name] = str(error)
    except Exception as error:
        said[name] = f"{type(error).__name__}: {error}"
print(json.dumps(said))
"""


def test_each_withheld_function_raises_not_implemented_naming_itself(edition, tmp_path):
    said = run_python(CALL_WITHHELD, edition, json.dumps(list(editions.WITHHELD)), cwd=tmp_path)
    assert said == {name: f"{name} is withheld while sgrad grade runs: write it yourself" for name in editions.WITHHELD}


def test_a_class_that_hands_the_work_to_sgrad_meets_the_withheld_method(edition, tmp_path):
    code = """
    import json
    import numpy as np
    from sgrad import Layer

    class MyLayer(Layer):
        def backward(self, output_delta):
            return super().backward(output_delta)

    layer = MyLayer(3, 2, "tanh", seed=0)
    layer.forward(np.ones((4, 3)))
    try:
        layer.backward(np.ones((4, 2)))
    except NotImplementedError as error:
        print(json.dumps(str(error)))
    """
    assert run_python(code, edition, cwd=tmp_path) == "sgrad.nn.layers.Layer.backward is withheld while sgrad grade runs: " \
                                                      "write it yourself"


def test_no_callable_of_the_edition_computes_a_dense_layers_backward_and_sgrads_own_are_found(edition, tmp_path):
    """tests/find_dense_backward.py calls every function and method of every module with small arrays, and looks
    for xᵀ·D, D·Wᵀ (a 1×1 convolution's too) and D ⊙ f'(h) in what each returns or changes.  On sgrad itself it
    must find the backward passes that the edition withholds: the search can fail."""
    def search(folder):
        run = subprocess.run([sys.executable, "-I", "-S", str(FINDER), str(folder), SITE_PACKAGES,
                              *modules_of(edition)], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                             env={"PATH": os.environ["PATH"], "OPENBLAS_NUM_THREADS": "1"})
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    on_the_edition, on_sgrad = search(edition), search(ROOT)
    assert on_the_edition["found"] == []
    assert {"sgrad.nn.kernels.linear_backward", "sgrad.nn.kernels.dense_backward", "sgrad.nn.kernels.rnn_step_backward",
            "sgrad.nn.kernels.conv2d_backward", "sgrad.nn.fast_kernels.conv2d_backward", "sgrad.nn.layers.Layer.backward",
            "sgrad.nn.blocks.Sequential.backward", "sgrad.nn.conv.Conv2d.backward",
            "sgrad.dni.decoupled.DecoupledModule.forward_and_update",
            "sgrad.dni.decoupled.DecoupledModule.update_from_synthetic_gradient",
            "sgrad.dni.decoupled.DecoupledModule.update_generator",
            "sgrad.dni.decoupled.synthetic_step", "sgrad.dni.decoupled.update_module_from_synthetic_gradient",
            "sgrad.dni.generators.Generator.update"} <= set(on_sgrad["found"])
    # the search reached the edition's code: its forward passes, steps, losses and gradient tools ran
    assert {"sgrad.nn.kernels.linear_forward", "sgrad.nn.kernels.dense_forward", "sgrad.nn.kernels.conv2d_forward",
            "sgrad.nn.layers.Layer.forward", "sgrad.nn.layers.Layer.predict", "sgrad.nn.conv.Conv2d.forward",
            "sgrad.nn.blocks.Sequential.forward", "sgrad.dni.generators.Generator.forward", "sgrad.nn.optimizers.SGD.step",
            "sgrad.nn.losses.mse", "sgrad.course.backward_check.gradient_check",
            "sgrad.course.numerical_gradients.relative_error"} <= set(on_the_edition["ran"])


def statements(text):
    """Each simple statement of the Python source ``text``, as ast.unparse writes it."""
    return {ast.unparse(node) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.stmt) and not hasattr(node, "body")}


def test_the_editions_source_holds_no_answer_line_and_none_of_the_withheld_maths(edition):
    source = set().union(*(statements(path.read_text()) for path in edition.rglob("*.py")))
    answers = {ast.unparse(ast.parse(line).body[0]) for line in answer_lines()}
    assert answers and answers.isdisjoint(source)
    withheld_maths = set()
    for name in editions.WITHHELD:  # sgrad.<layer>.<module>.<function>, or sgrad.<layer>.<module>.<class>.<method>
        _, layer, module, *path = name.split(".")
        scope = ast.parse((ROOT / "sgrad" / layer / f"{module}.py").read_text())
        for part in path:
            scope = next(node for node in scope.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))
                         and node.name == part)
        withheld_maths |= {line for line in statements(ast.unparse(scope))
                           if any(sign in line for sign in ("@", ".T", "einsum", "-="))}
    assert "dweights = x.T @ dz" in withheld_maths and "dx = dz @ weights.T if input_delta else None" in withheld_maths
    assert withheld_maths.isdisjoint(source)


# --- the answers on the edition -----------------------------------------------------------------------------

DRIVE = """
import json
import numpy as np
from sgrad import DNI, Layer, bce_with_logits
from data_gen import generate_dataset

namespace = {"Layer": Layer, "DNI": DNI, "np": np, "generate_dataset": generate_dataset,
             "bce_with_logits": bce_with_logits, "NUM_EXAMPLES": 200, "EPOCHS": 3, "BATCH_SIZE": 25, "ALPHA": 0.1,
             "DATA_SEED": 0}
answers, train_cdni = json.loads(argv[1])
if answers:
    for answer in answers:
        exec(answer, namespace)
    MyLayer, MyFullDNI = namespace["MyLayer"], namespace["MyFullDNI"]
else:  # sgrad's own classes
    MyLayer, MyFullDNI = Layer, DNI
exec(train_cdni, namespace)

out = {}
rng = np.random.default_rng(0)
for nonlin in ("tanh", "sigmoid", "relu", "identity"):
    layer = MyLayer(5, 3, nonlin, seed=1)
    layer.forward(rng.standard_normal((8, 5)))
    out[f"backward {nonlin}"] = [layer.backward(rng.standard_normal((8, 3))), layer.weights_grad, layer.bias_grad,
                                 layer.weight_output_delta]
    layer.update(0.1)
    out[f"backward {nonlin}"].append(layer.weights)
for condition_dim in (0, 2):
    layer = MyFullDNI(4, 3, "sigmoid", alpha=0.5, condition_dim=condition_dim, generator_alpha=0.2,
                      generator_init="blog", seed=3)
    for step in range(3):
        c = rng.standard_normal((8, condition_dim)) if condition_dim else None
        delta, h = layer.forward_and_synthetic_update(rng.standard_normal((8, 4)), c)
        loss = layer.update_synthetic_weights(rng.standard_normal((8, 3)))
        out[f"DNI step {step}, condition_dim {condition_dim}"] = [
            delta, h, layer.synthetic_gradient, layer.weights, layer.bias, layer.generator.weights,
            layer.generator.bias, np.asarray(loss)]
out["train_cdni"] = list(namespace["train_cdni"](MyLayer, MyFullDNI))
np.savez(argv[0], **{f"{key}/{k}": np.asarray(value) for key, values in out.items() for k, value in enumerate(values)})
print(json.dumps(sorted(out)))
"""


def train_cdni():
    """The function of notebook 07 that trains the blog's cDNI network with the classes it is given."""
    cell = next(cell for cell in nbformat.read(NOTEBOOK, as_version=4).cells if cell.source.startswith("def train_cdni"))
    tree = ast.parse(cell.source)
    return ast.unparse(next(node for node in tree.body if isinstance(node, ast.FunctionDef)))


def test_the_answers_on_the_edition_give_what_they_give_on_sgrad_and_what_sgrads_classes_give(edition, tmp_path):
    answers = json.dumps([[MY_LAYER, MY_DNI, MY_FULL_DNI], train_cdni()])
    on_the_edition = numbers(DRIVE, edition, tmp_path / "edition.npz", answers)
    assert_same_numbers(on_the_edition, numbers(DRIVE, ROOT, tmp_path / "sgrad.npz", answers))
    sgrads_classes = numbers(DRIVE, ROOT, tmp_path / "sgrads-classes.npz", json.dumps([[], train_cdni()]))
    assert on_the_edition.keys() == sgrads_classes.keys()
    for name, value in sgrads_classes.items():
        np.testing.assert_allclose(on_the_edition[name], value, rtol=1e-8, atol=1e-12, err_msg=name)
    losses = on_the_edition["train_cdni/0"]
    assert losses.shape == (3,) and losses[-1] < losses[0]


# --- notebook 07 under grading ----------------------------------------------------------------------------------

RUN_NOTEBOOK = """
import sys
import nbformat
from nbclient import NotebookClient

notebook = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": sys.argv[3]}}).execute()
nbformat.write(notebook, sys.argv[2])
"""
WHERE_FROM = """\
import importlib.util, json, os
import data_gen, sgrad
print(json.dumps({"files": [sgrad.__file__, data_gen.__file__],
                  "absent": [importlib.util.find_spec(name) is None for name in ("sgrad.course.solutions", "solutions",
                                                                                 "sgrad.course.exercise_runner")]}))"""


def test_notebook_07_with_the_answers_runs_top_to_bottom_on_the_edition_under_grading(edition, tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    answers = {"MyLayer": MY_LAYER, "MyDNI": MY_DNI, "MyFullDNI": MY_FULL_DNI}
    for cell in notebook.cells:
        for class_name, answer in answers.items():
            if cell.cell_type == "code" and cell.source.startswith(f"class {class_name}("):
                cell.source = answer
    notebook.cells.append(nbformat.v4.new_code_cell(WHERE_FROM))
    folder = tmp_path / "student"  # outside the checkout: the kernel's working directory
    folder.mkdir()
    nbformat.write(notebook, folder / "07_homework.ipynb")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "SGRAD_"))}
    env.update(PYTHONPATH=str(edition), SGRAD_GRADING="1", SGRAD_SMOKE="1", OPENBLAS_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, str(folder / "07_homework.ipynb"),
                          str(tmp_path / "ran.ipynb"), str(folder)], capture_output=True, text=True, env=env,
                         cwd=folder, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)
    code = [cell for cell in ran.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code)
    assert [output for cell in code for output in cell.outputs if output.output_type == "error"] == []
    printed = ["".join(output.get("text", "") for output in cell.outputs) for cell in code]
    where = json.loads(printed[-1])
    assert where == {"files": [str(edition / "sgrad" / "__init__.py"), str(edition / "data_gen" / "__init__.py")],
                     "absent": [True, True, True]}
    text = "".join(printed)
    assert "graded run: sgrad's own Layer and DNI are not checked here" in text
    assert "graded run: no training here; sgrad grade checks MyLayer, MyDNI and MyFullDNI on inputs of its own" in text
    assert text.count(editions.STAND_IN_MESSAGE) == 3
    assert "Traceback" not in text and "Error" not in text
