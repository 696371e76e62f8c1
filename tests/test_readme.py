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
