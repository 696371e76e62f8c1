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
# Each of sgrad's modules in its layer; a module may import only from its own layer or the layers before it.
LAYERS = [
    ["validation", "fast"],
    ["nonlinearities", "initializers", "kernels", "losses", "optimizers"],
    ["module"],
    ["layers", "batchnorm", "blocks", "recurrent", "conv"],
    ["generators"],
    ["dni"],
    ["steps", "boundary_targets", "tbptt", "eligibility_traces", "checkpoint", "course.driver", "course.checkers",
     "course.ownwork", "course.solutions", "blackbox"],
    ["experiments.loop", "parallel.messages", "parallel.timeline", "parallel.schedules", "parallel.worker",
     "parallel.engines", "parallel.local", "parallel.ray_engine", "parallel.pipeline", "parallel.simulator"],
    ["experiments.binary_addition", "experiments.mnist", "experiments.mnist_cnn", "experiments.parallel", "experiments.rnn",
     "experiments.char_lm", "plotting", "course.processes", "course.grader", "course.gradebook", "course.autograder"],
    ["course.command", "cli"],
]
LAYER_OF = {name: k for k, names in enumerate(LAYERS) for name in names}


def sgrad_imports(path):
    """The sgrad modules that ``path`` imports, at the top or inside functions, as dotted names below sgrad."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
            elif node.module and node.module.startswith("sgrad."):
                base = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                for candidate in (".".join([*base, alias.name]), ".".join(base)):
                    if candidate in LAYER_OF:
                        found.add(candidate)
                        break
        elif isinstance(node, ast.Import):
            found.update(a.name[len("sgrad."):] for a in node.names if a.name[len("sgrad."):] in LAYER_OF)
    return module, found


def modules():
    return [p for p in ROOT.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]


def test_every_module_has_a_layer():
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in modules()}
    assert names == set(LAYER_OF), "add a new module to LAYERS here and to docs/architecture.md"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.stem)
def test_imports_flow_from_kernels_up_to_the_command_line(path):
    module, imported = sgrad_imports(path)
    upward = sorted(name for name in imported if LAYER_OF[name] > LAYER_OF[module])
    assert not upward, f"sgrad.{module} imports {upward}, which sit above it in docs/architecture.md"


def test_no_module_imports_itself_through_a_cycle_within_its_layer():
    graph = dict(sgrad_imports(path) for path in modules())
    for start in graph:
        reached, frontier = set(), [start]
        while frontier:
            for name in graph[frontier.pop()]:
                if name == start:
                    pytest.fail(f"sgrad.{start} reaches itself through its imports")
                if name not in reached:
                    reached.add(name)
                    frontier.append(name)


def test_the_library_below_the_experiments_takes_only_the_argument_checks_from_data_gen():
    below = [p for p in modules() if LAYER_OF[sgrad_imports(p)[0]] < LAYER_OF["experiments.loop"]]
    imported = {p.name: line.strip() for p in below for line in p.read_text().splitlines()
                if line.lstrip().startswith(("import data_gen", "from data_gen"))}
    assert imported == {"validation.py": "from data_gen.checks import Seed, check_bool, check_integer, make_rng"}


def test_import_sgrad_loads_neither_matplotlib_nor_the_datasets():
    code = ("import sys, sgrad; sgrad.Layer(2, 2, 'tanh', seed=0); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'data_gen')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['data_gen', 'data_gen.checks']"


def test_the_experiments_load_on_first_use():
    code = "import sys, sgrad; sgrad.TrainConfig(); print('data_gen.binary_addition' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.stem)
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
