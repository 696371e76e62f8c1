"""The cache of finished cells (sgrad.training.cell_cache): reused by the same code with the same settings, else not."""

import json

import pytest

from sgrad.provenance import made_by
from sgrad.training.cell_cache import CellCache

SETTINGS = {"config": {"depth": 3, "widths": (8, 8)}, "data": "abc"}
RESULT = {"history": {"accuracy": []}}


def test_a_saved_cell_is_loaded_by_the_same_code_with_the_same_settings(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={"accuracy": [0.5]})
    record = json.loads((tmp_path / "cells" / "dni-depth3.json").read_text())
    assert record == {"settings": json.loads(json.dumps(SETTINGS)), "code": made_by(), "history": {"accuracy": [0.5]}}
    loaded = CellCache(tmp_path, lines.append).load("dni-depth3", SETTINGS, "[dni, depth 3]", RESULT)
    assert loaded is not None and loaded["history"] == {"accuracy": [0.5]}
    assert lines == [f"[dni, depth 3] loaded from {tmp_path}"]


def test_a_cell_of_other_settings_is_not_loaded_and_nothing_is_said(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={"accuracy": []})
    other = dict(SETTINGS, data="abd")
    assert CellCache(tmp_path, lines.append).load("dni-depth3", other, "[dni, depth 3]", RESULT) is None
    assert CellCache(tmp_path, lines.append).load("dni-depth4", SETTINGS, "[dni, depth 4]", RESULT) is None
    assert lines == []


def test_a_cell_made_by_other_code_is_not_loaded_and_says_why(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={"accuracy": []})
    path = tmp_path / "cells" / "dni-depth3.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps(dict(record, code={"sgrad_version": "0.1.0", "source_digest": "0" * 64})))
    assert CellCache(tmp_path, lines.append).load("dni-depth3", SETTINGS, "[dni, depth 3]", RESULT) is None
    assert lines == [f"[dni, depth 3] not reusing {path}: it was made by other code (another sgrad version or "
                     "source); training again"]


def test_without_a_folder_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = CellCache(None)
    cache.save("dni-depth3", SETTINGS, history={"accuracy": []})
    assert cache.load("dni-depth3", SETTINGS, "[dni, depth 3]", RESULT) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage, why", [
    (lambda text: text[:len(text) // 2], "it is not JSON (Unterminated string starting at: line 1 column "),
    (lambda text: "[1, 2]", "it holds a JSON list, not a cell (a JSON object)"),
    (lambda text: text.replace('"history"', '"story"'), "the cell has no 'history'"),
    (lambda text: text.replace('"accuracy": [0.5]', '"accuracy": "high"'),
     "the cell['history']['accuracy'] must be a list; got 'high' (str)"),
], ids=["truncated", "a-list", "no-history", "history-shape"])
def test_a_damaged_cell_is_refused_naming_its_file_and_what_to_do(tmp_path, damage, why):
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={"accuracy": [0.5]})
    path = tmp_path / "cells" / "dni-depth3.json"
    path.write_text(damage(path.read_text()))
    with pytest.raises(ValueError) as info:
        CellCache(tmp_path).load("dni-depth3", SETTINGS, "[dni, depth 3]", RESULT)
    assert str(info.value).startswith(f"{path} is damaged: {why}"), str(info.value)
    assert str(info.value).endswith("; delete it to train the cell again")
