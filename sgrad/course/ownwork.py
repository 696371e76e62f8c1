"""What the grader reads in a notebook's source, in its own process: is each graded method the student's own work?

The grader drives the student's classes in the kernel and judges their answers in its own process
(:mod:`sgrad.course.checkers`), but sgrad's reference code is importable in the kernel too: a right
answer alone does not show that the student wrote it.  So the grader also reads the notebook's code
cells (the file, not the kernel) and asks, for each exercise:

1. **The class defines the method itself**: a ``class`` statement at the top of a code cell, whose
   body ends its bindings of the method's name with a plain ``def`` (no decorator), and no other
   statement that binds the class's name.
2. **It does not hand the work to sgrad**: neither the method nor anything of the notebook it uses
   (its functions, the class's other methods, the names it reads) calls one of sgrad's steps
   (``backward``, ``update``, ``step``, ``forward_and_synthetic_update``, ...), ``super()``, or a name
   imported from sgrad.

And, for the notebook as a whole, **it leaves the grader alone**: no code changes a module, a class or a
built-in at run time (attribute assignments to them, ``setattr``, ``__dict__``, ...), runs text as
code (``exec``, ``eval``, ``compile``, ``__import__``), reaches into the kernel (``get_ipython``,
IPython's hooks, ``sys.modules``, ``gc``, ``inspect``, ``ctypes``, ...), or uses an IPython magic
other than ``%matplotlib``.  Homework needs none of these; each is a way to make the kernel's answers
differ from what the notebook's text says.  A determined student can still hide code where this
reading does not look (the instructor's page says what it does not protect against).

:func:`inspect_notebook` returns the findings: notebook-wide ones, and one list per exercise.
"""

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# Calls that would do a graded step for the student: sgrad's steps, by their names.
STEP_NAMES = frozenset({"backward", "update", "step", "forward_and_synthetic_update", "update_synthetic_weights",
                        "normal_update", "forward_and_update", "update_from_synthetic_gradient", "update_generator",
                        "update_module_from_synthetic_gradient", "update_from_true_gradient", "synthetic_step",
                        "dni_step", "backprop_step", "synthetic_loss_step", "dense_backward", "linear_backward"})
# Names that run text as code, or change or reach into what the grader relies on.
DYNAMIC_NAMES = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr",
                           "delattr", "get_ipython", "breakpoint", "__builtins__"})
MACHINERY_MODULES = frozenset({"builtins", "importlib", "inspect", "gc", "ctypes", "types", "IPython", "ipykernel",
                               "traitlets", "zmq", "jupyter_client", "code", "codeop", "runpy", "pickle", "marshal",
                               "dill", "cloudpickle", "copyreg", "threading", "_thread", "ast", "dis", "operator",
                               "functools", "sitecustomize", "site"})
SYS_MACHINERY = frozenset({"modules", "meta_path", "path_hooks", "path_importer_cache", "settrace", "setprofile",
                           "_getframe", "addaudithook", "displayhook", "excepthook", "_current_frames", "stdout",
                           "stderr", "stdin", "__stdout__", "__stderr__"})
READABLE_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__qualname__", "__class__"})
ALLOWED_MAGICS = frozenset({"matplotlib"})
LIBRARIES = ("sgrad", "data_gen")  # imports whose names a graded method may not use: they hold the reference


@dataclass
class Finding:
    """Something the notebook's source does that the grader refuses: where, and what, in a few words."""

    place: str    # "code cell 3, line 2"
    text: str     # the line, shortened
    reason: str

    def __str__(self) -> str:
        return f"{self.place} (`{self.text}`): {self.reason}"


@dataclass
class Findings:
    notebook: list[Finding] = field(default_factory=list)
    exercises: dict[str, list[str]] = field(default_factory=dict)  # class name: messages


@dataclass
class _Cell:
    number: int      # among the code cells, from 1
    tree: ast.Module
    lines: list[str]
    magics: set[int] = field(default_factory=set)  # ids of the get_ipython names of the magics allowed

    def place(self, node: ast.AST) -> tuple[str, str]:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return f"code cell {self.number}, line {line}", text if len(text) <= 60 else text[:57] + "..."


def inspect_notebook(sources: Iterable[str], exercises: Iterable[tuple[str, str]]) -> Findings:
    """Read the code cells ``sources`` (in order) for the ``(class name, method name)`` of each exercise."""
    findings = Findings()
    cells = []
    for number, source in enumerate(sources, start=1):
        cell = _parse(number, source, findings.notebook)
        if cell is not None:
            cells.append(cell)
    names = _TopLevel(cells)
    exercises = list(exercises)
    for cell in cells:
        findings.notebook += _tampering(cell, names, {class_name for class_name, _ in exercises})
    findings.notebook.sort(key=lambda finding: tuple(int(word) for word in finding.place.replace(",", "").split()
                                                     if word.isdigit()))
    for class_name, method in exercises:
        findings.exercises[class_name] = _own_work(cells, names, class_name, method)
    return findings


def _parse(number: int, source: str, notebook: list[Finding]) -> "_Cell | None":
    """The cell as Python, its magics turned into the calls IPython makes of them; None if it does not compile
    (then the kernel raised SyntaxError for it too, and nothing of it ran)."""
    from IPython.core.inputtransformer2 import TransformerManager  # here: only grading needs IPython

    try:
        python = TransformerManager().transform_cell(source)
        tree = ast.parse(python)
    except (SyntaxError, ValueError):
        return None
    cell = _Cell(number, tree, python.splitlines())
    for node in ast.walk(tree):
        magic = _magic(node)
        if magic in ALLOWED_MAGICS:
            cell.magics.add(id(node.func.value.func))  # type: ignore[attr-defined]
        elif magic is not None:
            notebook.append(Finding(*cell.place(node), f"an IPython magic or shell command ({magic}): the grader "
                                    "runs none but %matplotlib"))
    return cell


def _magic(node: ast.AST) -> "str | None":
    """The magic's name if ``node`` is ``get_ipython().run_line_magic('name', ...)`` (or a cell magic, or ``!``)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name) and node.func.value.func.id == "get_ipython"):
        if node.func.attr in ("run_line_magic", "run_cell_magic") and node.args and \
                isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value)
        return node.func.attr
    return None


class _TopLevel:
    """What each name bound at the top of a code cell is bound to: defs and classes, assigned values, imports."""

    def __init__(self, cells: list[_Cell]) -> None:
        self.bindings: dict[str, list[tuple[_Cell, ast.AST]]] = {}
        self.imported: dict[str, str] = {}  # name: the module it came from
        for cell in cells:
            for node in cell.tree.body:
                for name, value in _binds(node):
                    self.bindings.setdefault(name, []).append((cell, value))
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        module = node.module if isinstance(node, ast.ImportFrom) else alias.name
                        bound = alias.asname or alias.name.split(".")[0]
                        self.imported[bound] = ("." * getattr(node, "level", 0)) + (module or "")

    def from_library(self, name: str) -> bool:
        module = self.imported.get(name)
        return module is not None and module.split(".")[0] in LIBRARIES


def _binds(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """``(name, what it is bound to)`` for each name a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name, node
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id, node.value if node.value is not None else node
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield alias.asname or alias.name.split(".")[0], node


# --- the notebook leaves the grader alone -----------------------------------------------------------------


def _tampering(cell: _Cell, names: _TopLevel, classes: set[str]) -> list[Finding]:
    found = []

    def refuse(node: ast.AST, reason: str) -> None:
        found.append(Finding(*cell.place(node), reason))

    for node in ast.walk(cell.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                if module.split(".")[0] in MACHINERY_MODULES:
                    refuse(node, f"imports {module}, which reaches into the kernel or runs code the notebook does "
                                 "not show")
            for alias in node.names:
                if (alias.asname or alias.name) in classes:
                    refuse(node, f"binds {alias.asname or alias.name} otherwise than by its class statement")
        elif isinstance(node, ast.Name):
            if node.id in classes and not isinstance(node.ctx, ast.Load):
                refuse(node, f"binds {node.id} otherwise than by its class statement")
            elif node.id in DYNAMIC_NAMES and id(node) not in cell.magics:
                refuse(node, f"uses {node.id}, which changes or runs code out of the notebook's sight")
            elif node.id.startswith("__") and node.id.endswith("__") and node.id != "__name__":
                refuse(node, f"uses {node.id}")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__") and (
                    node.attr not in READABLE_DUNDERS or not isinstance(node.ctx, ast.Load)):
                refuse(node, f"uses .{node.attr}, which reaches into an object's machinery")
            elif isinstance(node.value, ast.Name) and names.imported.get(node.value.id) == "sys" and \
                    node.attr in SYS_MACHINERY:
                refuse(node, f"uses sys.{node.attr}")
            elif not isinstance(node.ctx, ast.Load):
                root = _root(node)
                if node.attr in STEP_NAMES or (root is not None and (root in names.imported or root in classes)):
                    refuse(node, f"changes {_dotted(node)} at run time")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                (len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)):
            refuse(node, "uses getattr with a name computed at run time")
        elif isinstance(node, ast.Global):
            for name in set(node.names) & classes:
                refuse(node, f"binds {name} otherwise than by its class statement")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in classes and not (isinstance(node, ast.ClassDef) and node in cell.tree.body):
                refuse(node, f"binds {node.name} otherwise than by its class statement at the top of a cell")
            if isinstance(node, ast.ClassDef) and node.name in classes and (node.decorator_list or node.keywords):
                refuse(node, f"class {node.name} has a decorator or a metaclass")
            if node.name in ("__getattribute__", "__getattr__", "__init_subclass__", "__set_name__",
                             "__class_getitem__", "__get__", "__set__", "__delete__", "__new__", "__del__"):
                refuse(node, f"defines {node.name}, which changes how attributes or classes are found")
    return found


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, ast.Assign):
        roots = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
        roots = [node.target]
    elif isinstance(node, ast.Delete):
        roots = node.targets
    elif isinstance(node, ast.With):
        roots = [item.optional_vars for item in node.items if item.optional_vars is not None]
    else:
        roots = []
    for root in roots:
        yield from ast.walk(root)


def _root(node: ast.AST) -> "str | None":
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return "an attribute"


# --- the method is the student's own --------------------------------------------------------------------


def _own_work(cells: list[_Cell], names: _TopLevel, class_name: str, method: str) -> list[str]:
    """The reasons why ``class_name.method`` is not the notebook's own work; empty if it is."""
    classes = [(cell, node) for cell in cells for node in cell.tree.body
               if isinstance(node, ast.ClassDef) and node.name == class_name]
    if not classes:
        return [f"the notebook has no class statement for {class_name} at the top of a code cell"]
    reasons = []
    for cell, cls in classes:
        definition = _method(cls, method)
        if definition is None:
            reasons.append(f"class {class_name} ({cell.place(cls)[0]}) does not define {method} in its body: "
                           f"it would run the {method} it inherits. Write {method} in the class body with def.")
            continue
        calls = _forbidden(cell, definition, cells, names, class_name)
        if calls:
            reasons.append(f"{method}() called {' and '.join(dict.fromkeys(calls))}, which this exercise forbids.\n"
                           "Hint (a forbidden call): it would do the exercise for you, with sgrad's code. Write it "
                           "with arrays.")
    return reasons


def _method(cls: ast.ClassDef, method: str) -> "ast.FunctionDef | None":
    """The plain ``def method`` that ends the class body's bindings of ``method``; None if there is none."""
    last = None
    for node in cls.body:
        for name, value in _binds(node):
            if name == method:
                last = value
    if isinstance(last, ast.FunctionDef) and not last.decorator_list:
        return last
    return None


def _forbidden(cell: _Cell, definition: ast.AST, cells: list[_Cell], names: _TopLevel, class_name: str) -> list[str]:
    """What ``definition``, and all of the notebook it reaches, uses that hands the work to sgrad, as labels."""
    own_methods = _class_methods(cells, class_name)
    labels: list[str] = []
    seen: set[int] = set()
    todo: list[ast.AST] = [definition]
    labelled: set[int] = set()  # the names under a labelled attribute: Layer of Layer.backward
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        local = _local_names(node)
        for sub in ast.walk(node):
            if id(sub) in labelled:
                continue
            if isinstance(sub, ast.Attribute) and sub.attr in STEP_NAMES:
                labels.append(_label(sub))
                labelled |= {id(name) for name in ast.walk(sub.value) if isinstance(name, ast.Name)}
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self" and \
                    sub.attr in own_methods:
                todo.extend(own_methods[sub.attr])
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in local:
                if sub.id == "super" or sub.id in STEP_NAMES:
                    labels.append(f"{sub.id}()")
                elif names.from_library(sub.id):
                    labels.append(f"{sub.id} (imported from {names.imported[sub.id]})")
                else:
                    todo.extend(value for _, value in names.bindings.get(sub.id, ()))
    return labels


def _class_methods(cells: list[_Cell], class_name: str) -> dict[str, list[ast.AST]]:
    """The methods of the notebook's class ``class_name`` and of its bases that the notebook defines."""
    classes = {node.name: node for cell in cells for node in cell.tree.body if isinstance(node, ast.ClassDef)}
    methods: dict[str, list[ast.AST]] = {}
    todo, seen = [class_name], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in classes:
            continue
        seen.add(name)
        for node in classes[name].body:
            for bound, value in _binds(node):
                methods.setdefault(bound, []).append(value)
        todo += [base.id for base in classes[name].bases if isinstance(base, ast.Name)]
    return methods


def _local_names(node: ast.AST) -> set[str]:
    """The names a function binds for itself (its arguments and assignments), which shadow the notebook's."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()
    arguments = node.args
    local = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    local |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            local.add(sub.id)
    return local


def _label(node: ast.Attribute) -> str:
    """How a message names a forbidden use: ``self.update()``, ``super().backward()``, ``Layer.backward``."""
    value = node.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
        return f"super().{node.attr}()"
    return f"{_dotted(node)}()"
