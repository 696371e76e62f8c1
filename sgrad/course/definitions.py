"""What the grader loads of a notebook to drive its exercises: its imports, functions, classes and constants.

The grader judges the classes a student wrote, not the state the notebook's cells left behind.  So the
process that drives the exercises (:mod:`sgrad.course.exercise_runner`) runs none of the notebook's statements but
its definitions, cell by cell in the notebook's order, as a fresh kernel would:

- ``import`` and ``from ... import`` statements;
- ``def`` and ``class`` statements whose loading runs no code of the notebook: a function's default
  values and a class's bases are names, attributes of names or constants; a function has at most one
  decorator, ``staticmethod``, ``classmethod`` or ``property``; a class has no decorator and no keyword
  (no ``metaclass=``), and its body holds only methods, a docstring, constants and ``pass``;
  annotations are dropped (they change nothing a method computes);
- assignments of a constant (a number, a string, a tuple of them, ...) to a name.

Anything else (a training loop, a call, a plot, an IPython magic) is left out: it cannot change what a
class does when the grader calls it, and it cannot prepare anything for the grader to find.  A method
still runs as written when it is called.
"""

import ast
from dataclasses import dataclass

DECORATORS = frozenset({"staticmethod", "classmethod", "property"})


@dataclass(frozen=True)
class Definitions:
    """The definitions of a notebook: per code cell that has any, its number (from 1) and their source."""

    cells: tuple[tuple[int, str], ...]
    left_out: tuple[str, ...]  # "code cell 4, line 2: a decorator other than staticmethod, ..."


def definitions(sources: list[str]) -> Definitions:
    """The definitions in the code cells ``sources`` (in order); cells that do not compile are skipped, as a
    kernel raises SyntaxError for them and runs nothing of them."""
    from IPython.core.inputtransformer2 import TransformerManager  # here: only grading needs IPython

    cells, left_out = [], []
    for number, source in enumerate(sources, start=1):
        try:
            tree = ast.parse(TransformerManager().transform_cell(source))
        except (SyntaxError, ValueError):
            continue
        kept = []
        for node in tree.body:
            reason = _why_left_out(node)
            if reason is None:
                kept.append(node)
            elif reason:
                left_out.append(f"code cell {number}, line {node.lineno}: {reason}")
        if kept:
            cells.append((number, ast.unparse(ast.Module(body=kept, type_ignores=[]))))
    return Definitions(tuple(cells), tuple(left_out))


def _why_left_out(node: ast.stmt) -> "str | None":
    """None if ``node`` is a definition; otherwise why it is left out ("" for a statement that is plainly not
    one, such as a call or a loop, which the report need not list)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        decorators = node.decorator_list
        if len(decorators) > 1 or any(not (isinstance(d, ast.Name) and d.id in DECORATORS) for d in decorators):
            return f"{node.name} has decorators other than one of {', '.join(sorted(DECORATORS))}"
        defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        if not all(_simple(default) for default in defaults):
            return f"a default value of {node.name} is computed (only names, attributes and constants are loaded)"
        _drop_annotations(node)
        return None
    if isinstance(node, ast.ClassDef):
        if node.decorator_list or node.keywords:
            return f"class {node.name} has a decorator or a keyword such as metaclass="
        if not all(_simple(base) for base in node.bases):
            return f"a base of class {node.name} is computed (only names and attributes of names are loaded)"
        for statement in node.body:
            reason = _why_left_out_of_class(statement)
            if reason is not None:
                return f"class {node.name}'s body holds {reason}"
        return None
    if _constant_assignment(node):
        return None
    return ""


def _why_left_out_of_class(node: ast.stmt) -> "str | None":
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        reason = _why_left_out(node)
        return reason or None
    if isinstance(node, ast.Pass) or _constant_assignment(node):
        return None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return None  # a docstring
    return f"a statement other than a method, a docstring or a constant (line {node.lineno})"


def _simple(node: ast.expr) -> bool:
    """Whether ``node`` is a constant, a name, an attribute of one, or a tuple or negation of such."""
    if isinstance(node, ast.Attribute):
        return _simple(node.value) and not isinstance(node.value, ast.Constant)
    if isinstance(node, ast.Tuple):
        return all(_simple(element) for element in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant)
    return isinstance(node, (ast.Constant, ast.Name))


def _drop_annotations(function: "ast.FunctionDef | ast.AsyncFunctionDef") -> None:
    arguments = function.args
    for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
        if argument is not None:
            argument.annotation = None
    function.returns = None


def _constant_assignment(node: ast.stmt) -> bool:
    """Whether ``node`` binds plain names to a constant (``EPS = 1e-8``, ``SHAPE: tuple = (3, 4)``)."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.annotation, ast.Name):
        targets, value = [node.target], node.value
    else:
        return False
    if not all(isinstance(target, ast.Name) for target in targets):
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True
