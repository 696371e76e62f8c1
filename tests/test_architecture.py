"""The package's shape: imports flow one way, ``import sgrad`` stays light, and no module has a private twin API.

These are the rules of ``docs/architecture.md``, checked on the source itself.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import sgrad

ROOT = pathlib.Path(sgrad.__file__).parent
FOUNDATION, FRONT = -1, len(sgrad.LAYERS)  # the modules at sgrad's top; its __init__, which imports from the layers


def layer_of(name):
    """The layer of the module ``name`` (dotted below sgrad): its sub-package's place in ``sgrad.LAYERS``.

    The modules at sgrad's top sit beneath every sub-package, ``__main__`` with the command line, and sgrad's own
    ``__init__`` (the package's front) above them all: no module imports it.
    """
    if name == "__init__":
        return FRONT
    if name == "__main__":
        return sgrad.LAYERS.index("cli")
    if "." not in name and not (ROOT / name).is_dir():
        return FOUNDATION
    return sgrad.LAYERS.index(name.split(".")[0])


def module_name(path, root=ROOT):
    """The name of the module at ``path``: dotted below sgrad, a package's __init__ by its package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def resolve(parts):
    """The module that the dotted ``parts`` below sgrad name: ``[]`` is sgrad's own __init__."""
    return ".".join(parts) if parts else "__init__"


def sgrad_imports(path, root=ROOT):
    """The sgrad modules that ``path`` imports, at the top or inside functions, named as :func:`module_name` does.

    ``from . import x`` imports the module x if there is one, else the package (its __init__); so do
    ``from .. import x``, ``from sgrad import x`` and ``import sgrad``.
    """
    module = module_name(path, root)
    package = list(path.parent.relative_to(root).parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif node.module == "sgrad" or (node.module or "").startswith("sgrad."):
                base = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                submodule = resolve([*base, alias.name])
                found.add(submodule if submodule in module_names(root) else resolve(base))
        elif isinstance(node, ast.Import):
            found.update(resolve(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == "sgrad")
    found.discard(module)
    return module, found


def modules():
    return sorted(ROOT.rglob("*.py"))


def module_names(root=ROOT):
    return {module_name(path, root) for path in root.rglob("*.py")}


def import_graph():
    return dict(sgrad_imports(path) for path in modules())


def subpackages():
    return sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))


def test_every_subpackage_is_a_layer():
    """The folders are the layers: each sub-package has its place in ``sgrad.LAYERS``, and every module a folder."""
    assert sorted(sgrad.LAYERS) == subpackages(), "add a new sub-package to sgrad.LAYERS and to docs/architecture.md"
    assert not [p for p in ROOT.glob("*/*/") if p.name != "__pycache__" and (p / "__init__.py").exists()]


def test_the_architecture_page_draws_the_layers_in_their_order():
    """docs/architecture.md's table of layers lists sgrad's sub-packages in the order of ``sgrad.LAYERS``."""
    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[2].strip() for line in page.splitlines() if line.startswith("| ") and "`sgrad/" in line]
    drawn = [row.split("`")[1].removeprefix("sgrad/").rstrip("/") for row in rows]
    assert [name for name in drawn if name in sgrad.LAYERS] == list(sgrad.LAYERS)


@pytest.mark.parametrize("path", modules(), ids=module_name)
def test_imports_flow_from_kernels_up_to_the_command_line(path):
    module, imported = sgrad_imports(path)
    upward = sorted(name for name in imported if layer_of(name) > layer_of(module))
    assert not upward, f"sgrad.{module} imports {upward}, which sit above it in sgrad.LAYERS (docs/architecture.md)"


def test_a_module_that_imports_from_a_layer_above_is_found(tmp_path):
    """The check above can fail: a kernel that imports the training loop sits below what it imports."""
    for folder in ("nn", "training"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "training" / "loop.py").write_text("")
    (tmp_path / "nn" / "kernels.py").write_text("from ..training.loop import train_loop\n")
    module, imported = sgrad_imports(tmp_path / "nn" / "kernels.py", tmp_path)
    assert (module, imported) == ("nn.kernels", {"training.loop"})
    assert layer_of("training.loop") > layer_of("nn.kernels")


def test_no_module_imports_the_package_sgrad_itself():
    """Each module imports the module that defines what it needs, never ``sgrad`` (its __init__), which imports them."""
    importers = sorted(module for module, imported in import_graph().items() if "__init__" in imported)
    assert importers == []


def cycles(graph):
    """Every module that reaches itself through the imports in ``graph``, with the path it takes."""
    found = []
    for start in graph:
        paths, frontier = {start: [start]}, [start]
        while frontier:
            current = frontier.pop()
            for name in graph.get(current, ()):
                if name == start:
                    found.append(" -> ".join(paths[current] + [start]))
                    frontier = []
                    break
                if name not in paths:
                    paths[name] = paths[current] + [name]
                    frontier.append(name)
    return found


def test_no_module_imports_itself_through_a_cycle():
    """Packages' __init__ files and imports inside functions count: a cycle through either is a cycle."""
    assert cycles(import_graph()) == []


def test_a_cycle_through_an_import_inside_a_function_and_a_package_is_found(tmp_path):
    """The check above sees what sgrad once had: checkpoint importing __version__ from sgrad, inside a function."""
    (tmp_path / "__init__.py").write_text("from .checkpoint import save_checkpoint\n")
    (tmp_path / "checkpoint.py").write_text("def made_by():\n    from . import __version__\n    return __version__\n")
    graph = dict(sgrad_imports(path, tmp_path) for path in sorted(tmp_path.glob("*.py")))
    assert graph == {"__init__": {"checkpoint"}, "checkpoint": {"__init__"}}
    assert cycles(graph) == ["__init__ -> checkpoint -> __init__", "checkpoint -> __init__ -> checkpoint"]


def test_the_library_below_the_experiments_takes_only_the_argument_checks_from_data_gen():
    below = [p for p in modules() if layer_of(sgrad_imports(p)[0]) < sgrad.LAYERS.index("training")]
    imported = {p.name: line.strip() for p in below for line in p.read_text().splitlines()
                if line.lstrip().startswith(("import data_gen", "from data_gen"))}
    assert imported == {"argument_checks.py": "from data_gen.checks import MAX_ARRAY_BYTES, Seed, check_bool, check_bytes, "
                                              "check_integer, make_rng"}


def test_import_sgrad_loads_neither_matplotlib_nor_the_datasets():
    code = ("import sys, sgrad; sgrad.Layer(2, 2, 'tanh', seed=0); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'data_gen')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['data_gen', 'data_gen.checks']"


def test_import_sgrad_loads_the_foundation_nn_and_dni_alone():
    """Not the recurrent parts, the training plumbing, the parallel engine, the experiments, the figures, the course
    or the command line: they load when first used."""
    code = "import sys, sgrad; print(' '.join(sorted(m[len('sgrad.'):] for m in sys.modules if m.startswith('sgrad.'))))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = result.stdout.split()
    assert "nn.layers" in loaded and "dni.decoupled" in loaded
    assert [name for name in loaded if layer_of(name) > sgrad.LAYERS.index("dni")] == []


def test_the_course_and_what_a_run_raises_load_on_first_use():
    code = ("import sys, sgrad; before = 'sgrad.course' in sys.modules; sgrad.course.check_layer_backward; "
            "sgrad.TrainingDiverged; print(before, 'sgrad.course.checkers' in sys.modules, "
            "'sgrad.training.diverged' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True", "True"]


# In a fresh interpreter: every file that sgrad.provenance reads for its digest, counted by an audit hook (Python's
# own record of every file opened), after `import sgrad` and after the first stamp.
COUNT_DIGEST_READS = """
import sys
reads = []
def frames():
    frame = sys._getframe(1)
    while frame is not None:
        yield frame
        frame = frame.f_back
def note(event, args):
    if event == "open" and str(args[0]).endswith(".py") and any(
            frame.f_code.co_name == "source_digest" for frame in frames()):
        reads.append(args[0])
sys.addaudithook(note)
import sgrad
from sgrad import provenance
print(len(reads), provenance._stamp is None)
stamp = provenance.made_by()
print(len(reads), provenance._stamp is None, len(provenance.source_files()), stamp == provenance.made_by())
"""


def test_import_sgrad_reads_no_source_file_and_the_first_stamp_reads_each_once():
    result = subprocess.run([sys.executable, "-c", COUNT_DIGEST_READS], capture_output=True, text=True, check=True)
    at_import, after_stamp = result.stdout.splitlines()
    assert at_import == "0 True"
    reads, unset, files, same = after_stamp.split()
    assert (reads, unset, same) == (files, "False", "True")
    assert int(files) == len(modules())


def test_the_experiments_load_on_first_use():
    code = "import sys, sgrad; sgrad.TrainConfig(); print('data_gen.binary_addition' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize("path", modules(), ids=module_name)
def test_no_private_twin_of_a_public_method(path):
    """A module offers one path: no ``_forward`` beside ``forward``, no flags that skip the checks."""
    twins = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            methods = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            twins += [f"{node.name}.{m}" for m in methods if m.startswith("_") and not m.startswith("__")
                      and m.lstrip("_") in methods]
    assert twins == []
    assert "spend" not in path.read_text()


def dni_maths(path):
    """The lines of ``path`` that do a DNI step's maths itself: a gradient generator's forward, backward, update or
    predict, ĝ by name, or a block's learning rates (a block's ``synthetic_update`` and ``update_synthetic_weights``
    use them; the plan's ``alpha`` is the top layer's).  An input generator's public ``forward`` and ``update`` are
    each a whole line of :func:`sgrad.dni.steps.complete_unlock_step` (lines 1 and 6), which a worker calls as the
    step does."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("forward", "backward", "update", "predict")
                and "generator" in ast.unparse(node.func.value)
                and not (node.func.attr in ("forward", "update")
                         and ast.unparse(node.func.value).startswith(("input_generators[", "w.input_generators[",
                                                                      "self.input_generators[")))):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        names = {node.id} if isinstance(node, ast.Name) else {node.attr} if isinstance(node, ast.Attribute) else set()
        if names & {"g_hat", "synthetic_gradient", "generator_alpha"} or (
                names == {"alpha"} and isinstance(node, ast.Attribute) and not ast.unparse(node.value).endswith("plan")):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_parallel_engine_runs_the_dni_step_of_sgrad_dni_and_has_none_of_its_own():
    """One DNI step for every caller: a worker calls a block's synthetic_update, never a generator."""
    files = sorted((ROOT / "parallel").glob("*.py"))
    assert [line for path in files for line in dni_maths(path)] == []
    schedules = (ROOT / "parallel" / "schedules.py").read_text()
    assert ".update_from_synthetic_gradient(" in schedules and ".update_generator(" in schedules
    assert "I_k.forward(x, condition)" in schedules and ".input_generators[j].update(h, " in schedules


def test_the_scan_for_dni_maths_finds_it_where_it_is():
    """The check above can fail: the step's own module does the maths."""
    found = dni_maths(ROOT / "dni" / "decoupled.py")
    assert any("generator.forward(h, condition)" in line for line in found)
    assert any("generator.update(target, self.generator_alpha)" in line for line in found)


def test_only_the_argument_checks_the_experiments_and_the_command_line_import_data_gen():
    importers = sorted(module_name(p) for p in modules() if any(
        line.lstrip().startswith(("import data_gen", "from data_gen")) for line in p.read_text().splitlines()))
    assert [name for name in importers
            if name != "argument_checks" and not name.startswith(("experiments.", "cli."))] == []
    assert "argument_checks" in importers and "cli.compare" in importers


def test_the_measuring_and_the_batch_order_are_shared_by_a_run_in_one_process_and_the_workers():
    graph = import_graph()
    measuring = sorted(m for m, imported in graph.items() if "training.evaluation" in imported)
    assert [m for m in measuring if m != "experiments.binary_addition"] == ["experiments.mnist", "parallel.worker"]
    batch_order = {m for m, imported in graph.items() if "training.batches" in imported}
    assert {"training.loop", "parallel.worker", "parallel.pipeline"} <= batch_order


def test_the_command_line_loads_the_grader_only_for_sgrad_grade():
    """``sgrad compare`` and the others never import the grader, nbclient or nbformat; ``sgrad grade`` does."""
    code = ("import sys; from sgrad.cli import build_parser; build_parser({command!r}); "
            "print(' '.join(sorted(m for m in sys.modules if m in {grading})))")
    grading = {"sgrad.cli.grade", "sgrad.course.grader", "sgrad.course.gradebook", "nbclient", "nbformat"}
    loaded = {command: subprocess.run([sys.executable, "-c", code.format(command=command, grading=grading)],
                                      capture_output=True, text=True, check=True).stdout.split()
              for command in ("compare", "grade")}
    assert loaded["compare"] == []
    assert {"sgrad.cli.grade", "sgrad.course.grader"} <= set(loaded["grade"])


def refusals(text):
    """The files of sgrad whose code (not a docstring or comment) raises a message holding ``text``."""
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None and text in ast.unparse(node.exc):
                found.append(module_name(path))
    return sorted(set(found))


def test_each_guard_of_a_pass_back_or_an_update_is_written_once():
    """A backward pass before a forward one, or after an update, is refused by Module.forward_cache alone; an update
    of a regression net (a gradient or input generator) with nothing to correct, or twice, by RegressionNet alone;
    a DNI module says the former in its own calls' names, before its generator is reached."""
    assert refusals("needs a forward pass first") == ["nn.module"]
    assert refusals("the last forward pass used the old weights") == ["dni.generators", "nn.module"]
    assert refusals("to correct; call") == ["dni.decoupled", "dni.generators"]
    assert {"nn.layers", "recurrent.tbptt"} <= set(refusals("must"))  # the scan sees the raises of other files
