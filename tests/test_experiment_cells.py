"""The cache of finished cells (sgrad.experiments.cells): reused by the same code with the same settings, else not."""

import json

from sgrad.experiments.cells import CellCache
from sgrad.provenance import made_by

SETTINGS = {"config": {"depth": 3, "widths": (8, 8)}, "data": "abc"}


def test_a_saved_cell_is_loaded_by_the_same_code_with_the_same_settings(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={"accuracy": [0.5]})
    record = json.loads((tmp_path / "cells" / "dni-depth3.json").read_text())
    assert record == {"settings": json.loads(json.dumps(SETTINGS)), "code": made_by(), "history": {"accuracy": [0.5]}}
    loaded = CellCache(tmp_path, lines.append).load("dni-depth3", SETTINGS, "[dni, depth 3]")
    assert loaded is not None and loaded["history"] == {"accuracy": [0.5]}
    assert lines == [f"[dni, depth 3] loaded from {tmp_path}"]


def test_a_cell_of_other_settings_is_not_loaded_and_nothing_is_said(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={})
    other = dict(SETTINGS, data="abd")
    assert CellCache(tmp_path, lines.append).load("dni-depth3", other, "[dni, depth 3]") is None
    assert CellCache(tmp_path, lines.append).load("dni-depth4", SETTINGS, "[dni, depth 4]") is None
    assert lines == []


def test_a_cell_made_by_other_code_is_not_loaded_and_says_why(tmp_path):
    lines = []
    CellCache(tmp_path).save("dni-depth3", SETTINGS, history={})
    path = tmp_path / "cells" / "dni-depth3.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps(dict(record, code={"sgrad_version": "0.1.0", "source_digest": "0" * 64})))
    assert CellCache(tmp_path, lines.append).load("dni-depth3", SETTINGS, "[dni, depth 3]") is None
    assert lines == [f"[dni, depth 3] not reusing {path}: it was made by other code (another sgrad version or "
                     "source); training again"]


def test_without_a_folder_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = CellCache(None)
    cache.save("dni-depth3", SETTINGS, history={})
    assert cache.load("dni-depth3", SETTINGS, "[dni, depth 3]") is None
    assert list(tmp_path.iterdir()) == []
