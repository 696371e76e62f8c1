"""The homework edition of sgrad: what notebook 07 imports, with no answer to any of its exercises.

``sgrad grade`` runs a handed-in notebook where sgrad itself cannot be reached, with this edition in its
place: a student's ``class MyLayer(Layer)`` then extends a ``Layer`` whose ``backward`` raises, so that
whatever the notebook does to reach sgrad's own code, it finds none to pass a check with.
:func:`build` writes the edition from sgrad's source as it is, through Python's syntax tree:

- the modules are the import closure of what notebook 07 imports (:data:`IMPORTS`), nothing more: no
  experiments, command line, plotting, parallel engine, grader, exercise runner or reference answers;
- each function and method of :data:`WITHHELD` keeps its signature, and its body (docstring included)
  becomes ``raise NotImplementedError("<its name> is withheld while sgrad grade runs: write it
  yourself")``.  The rule: no backward pass of any kind (every one holds a dense layer's backward, or
  its first line), no part of the DNI step, no part of a generator's step;
- ``sgrad.course`` keeps the numerical gradient tools (``numerical_gradient``, ``relative_error``,
  ``gradient_check``: they compare the student's own forward and backward, and hold no answer) and
  the :class:`CheckResult` they return; the three exercise checkers become stand-ins that check
  nothing: ``sgrad grade`` checks each exercise itself, on inputs of its own, once the notebook has run.
  The exercises' modules, which hold the judges, their references and their hints, are left out.

Comments do not survive the syntax tree; docstrings do.  :func:`build` fails if an entry of
:data:`WITHHELD` names nothing, or if a kept module has a backward pass that the list does not name::

    python -m sgrad.course.edition DEST     # writes DEST/sgrad and DEST/data_gen
"""

import ast
import pathlib
import sys

SOURCE = pathlib.Path(__file__).resolve().parents[2]  # the folder that holds the packages sgrad and data_gen

# What notebook 07 imports, by package: the edition's packages export these names, and its modules are
# those that the modules defining them import, and so on.
IMPORTS = {
    "sgrad": ("DNI", "Layer", "bce_with_logits", "__version__"),
    "sgrad.course": ("CheckResult", "check_layer_backward", "check_dni_update", "check_generator_update",
                     "gradient_check", "numerical_gradient", "relative_error"),
    "data_gen": ("generate_dataset",),
}

# The checkers that become stand-ins, and the exercise each one names.
STAND_INS = {"check_layer_backward": "Layer.backward", "check_dni_update": "DNI.forward_and_synthetic_update",
             "check_generator_update": "DNI.update_synthetic_weights"}
STAND_IN_MESSAGE = ("not checked here: sgrad grade checks this exercise itself, on inputs of its own, once the "
                    "notebook has run")

_BACKWARD = "a backward pass: the edition has none, as each holds a dense layer's backward or its first line"
_BATCHNORM = "batch norm's backward: dL/dβ = Σ over the batch of δ is exercise 1's bias gradient"
# Every function and method whose body the edition withholds, by module and qualified name, with the reason.
WITHHELD = {
    "sgrad.nn.kernels.linear_backward": "xᵀ·δ, Σ δ and δ·Wᵀ: exercise 1's gradients, and exercise 2's step and delta",
    "sgrad.nn.kernels.dense_backward": "δ = g ⊙ f'(h), then linear_backward: exercise 1 whole",
    "sgrad.nn.kernels.batchnorm_backward": _BATCHNORM,
    "sgrad.nn.kernels.batchnorm_eval_backward": _BATCHNORM + " (evaluation mode)",
    "sgrad.nn.kernels.rnn_step_backward": "one tanh RNN step is a tanh layer: δ = g ⊙ (1 − h²) and δ·W_hᵀ",
    "sgrad.nn.kernels.lstm_step_backward": "δ·W_hᵀ, a dense layer's input delta",
    "sgrad.nn.kernels.conv2d_backward": "with 1×1 kernels a convolution is a dense layer: xᵀ·δ and δ·Wᵀ",
    "sgrad.nn.kernels.maxpool2d_backward": _BACKWARD,
    "sgrad.nn.kernels.sum_windows": "the backward of sliding_windows, which only backward passes call",
    "sgrad.nn.fast_kernels.batchnorm_backward": _BATCHNORM,
    "sgrad.nn.fast_kernels.maxpool2d_backward": _BACKWARD,
    "sgrad.nn.fast_kernels.conv2d_backward": "with 1×1 kernels a convolution is a dense layer: xᵀ·δ and δ·Wᵀ",
    "sgrad.nn.fast_small_maps.conv2d_backward": "a convolution as one dense matrix: x_flatᵀ·δ and δ·Tᵀ",
    "sgrad.nn.fast_rows.conv2d_backward": "a convolution as one banded matrix: Sᵀ·δ and δ·Nᵀ",
    "sgrad.nn.fast_dft.conv2d_backward": "a convolution in the frequency domain: at each frequency, a dense layer's "
                                         "F(δ)ᴴ·F(x) and F(δ)·F(W)",
    "sgrad.nn.layers.Layer.backward": "exercise 1",
    "sgrad.nn.blocks.Activation.backward": "g ⊙ f'(h): exercise 1's weight_output_delta",
    "sgrad.nn.blocks.Sequential.backward": "its modules' backward passes in a chain: around one Layer, exercise 1",
    "sgrad.nn.batchnorm.BatchNorm.backward": _BATCHNORM,
    "sgrad.nn.batchnorm.BatchNorm._backward_rows": _BATCHNORM,
    "sgrad.nn.conv.Conv2d.backward": "with 1×1 kernels a convolution is a dense layer: exercise 1",
    "sgrad.nn.conv.MaxPool2d.backward": _BACKWARD,
    "sgrad.nn.conv.BatchNorm2d.backward": _BATCHNORM,
    "sgrad.nn.conv.Flatten.backward": _BACKWARD,
    "sgrad.nn.conditioned_conv.ConditionedConv2d.backward": "with 1×1 kernels a convolution is a dense layer: exercise 1",
    "sgrad.dni.decoupled.synthetic_step": "the DNI step: exercise 2",
    "sgrad.dni.decoupled.update_module_from_synthetic_gradient": "the DNI step after the forward pass: exercise 2",
    "sgrad.dni.decoupled.DecoupledModule.forward_and_update": "exercise 2",
    "sgrad.dni.decoupled.DecoupledModule.update_from_synthetic_gradient": "the DNI step after the forward pass: exercise 2",
    "sgrad.dni.decoupled.DecoupledModule.update_generator": "exercise 3",
    "sgrad.dni.decoupled.DNI.forward_and_synthetic_update": "exercise 2, by the blog's name",
    "sgrad.dni.decoupled.DNI.update_synthetic_weights": "exercise 3, by the blog's name",
    "sgrad.dni.decoupled.DNI.update_from_true_gradient": "backward, then a step: exercise 1",
    "sgrad.dni.decoupled.DNIBlock.backward": _BACKWARD,
    "sgrad.dni.generators.regression_loss": "L_M and dL_M/dĝ: the first step of exercise 3's derivation",
    "sgrad.dni.generators.Generator.update": "the generator's step: exercise 3",
    "sgrad.dni.generators.Generator._net_delta": "a part of the generator's step: exercise 3",
    "sgrad.dni.generators.LinearGenerator.parameter_jacobians": "dĝ/dθ of the linear generator: exercise 3's chain rule",
    "sgrad.dni.generators.LinearGenerator.apply_gradients": "a step of the generator's parameters: exercise 3's last line",
    "sgrad.dni.generators.SyntheticLossGenerator._net_forward": "ĝ as the backward pass of a predicted loss",
    "sgrad.dni.generators.SyntheticLossGenerator._net_delta": "a part of the generator's step: exercise 3",
}


def withheld_message(name: str) -> str:
    """What a withheld function raises, ``name`` being its entry in :data:`WITHHELD`."""
    return f"{name} is withheld while sgrad grade runs: write it yourself"


def build(dest: pathlib.Path, source: pathlib.Path = SOURCE) -> pathlib.Path:
    """Write the edition's packages ``dest/sgrad`` and ``dest/data_gen``; returns ``dest``, the folder for sys.path.

    ``source`` is the folder that holds sgrad's packages (this checkout's, by default).  ``dest`` may exist,
    but must not hold either package yet.
    """
    dest = pathlib.Path(dest)
    taken = [name for name in ("sgrad", "data_gen") if (dest / name).exists()]
    if taken:
        raise ValueError(f"{dest} already holds {' and '.join(taken)}; build the edition into a folder without them")
    for name, text in edition(pathlib.Path(source)).items():
        path = dest / pathlib.Path(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dest


def edition(source: pathlib.Path = SOURCE) -> dict[str, str]:
    """The edition's source, ``{module name: text}``, package ``__init__`` files as ``'sgrad.__init__'``."""
    trees: dict[str, ast.Module] = {}
    defined = {package: _defined_in(source, package) for package in IMPORTS}
    pending = [_defining_module(defined[package], package, name) for package, names in IMPORTS.items()
               for name in names]
    while pending:
        module = pending.pop()
        if module in trees:
            continue
        tree = ast.parse(_path(source, module).read_text(encoding="utf-8"))
        trees[module] = _course_module(tree, module, source) if module.startswith("sgrad.course.") else tree
        pending += _imported_modules(trees[module], module, source)
    done = {name for module, tree in trees.items() for name in _withhold(tree, module)}
    stale = sorted(set(WITHHELD) - done)
    if stale:
        raise ValueError(f"sgrad.course.edition.WITHHELD names what sgrad no longer has: {', '.join(stale)}")
    unlisted = sorted(name for module, tree in trees.items() if not module.startswith("sgrad.course.")
                      for name in _backward_passes(tree, module) if name not in WITHHELD)
    if unlisted:
        raise ValueError(f"the homework edition would keep the backward passes {', '.join(unlisted)}: "
                         "add each to sgrad.course.edition.WITHHELD")
    texts = {module: ast.unparse(tree) + "\n" for module, tree in trees.items()}
    for package in IMPORTS:
        texts[f"{package}.__init__"] = _package(package, defined[package])
    for package in sorted({module.rsplit(".", 1)[0] for module in trees} - set(IMPORTS)):  # sgrad's layers: nn, dni
        texts[f"{package}.__init__"] = _docstring_alone(_path(source, f"{package}.__init__"))
    return texts


# --- which modules --------------------------------------------------------------------------------------


def _path(source: pathlib.Path, module: str) -> pathlib.Path:
    return source.joinpath(*module.split(".")).with_suffix(".py")


def _defined_in(source: pathlib.Path, package: str) -> dict[str, list[str]]:
    """``{name: the modules of package that define it at their top}``, over the package's own files and its
    sub-packages' but the course's; each file read once."""
    folder = source.joinpath(*package.split("."))
    defined: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        if path.stem == "__init__" or (package == "sgrad" and path.relative_to(folder).parts[0] == "course"):
            continue
        module = ".".join((package, *path.relative_to(folder).with_suffix("").parts))
        for name in _defined(ast.parse(path.read_text(encoding="utf-8"))):
            defined.setdefault(name, []).append(module)
    return defined


def _defining_module(defined: dict[str, list[str]], package: str, name: str) -> str:
    """The one module of ``package`` that defines ``name`` at its top, from :func:`_defined_in`."""
    found = defined.get(name, [])
    if len(found) != 1:
        raise ValueError(f"expected one module of {package} to define {name}; found {found or 'none'}")
    return found[0]


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names.update(node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name))
    return names


def _imported_modules(tree: ast.Module, module: str, source: pathlib.Path) -> list[str]:
    """The modules of sgrad and data_gen that ``tree`` imports, at its top or inside functions."""
    package = module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            base = base + (node.module.split(".") if node.module else [])
            if base[0] not in ("sgrad", "data_gen"):
                continue
            for alias in node.names:
                candidate = ".".join([*base, alias.name])
                found.append(candidate if _path(source, candidate).exists() else ".".join(base))
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in ("sgrad", "data_gen")]
    unknown = sorted({name for name in found if not _path(source, name).exists()})
    if unknown:  # a package's __init__: the edition's exports only what notebook 07 imports
        raise ValueError(f"{module} imports {', '.join(unknown)}, which the homework edition does not have")
    return found


# --- what each module keeps -------------------------------------------------------------------------------


def _withhold(tree: ast.Module, module: str) -> list[str]:
    """Replace the body of each function of ``tree`` that :data:`WITHHELD` names; returns the names replaced."""
    replaced = []
    for qualified, function in _functions(tree, module):
        if qualified in WITHHELD:
            function.body = ast.parse(f"raise NotImplementedError({withheld_message(qualified)!r})").body
            replaced.append(qualified)
    return replaced


def _functions(tree: ast.Module, module: str) -> list[tuple[str, ast.FunctionDef]]:
    """``(module.qualified.name, def)`` for each function at the top of ``tree`` and each method of its classes."""
    found = []
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            found.append((f"{module}.{statement.name}", statement))
        elif isinstance(statement, ast.ClassDef):
            found += [(f"{module}.{statement.name}.{item.name}", item) for item in statement.body
                      if isinstance(item, ast.FunctionDef)]
    return found


def _backward_passes(tree: ast.Module, module: str) -> list[str]:
    """The functions and methods named ``*backward*`` that ``tree`` still runs (the course's gradient tools,
    which run a student's backward, are not asked)."""
    return [name for name, function in _functions(tree, module)
            if "backward" in function.name and not _withheld(function)]


def _withheld(function: ast.FunctionDef) -> bool:
    return (len(function.body) == 1 and isinstance(function.body[0], ast.Raise)
            and "is withheld while sgrad grade runs" in ast.unparse(function.body[0]))


def _course_module(tree: ast.Module, module: str, source: pathlib.Path) -> ast.Module:
    """A module of sgrad.course as the edition has it.  A helper it borrows from a module that the edition leaves
    out is written into it (:func:`_borrowed`), and an import that nothing kept uses is dropped.  Of
    sgrad.course.checkers the edition keeps the three checkers alone, as stand-ins, with what they need: its
    dispatch to the exercises' modules goes, and those modules with it."""
    body = [_borrowed(statement, tree, source) for statement in tree.body]
    docstring: str | None
    if module == CHECKERS:
        checkers = [statement for statement in tree.body
                    if isinstance(statement, ast.FunctionDef) and statement.name in STAND_INS]
        body = [statement for statement in body if statement not in checkers]
        body.append(ast.parse(f"STAND_IN_MESSAGE = {STAND_IN_MESSAGE!r}").body[0])
        body += [_stand_in(checker) for checker in checkers]
        needed, docstring = set(STAND_INS), CHECKERS_DOCSTRING
    else:
        needed, docstring = set().union(*map(_bound, body)), ast.get_docstring(tree, clean=False)
    grown = True
    while grown:  # the names that the kept statements use, until none is new
        size = len(needed)
        for statement in body:
            if not isinstance(statement, (ast.Import, ast.ImportFrom)) and _bound(statement) & needed:
                needed |= {node.id for node in ast.walk(statement) if isinstance(node, ast.Name)}
        grown = len(needed) > size
    kept: list[ast.stmt] = [ast.Expr(ast.Constant(docstring))] if docstring else []
    for statement in body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            statement.names = [alias for alias in statement.names if _alias_name(alias) in needed]
            if statement.names:
                kept.append(statement)
        elif _bound(statement) & needed:
            kept.append(statement)
    return ast.Module(body=kept, type_ignores=[])


CHECKERS = "sgrad.course.checkers"
CHECKERS_DOCSTRING = """The homework edition's checkers: stand-ins that check nothing.

Each returns a CheckResult that says so, as ``sgrad grade`` checks the exercises itself, on inputs of its own,
once the notebook has run.  The numerical gradient tools (``gradient_check``, ``numerical_gradient``,
``relative_error``) work here as in sgrad.
"""


def _stand_in(checker: ast.FunctionDef) -> ast.FunctionDef:
    """The checker with its signature, returning a CheckResult that says the exercise is not checked here."""
    body = ast.parse(f'"""Checks nothing: sgrad grade checks {STAND_INS[checker.name]} on inputs of its own."""\n'
                     f"return CheckResult({STAND_INS[checker.name]!r}, False, STAND_IN_MESSAGE)").body
    checker.body = body
    return checker


def _borrowed(statement: ast.stmt, tree: ast.Module, source: pathlib.Path) -> ast.stmt:
    """``name = module.function``, for a module of sgrad.course that the edition leaves out: that function's
    own definition, under ``name`` (the check reports take a helper of the exercise runner so)."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Attribute)
            and isinstance(statement.value.value, ast.Name)):
        return statement
    module = next((f"sgrad.course.{alias.name}" for node in tree.body if isinstance(node, ast.ImportFrom)
                   and node.level == 1 and node.module is None for alias in node.names
                   if _alias_name(alias) == statement.value.value.id), None)
    if module is None:
        return statement
    lent = ast.parse(_path(source, module).read_text(encoding="utf-8"))
    function = next(node for node in lent.body if isinstance(node, ast.FunctionDef)
                    and node.name == statement.value.attr)
    function.name = statement.targets[0].id
    return function


def _bound(statement: ast.stmt) -> set[str]:
    if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}
    return set()


def _alias_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


# --- the packages' front doors ------------------------------------------------------------------------------

PACKAGE_DOCSTRINGS = {
    "sgrad": "sgrad's homework edition: what notebook 07 imports, without sgrad's answers to its exercises.\n\n"
             "``sgrad grade`` runs a handed-in notebook with this package in place of sgrad.  Every backward pass,\n"
             "the DNI step and the generator's step raise NotImplementedError: write them in your own classes.\n",
    "sgrad.course": "The homework edition's course: the numerical gradient tools, and stand-ins for the checkers.",
    "data_gen": "The homework edition's datasets: binary addition.",
}


def _docstring_alone(path: pathlib.Path) -> str:
    """A sub-package's ``__init__`` as the edition has it: its docstring, and nothing that imports."""
    return f'"""{ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""}"""\n'


def _package(package: str, defined: dict[str, list[str]]) -> str:
    """The edition's ``__init__`` of ``package``: its docstring, and the names of :data:`IMPORTS` from their modules
    (``defined``: :func:`_defined_in` of the package)."""
    by_module: dict[str, list[str]] = {}
    for name in IMPORTS[package]:
        by_module.setdefault(_defining_module(defined, package, name), []).append(name)
    lines = [f'"""{PACKAGE_DOCSTRINGS[package]}"""', ""]
    lines += [f"from .{module[len(package) + 1:]} import {', '.join(names)}" for module, names in by_module.items()]
    lines += ["", f"__all__ = {list(IMPORTS[package])!r}"]
    return "\n".join(lines) + "\n"


def main(arguments: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if arguments is None else arguments
    if len(arguments) != 1:
        print("usage: python -m sgrad.course.edition DEST   (writes DEST/sgrad and DEST/data_gen)", file=sys.stderr)
        return 2
    try:
        dest = build(pathlib.Path(arguments[0]))
    except (ValueError, OSError) as error:
        print(f"sgrad.course.edition: {error}", file=sys.stderr)
        return 1
    print(f"wrote the homework edition of sgrad to {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
