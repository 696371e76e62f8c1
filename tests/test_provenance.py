"""What code made a result (sgrad.provenance): the digest of the code that ran, never of an edit made since."""

import json
import os
import subprocess
import sys

import pytest
from conftest import copy_of_the_code

from sgrad import provenance
from sgrad.version import __version__

# Imports sgrad, stamps at once or not, edits a source file, then stamps (again).
EDIT_DURING_A_RUN = """
import json, pathlib, sys
from sgrad import provenance
if sys.argv[2] == "stamp before the edit":
    provenance.made_by()
source = pathlib.Path(sys.argv[1])
source.write_text(source.read_text(encoding="utf-8") + "# edited\\n", encoding="utf-8")
stamp = provenance.made_by()
print(json.dumps({"stamp": stamp, "this code": provenance.is_this_code(stamp), "on disk": provenance.source_digest()}))
"""


def run_in_a_copy(tmp_path, when):
    src = copy_of_the_code(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(src))
    digest = [sys.executable, "-c", "from sgrad.provenance import source_digest; print(source_digest())"]
    before = subprocess.run(digest, capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    result = subprocess.run([sys.executable, "-c", EDIT_DURING_A_RUN, str(src / "sgrad" / "dni" / "steps.py"), when],
                            capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    return before, json.loads(result.stdout)


def test_a_stamp_taken_before_an_edit_stays_that_of_the_code_that_ran(tmp_path):
    before, seen = run_in_a_copy(tmp_path, "stamp before the edit")
    assert seen["stamp"] == {"sgrad_version": __version__, "source_digest": before}
    assert seen["on disk"] != before
    assert seen["this code"] is True


def test_a_first_stamp_after_an_edit_names_no_digest_and_matches_nothing(tmp_path):
    _, seen = run_in_a_copy(tmp_path, "edit first")
    assert seen["stamp"] == {"sgrad_version": __version__, "source_digest": None, "source_changed": provenance.CHANGED}
    assert seen["this code"] is False  # not even a stamp equal to its own: another edited process may give it too


def test_the_stamp_of_this_process_is_the_source_on_disk_when_nothing_was_edited():
    assert provenance.made_by() == {"sgrad_version": __version__, "source_digest": provenance.source_digest()}
    assert provenance.is_this_code(provenance.made_by())


@pytest.mark.parametrize("stamp", [None, "0.1.0", {"sgrad_version": "0.0.9", "source_digest": "0" * 64}],
                         ids=["none", "not-a-dict", "other-version"])
def test_a_stamp_of_other_code_or_none_is_not_this_code(stamp):
    assert not provenance.is_this_code(stamp)
