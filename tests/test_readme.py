"""The README's hand-written loop runs as printed and learns."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def readme_loop():
    section = README.read_text().split("## The hand-written loop", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_readme_loop_learns_binary_addition():
    namespace = {}
    exec(compile(readme_loop(), str(README), "exec"), namespace)
    assert namespace["loss"] < 0.1
    out = namespace["layer_3"].forward(namespace["layer_2"].forward(namespace["layer_1"].forward(namespace["x"])))
    assert ((out > 0) == (namespace["y"] > 0.5)).mean() > 0.99


FRESH_MACHINE = [
    "python3 -m venv .venv && .venv/bin/python -m pip install -q -U pip && .venv/bin/python -m pip install -q -e . "
    "&& .venv/bin/sgrad compare",
    "python3 -m venv .venv && .venv/bin/python -m pip install -q -U pip && .venv/bin/python -m pip install -q -e "
    "'.[dev]' && .venv/bin/ruff check . && .venv/bin/mypy sgrad data_gen && .venv/bin/python -m pytest",
]


def test_the_readme_opens_with_the_two_fresh_machine_commands():
    blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.DOTALL)
    assert blocks[:2] == FRESH_MACHINE


def test_the_readme_is_a_landing_page_in_a_newcomers_order():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert sections == ["What DNI is, and what it buys", "Install", "The course", "Teach with it", "Results",
                        "Development and tests"]


def test_the_readme_explains_its_terms_where_they_first_appear():
    text = " ".join(README.read_text().split())
    for term, explanation in [("no backprop", "only the top layer learns"), ("the blog", "Trask's post"),
                              ("locked backprop", "each block waits for the whole pass")]:
        first = text.index(term)
        assert explanation in text[first:first + 300], f"'{term}' should be explained where it first appears"
