"""The homework for Otter-Grader: the instructor's notebook, built from notebook 07 and the reference answers.

Otter-Grader builds Gradescope autograders from one instructor's notebook: ``otter assign`` turns it
into the student release and the autograder (a zip of the tests), and ``otter run`` grades a
submission with that zip, as Gradescope does.  :func:`instructor_notebook` writes that notebook in
Otter's format: notebook 07's cells, each exercise a question whose solution is the answer of
``notebooks/instructor/solutions.py`` (inside the stub, so that ``otter assign`` gives back the stub the
student sees) and whose test is sgrad's checker with ``raise_on_failure=True``.  The answers and the
result live in a clone of sgrad's repository, beside the course's notebooks, and not in the package:
an installed sgrad has neither.  The result is committed as ``notebooks/instructor/07_homework.ipynb``
(named as the student's notebook, which ``otter assign`` names the release after); after notebook 07 or
the answers change, in the clone::

    python -m sgrad.course.autograder      # rewrites notebooks/instructor/07_homework.ipynb

Otter's tests run in the student's kernel, as every Otter test does: unlike ``sgrad grade``, they
cannot tell a notebook that patches its kernel from one that does the work.
"""

import ast
import pathlib
import sys
from typing import Any

CLONE = pathlib.Path(__file__).resolve().parents[2]  # the repository's checkout, when sgrad runs from one
HOMEWORK = CLONE / "notebooks" / "07_homework.ipynb"
SOLUTIONS = CLONE / "notebooks" / "instructor" / "solutions.py"
INSTRUCTOR = CLONE / "notebooks" / "instructor" / "07_homework.ipynb"
CONFIG = """\
# ASSIGNMENT CONFIG
name: 07_homework
init_cell: true
check_all_cell: false
export_cell: false
run_tests: false
"""
# (question name, the stub's class, the name of its answer in the solutions file, the checker that tests it)
QUESTIONS = (
    ("backward", "MyLayer", "MY_LAYER", "check_layer_backward"),
    ("dni_update", "MyDNI", "MY_DNI", "check_dni_update"),
    ("generator_update", "MyFullDNI", "MY_FULL_DNI", "check_generator_update"),
)
STUB_LINE = "        raise NotImplementedError  # replace with your code"


def answers(solutions: pathlib.Path = SOLUTIONS) -> dict[str, str]:
    """The answer of each question in the file ``solutions``, by its name there (``MY_LAYER``, ...), read as
    text: the file is not run."""
    solutions = pathlib.Path(solutions)
    if not solutions.is_file():
        raise FileNotFoundError(f"the reference answers {solutions} are not there: they live in a clone of sgrad's "
                                "repository (notebooks/instructor/solutions.py), not in an installed sgrad; run this "
                                "from a clone, or give the path of your copy")
    found = {}
    for node in ast.parse(solutions.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[node.targets[0].id] = value.value
    missing = [name for _, _, name, _ in QUESTIONS if name not in found]
    if missing:
        raise ValueError(f"{solutions} must assign each answer as a string; it lacks {', '.join(missing)}")
    return {name: found[name] for _, _, name, _ in QUESTIONS}


def instructor_notebook(homework: pathlib.Path = HOMEWORK, solutions: pathlib.Path = SOLUTIONS) -> Any:
    """Notebook 07 in Otter's format, with the answers of ``solutions`` and sgrad's checkers as tests."""
    import nbformat

    answer_of = answers(solutions)
    if not pathlib.Path(homework).is_file():
        raise FileNotFoundError(f"notebook 07, {homework}, is not there: run this from a clone of sgrad's repository, "
                                "or give the path of the notebook")
    notebook = nbformat.read(homework, as_version=4)
    new = nbformat.v4
    cells = [new.new_raw_cell(CONFIG)]
    for cell in notebook.cells:
        question = next((q for q in QUESTIONS if cell.cell_type == "code" and cell.source.startswith(f"class {q[1]}(")),
                        None)
        if question is None:
            cells.append(_copy(cell))
            continue
        name, class_name, answer_name, checker = question
        answer = answer_of[answer_name]
        prompt = cells.pop()  # the markdown above the stub: the question's text
        cells += [new.new_raw_cell(f"# BEGIN QUESTION\nname: {name}\npoints: 1"), prompt,
                  new.new_raw_cell("# BEGIN SOLUTION"), new.new_code_cell(_solution(cell.source, answer)),
                  new.new_raw_cell("# END SOLUTION"), new.new_raw_cell("# BEGIN TESTS"),
                  new.new_code_cell(f"from sgrad.course import {checker}\n"
                                    f"_ = {checker}({class_name}, raise_on_failure=True)"),
                  new.new_raw_cell("# END TESTS"), new.new_raw_cell("# END QUESTION")]
    return new.new_notebook(cells=cells, metadata=notebook.metadata)


def _solution(stub: str, answer: str) -> str:
    """The stub with its ``raise NotImplementedError`` line replaced by the answer's lines that the stub lacks,
    and that line kept as Otter's prompt (what ``otter assign`` puts back in the student's release)."""
    if STUB_LINE not in stub:
        raise ValueError(f"expected the stub to end with {STUB_LINE.strip()!r}")
    have = {_code(line) for line in stub.splitlines()}
    body = [line for line in answer.rstrip().splitlines()[2:] if _code(line) not in have]
    block = (["        # BEGIN SOLUTION NO PROMPT", *body, "        # END SOLUTION", '        """ # BEGIN PROMPT',
              STUB_LINE, '        """ # END PROMPT'])
    return stub.replace(STUB_LINE, "\n".join(block))


def _code(line: str) -> str:
    return line.split("#")[0].strip()


def _copy(cell: Any) -> Any:
    import nbformat

    made = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell,
            "raw": nbformat.v4.new_raw_cell}[cell.cell_type]
    return made(cell.source)


def main() -> int:
    import nbformat

    try:
        notebook = instructor_notebook()
    except (OSError, ValueError) as error:
        print(f"sgrad.course.autograder: {error}", file=sys.stderr)
        return 1
    nbformat.write(notebook, INSTRUCTOR)
    print(f"wrote {INSTRUCTOR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
