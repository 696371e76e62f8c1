"""The course notebooks run top to bottom in a real Jupyter kernel, and are committed without outputs.

The tests set ``SGRAD_SMOKE=1``, which each notebook's first code cell reads to shrink its sizes.
Run one notebook alone with ``pytest tests/test_notebooks.py -k 04``.
"""

import json
import os
import pathlib
import re
import time

import pytest

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def execute(path, *, smoke):
    """Run the notebook at ``path`` in a fresh python3 kernel; returns the executed notebook and seconds taken."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    env_before = os.environ.get("SGRAD_SMOKE")
    os.environ["SGRAD_SMOKE"] = "1" if smoke else "0"
    start = time.perf_counter()
    try:
        NotebookClient(notebook, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        if env_before is None:
            del os.environ["SGRAD_SMOKE"]
        else:
            os.environ["SGRAD_SMOKE"] = env_before
    return notebook, time.perf_counter() - start


def test_the_course_has_its_twelve_notebooks_in_order():
    assert [p.stem[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(1, 13)], [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_title_is_its_number_and_a_title_in_one_heading(path):
    # The course's style: the first cell opens with "# NN · Title in sentence case", NN the file's number,
    # and no other cell has a top-level heading.
    cells = json.loads(path.read_text())["cells"]
    first_line = "".join(cells[0]["source"]).splitlines()[0]
    assert cells[0]["cell_type"] == "markdown" and re.fullmatch(rf"# {path.stem[:2]} · [A-Z`]\S.*", first_line), \
        f"{path.name} should open with '# {path.stem[:2]} · Title in sentence case'; it opens with {first_line!r}"
    others = [i for i, cell in enumerate(cells[1:], start=1) if cell["cell_type"] == "markdown"
              and any(line.startswith("# ") for line in "".join(cell["source"]).splitlines())]
    assert not others, f"{path.name}: cells {others} hold a second top-level heading; use '##' for sections"


def full_size_minutes():
    """Each notebook's stem and its minutes at full size, from the record the README's course table is written from
    (``docs/notebook-times.json``, measured by ``benchmarks/notebook_times.py``)."""
    record = json.loads((NOTEBOOK_DIR.parent / "docs" / "notebook-times.json").read_text())["notebooks"]
    return {stem: entry["seconds"] / 60 for stem, entry in record.items()}


def test_every_notebook_has_a_measured_time_and_a_long_one_says_so_in_its_first_cell():
    # The course's rule: a notebook runs at full size within a minute on two cores, or its first cell says how
    # long it takes and why.
    minutes = full_size_minutes()
    assert sorted(minutes) == [path.stem for path in NOTEBOOKS]
    for stem, taken in minutes.items():
        first_cell = "".join(json.loads((NOTEBOOK_DIR / f"{stem}.ipynb").read_text())["cells"][0]["source"])
        if taken > 1.0:
            assert re.search(rf"about {taken:.1f} minutes on two cores.*: ", first_cell), \
                f"{stem} takes {taken:.1f} minutes at full size (docs/notebook-times.json); its first cell should " \
                f"say so, and why"


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_in_smoke_mode(path):
    notebook, _ = execute(path, smoke=True)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code_cells)
    # A figure made with matplotlib's object API (sgrad.experiments.plotting) shows as a picture only once the inline backend
    # is on (`%matplotlib inline`); before that, display(fig) leaves the text "<Figure ...>" alone.
    as_text = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" for output in cell.outputs
               if output.get("data", {}).get("text/plain", "").startswith("<Figure") and "image/png" not in output.data]
    assert not as_text, f"{path.name}: cells {as_text} show a figure as text, not as a picture"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    dirty = [i for i, cell in enumerate(cells)
             if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_reads_the_smoke_flag_first_and_ends_with_what_to_try(path):
    cells = json.loads(path.read_text())["cells"]
    first_code = next(cell for cell in cells if cell["cell_type"] == "code")
    assert "SGRAD_SMOKE" in "".join(first_code["source"])
    last_markdown = [cell for cell in cells if cell["cell_type"] == "markdown"][-1]
    assert "what to try" in "".join(last_markdown["source"]).lower()


def variant(path, tmp_path, old, new):
    """A copy of the notebook at ``path`` in ``tmp_path`` with ``old`` replaced by ``new`` in its code (once)."""
    text = path.read_text()
    encoded_old, encoded_new = json.dumps(old)[1:-1], json.dumps(new)[1:-1]
    assert text.count(encoded_old) == 1, f"{path.name} no longer holds {old!r}"
    copy = tmp_path / path.name
    copy.write_text(text.replace(encoded_old, encoded_new))
    return copy


@pytest.mark.notebooks
def test_notebook_01_last_cell_holds_with_the_default_zero_generator_as_what_to_try_suggests(tmp_path):
    # "Build the DNI layer with its default generator ... and run the last cell again": its checks still hold.
    path = NOTEBOOK_DIR / "01_gradient_argument.ipynb"
    notebook, _ = execute(variant(path, tmp_path, ', generator=LinearGenerator(N_OUT, init="blog", seed=2)', ""),
                          smoke=True)
    printed = "".join(output.get("text", "") for output in notebook.cells[20].outputs)
    assert "largest |ĝ| = 0.000; largest weight step 0.00e+00" in printed


@pytest.mark.notebooks
def test_notebook_08_runs_on_its_stand_in_when_no_mnist_is_on_the_machine(tmp_path, monkeypatch):
    # No $SGRAD_DATA_DIR archive and an empty cache: the loader finds nothing, smoke mode does not download,
    # and the notebook says so and goes on with its printed digits in MNIST's layout, never calling them MNIST.
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    notebook, _ = execute(NOTEBOOK_DIR / "08_from_the_blog_to_the_paper.ipynb", smoke=True)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    printed = "".join(output.get("text", "") for output in outputs)
    assert "MNIST (mnist.npz) not found." in printed and "No MNIST, so this notebook goes on with a stand-in" in printed
    assert "stand-in digits, not MNIST: x_train (2000, 784) float32" in printed
    tables = [output.data["text/markdown"] for output in outputs if "text/markdown" in output.get("data", {})]
    assert len(tables) == 1 and "(stand-in digits, not MNIST)" in tables[0] and "| method | 3 layers |" in tables[0]
    assert not (tmp_path / "cache" / "sgrad").exists(), "in smoke mode the loader should not try to download"
