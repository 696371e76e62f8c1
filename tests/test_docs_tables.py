"""Every table on the results pages and in the README is the one ``docs/tables.py`` writes from its committed records.

After a run's record is committed, ``python docs/tables.py`` rewrites the tables; this test fails while a page's
table differs from its record, a marker names no table, or a table is marked on no page.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "tables.py"


def tables_module():
    spec = importlib.util.spec_from_file_location("docs_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_marked_table_is_written_from_its_record():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, ""), \
        f"{result.stderr}run 'python docs/tables.py' and commit the pages it rewrites"


def test_a_number_typed_into_a_table_is_found_and_put_back():
    tables = tables_module()
    page = (ROOT / "docs" / "results" / "mnist.md").read_text()
    assert "| 98.07% |" in page
    typed = page.replace("| 98.07% |", "| 98.70% |", 1)
    assert typed != page and tables.rewrite(typed) == page


# What a measured figure looks like in a table: a decimal, a percentage, seconds, milliseconds or a ratio.
MEASURED = re.compile(r"\d\.\d|\d ?%|\d ms\b|\d s\b|\d×")


def test_no_results_page_has_a_table_of_measurements_outside_the_markers():
    """A results page's tables of figures are generated, each between the markers; none is typed in by hand."""
    tables = tables_module()
    for page in sorted((ROOT / "docs" / "results").glob("*.md")):
        outside = tables.MARKED.sub("", page.read_text())
        typed = [line for line in outside.splitlines() if line.startswith("|") and MEASURED.search(line)]
        assert typed == [], f"{page.name} has table rows of figures outside the generated tables: {typed}"
