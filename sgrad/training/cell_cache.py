"""The cache of finished cells: each cell of a grid kept as it finishes, so that an interrupted grid resumes.

A grid (methods × depths for ``sgrad paper``, tasks × methods × T × seeds for ``sgrad rnn``,
schedules × workers for ``sgrad parallel``) saves each finished cell in
``<out_dir>/cells/<name>.json``, with the settings it depends on and the code that made it
(:func:`sgrad.provenance.made_by`).  A later grid loads a cell instead of training it again only
if both are the same: a cell made with other settings, or by other code, is trained again.
"""

import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

from ..argument_checks import check_record, damaged
from ..atomic_files import atomic_write_text
from ..provenance import CHANGED, is_this_code, made_by

CELLS_FOLDER = "cells"
TRAIN_AGAIN = "delete it to train the cell again"  # what to do with a damaged cell


class CellCache:
    """The finished cells in ``out_dir`` (None: none are kept); ``progress`` hears which are reused, and why not.

    The code's digest is read when the cache is made, before the grid trains its first cell: an edit
    made while the grid runs is never passed off as the code that ran (see :mod:`sgrad.provenance`).
    """

    def __init__(self, out_dir: str | os.PathLike[str] | None, progress: Callable[[str], None] | None = None) -> None:
        self.out_dir, self.progress = out_dir, progress
        self.code = made_by()

    def path(self, name: str) -> pathlib.Path:
        """Where cell ``name`` (e.g. 'dni-depth3') is kept."""
        assert self.out_dir is not None
        return pathlib.Path(self.out_dir) / CELLS_FOLDER / f"{name}.json"

    def load(self, name: str, settings: dict[str, Any], label: str, result: dict[str, Any]) -> dict[str, Any] | None:
        """What :meth:`save` kept of cell ``name`` if this code made it with ``settings``; else None.

        settings : JSON-ready, what the cell depends on.  label : before every progress line, e.g. '[dni, depth 3]'.
        result : what a fresh cell's result holds, e.g. ``{'history': <a fresh history>}``: a reused cell
            must be shaped like it (:func:`~sgrad.argument_checks.check_record`).

        A file that is not a cell (not JSON, damaged or cut short, or shaped otherwise) raises ValueError
        naming it and saying to delete it, so that the cell trains again.
        """
        if self.out_dir is None or not self.path(name).exists():
            return None
        path = self.path(name)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise damaged(path, f"it is not JSON ({error})", TRAIN_AGAIN) from None
        if not isinstance(record, dict):
            raise damaged(path, f"it holds a JSON {type(record).__name__}, not a cell (a JSON object)", TRAIN_AGAIN)
        if record.get("settings") != json.loads(json.dumps(settings)):
            return None  # made with other settings or data: train again
        if not is_this_code(record.get("code")):
            why = ("it was made by other code (another sgrad version or source)" if self.code["source_digest"]
                   else f"{CHANGED}; start Python again to run the edited code")
            self._say(f"{label} not reusing {path}: {why}; training again")
            return None
        try:
            check_record(record, result, "the cell")
        except ValueError as error:
            raise damaged(path, str(error), TRAIN_AGAIN) from None
        self._say(f"{label} loaded from {self.out_dir}")
        return record

    def save(self, name: str, settings: dict[str, Any], **result: Any) -> None:
        """Keep cell ``name``: its ``settings``, the code that made it and ``result`` (JSON-ready, e.g. ``history=``)."""
        if self.out_dir is not None:
            atomic_write_text(self.path(name), json.dumps({"settings": settings, "code": self.code, **result}))

    def _say(self, line):
        if self.progress is not None:
            self.progress(line)
