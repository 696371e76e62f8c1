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
# Each of sgrad's modules in its layer; a module may import only from its own layer or the layers before it.  A
# package's __init__.py is named by its package ("__init__" for sgrad's own, "parallel", "experiments").
LAYERS = [
    ["validation", "fast", "version", "provenance"],
    ["nonlinearities", "initializers", "kernels", "losses", "optimizers"],
    ["module"],
    ["layers", "batchnorm", "blocks", "recurrent", "conv"],
    ["generators"],
    ["dni"],
    ["steps", "boundary_targets", "eligibility_traces", "eprop", "tbptt", "divergence", "batches", "evaluation",
     "checkpoint", "course", "course.driver", "course.checkers", "course.ownwork", "course.definitions", "blackbox",
     "__init__"],
    ["experiments.loop", "experiments.settings", "experiments.files", "experiments.cells", "experiments.side_by_side",
     "parallel", "parallel.messages", "parallel.timeline", "parallel.schedules", "parallel.worker",
     "parallel.engines", "parallel.local", "parallel.ray_engine", "parallel.pipeline", "parallel.simulator"],
    ["experiments", "experiments.binary_addition", "experiments.mnist", "experiments.mnist_cnn",
     "experiments.parallel", "experiments.rnn", "experiments.char_lm", "experiments.lstm_model", "plotting",
     "course.processes", "course.sandbox", "course.grader", "course.gradebook", "course.autograder",
     "course.edition"],
    ["cli", "__main__", "course.command", "handout"],
]
LAYER_OF = {name: k for k, names in enumerate(LAYERS) for name in names}


def module_name(path, root=ROOT):
    """The name in LAYERS of the module at ``path``: dotted below sgrad, a package's __init__ by its package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def resolve(parts):
    """The module that the dotted ``parts`` below sgrad name: ``[]`` is sgrad's own __init__."""
    return ".".join(parts) if parts else "__init__"


def sgrad_imports(path, root=ROOT):
    """The sgrad modules that ``path`` imports, at the top or inside functions, as names in LAYERS.

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
                found.add(submodule if submodule in LAYER_OF else resolve(base))
        elif isinstance(node, ast.Import):
            found.update(resolve(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == "sgrad")
    found.discard(module)
    return module, found


def modules():
    return sorted(ROOT.rglob("*.py"))


def import_graph():
    return dict(sgrad_imports(path) for path in modules())


def test_every_module_has_a_layer():
    names = {module_name(p) for p in modules()}
    assert names == set(LAYER_OF), "add a new module to LAYERS here and to docs/architecture.md"


@pytest.mark.parametrize("path", modules(), ids=module_name)
def test_imports_flow_from_kernels_up_to_the_command_line(path):
    module, imported = sgrad_imports(path)
    upward = sorted(name for name in imported if LAYER_OF[name] > LAYER_OF[module])
    assert not upward, f"sgrad.{module} imports {upward}, which sit above it in docs/architecture.md"


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
    below = [p for p in modules() if LAYER_OF[sgrad_imports(p)[0]] < LAYER_OF["experiments.loop"]]
    imported = {p.name: line.strip() for p in below for line in p.read_text().splitlines()
                if line.lstrip().startswith(("import data_gen", "from data_gen"))}
    assert imported == {"validation.py": "from data_gen.checks import MAX_ARRAY_BYTES, Seed, check_bool, check_bytes, "
                                         "check_integer, make_rng"}


def test_import_sgrad_loads_neither_matplotlib_nor_the_datasets():
    code = ("import sys, sgrad; sgrad.Layer(2, 2, 'tanh', seed=0); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'data_gen')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['data_gen', 'data_gen.checks']"


def test_import_sgrad_loads_no_module_above_the_algorithms():
    """Not the loop, the parallel engine, the experiments, the figures or the command line: they load when first used."""
    code = "import sys, sgrad; print(' '.join(sorted(m[len('sgrad.'):] for m in sys.modules if m.startswith('sgrad.'))))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = result.stdout.split()
    assert "layers" in loaded
    assert [name for name in loaded if LAYER_OF[name] > LAYER_OF["__init__"]] == []


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
    """The lines of ``path`` that do a DNI step's maths itself: a generator's forward, backward, update or predict,
    ĝ by name, or a block's learning rates (a block's ``synthetic_update`` and ``update_synthetic_weights`` use them;
    the plan's ``alpha`` is the top layer's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("forward", "backward", "update", "predict")
                and "generator" in ast.unparse(node.func.value)):
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
    assert ".synthetic_update(" in schedules and ".update_synthetic_weights(" in schedules


def test_the_scan_for_dni_maths_finds_it_where_it_is():
    """The check above can fail: the step's own module does the maths."""
    found = dni_maths(ROOT / "dni.py")
    assert any("generator.forward(h, condition)" in line for line in found)
    assert any("generator.update(target, self.generator_alpha)" in line for line in found)


def test_only_validation_the_experiments_and_the_command_line_import_data_gen():
    importers = sorted(module_name(p) for p in modules() if any(
        line.lstrip().startswith(("import data_gen", "from data_gen")) for line in p.read_text().splitlines()))
    assert [name for name in importers if name not in ("validation", "cli") and not name.startswith("experiments.")] == []
    assert "validation" in importers and "cli" in importers


def test_the_measuring_and_the_batch_order_are_shared_by_a_run_in_one_process_and_the_workers():
    graph = import_graph()
    assert sorted(m for m, imported in graph.items() if "evaluation" in imported) == ["experiments.mnist",
                                                                                      "parallel.worker"]
    batch_order = {m for m, imported in graph.items() if "batches" in imported}
    assert {"experiments.loop", "parallel.worker", "parallel.pipeline"} <= batch_order


def test_the_command_line_loads_the_grader_only_for_sgrad_grade():
    """``sgrad compare`` and the others never import the grader, nbclient or nbformat; ``sgrad grade`` does."""
    code = ("import sys; from sgrad.cli import build_parser; build_parser({command!r}); "
            "print(' '.join(sorted(m for m in sys.modules if m in {grading})))")
    grading = {"sgrad.course.command", "sgrad.course.grader", "sgrad.course.gradebook", "nbclient", "nbformat"}
    loaded = {command: subprocess.run([sys.executable, "-c", code.format(command=command, grading=grading)],
                                      capture_output=True, text=True, check=True).stdout.split()
              for command in ("compare", "grade")}
    assert loaded["compare"] == []
    assert {"sgrad.course.command", "sgrad.course.grader"} <= set(loaded["grade"])
