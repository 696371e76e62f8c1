"""The homework for Otter-Grader: the instructor's notebook, built from notebook 08 and the reference answers.

Otter-Grader builds Gradescope autograders from one instructor's notebook: ``otter assign`` turns it
into the student release and the autograder (a zip of the tests), and ``otter run`` grades a
submission with that zip, as Gradescope does.  :func:`instructor_notebook` writes that notebook in
Otter's format: notebook 08's cells, each exercise a question whose solution is the answer of
:mod:`sgrad.course.solutions` (inside the stub, so that ``otter assign`` gives back the stub the
student sees) and whose test is sgrad's checker with ``raise_on_failure=True``.  The result is
committed as ``sgrad/course/otter/08_homework.ipynb``; after notebook 08 or the answers change::

    python -m sgrad.course.autograder      # rewrites sgrad/course/otter/08_homework.ipynb

Otter's tests run in the student's kernel, as every Otter test does: unlike ``sgrad grade``, they
cannot tell a notebook that patches its kernel from one that does the work.
"""

import pathlib
import sys
from typing import Any

from . import solutions

HOMEWORK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "08_homework.ipynb"
INSTRUCTOR = pathlib.Path(__file__).resolve().parent / "otter" / "08_homework.ipynb"
CONFIG = """\
# ASSIGNMENT CONFIG
name: 08_homework
init_cell: true
check_all_cell: false
export_cell: false
run_tests: false
"""
# (question name, the stub's class, its answer, the checker that tests it)
QUESTIONS = (
    ("backward", "MyLayer", solutions.MY_LAYER, "check_layer_backward"),
    ("dni_update", "MyDNI", solutions.MY_DNI, "check_dni_update"),
    ("generator_update", "MyFullDNI", solutions.MY_FULL_DNI, "check_generator_update"),
)
STUB_LINE = "        raise NotImplementedError  # replace with your code"


def instructor_notebook(homework: pathlib.Path = HOMEWORK) -> Any:
    """Notebook 08 in Otter's format, with the answers and sgrad's checkers as tests."""
    import nbformat

    notebook = nbformat.read(homework, as_version=4)
    new = nbformat.v4
    cells = [new.new_raw_cell(CONFIG)]
    for cell in notebook.cells:
        question = next((q for q in QUESTIONS if cell.cell_type == "code" and cell.source.startswith(f"class {q[1]}(")),
                        None)
        if question is None:
            cells.append(_copy(cell))
            continue
        name, class_name, answer, checker = question
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

    INSTRUCTOR.parent.mkdir(exist_ok=True)
    nbformat.write(instructor_notebook(), INSTRUCTOR)
    print(f"wrote {INSTRUCTOR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
