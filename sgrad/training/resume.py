"""A training run saved and carried on: the network, the batch order and the history in one checkpoint.

A training loop (:func:`sgrad.training.loop.train_loop`, and the parallel pipeline) saves its run with
:func:`save_run` every so many steps; :func:`resume_run` carries it on if the file holds this run, saved by
this code (:func:`sgrad.provenance.made_by`), and refuses a file whose fields are not what :func:`save_run`
wrote.  :func:`fingerprint` names the data a run trained on, so that a run on other data does not resume.
"""

import hashlib
import json
import math
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..argument_checks import check_record, damaged
from ..nn.checkpoint import (START_AFRESH, Checkpoint, CheckpointError, Network, PathLike, load_checkpoint,
                             load_network_state, save_checkpoint)
from ..provenance import CHANGED, is_this_code, made_by
from .batches import BatchOrder


def fingerprint(*arrays: np.ndarray) -> str:
    """A SHA-256 hex digest of the arrays' shapes, dtypes and bytes: the same data gives the same string."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.shape}{array.dtype.str}".encode())
        digest.update(array.data.cast("B"))  # the bytes in place: no copy of a 188 MB training set
    return digest.hexdigest()


def save_run(path: PathLike, network: Network, run: dict, *, step: int, batches: dict[str, Any], history: dict,
             loop: dict | None = None) -> pathlib.Path:
    """Checkpoint a training loop after ``step`` steps, so that :func:`resume_run` can carry it on.

    run : what identifies the run (method, settings without the budget, data fingerprint); JSON-ready.
    batches : the batch order's state (:meth:`sgrad.training.batches.BatchOrder.state`: its rng's state, the
        pass's order (n_train,) and the position in it).
    history : the history so far (JSON-ready).  loop : any other JSON-ready loop state.
    """
    metadata = {"run": run, "step": step, "rng": batches["rng"], "history": history,
                "loop": {"position": batches["position"], **(loop or {})}}
    return save_checkpoint(path, network, metadata=metadata, extra={"order": batches["order"]})


def resume_run(path: PathLike | None, network: Network, run: dict, *, budget: int, batches: BatchOrder,
               history: dict, check_history: Callable[[dict], Any] | None = None,
               progress: Callable[[str], None] | None = None) -> Checkpoint | None:
    """Carry on the run saved at ``path`` if it is this run: load ``network`` and ``batches``; return the checkpoint.

    Returns None (training starts afresh, and ``progress`` is told why) if
    there is no file, or it was saved by other code (another sgrad version or
    source, see :func:`made_by`), or by another run (``run`` differs), or it
    is already past ``budget`` steps.  A file that is damaged, or whose fields
    do not hold what :func:`save_run` writes (``history`` shaped like the fresh
    ``history`` given here, see :func:`~sgrad.argument_checks.check_record`),
    raises :class:`CheckpointError` naming the file and the field, and
    changes nothing; so does a saved history that ``check_history`` refuses
    (with a ValueError or TypeError: the experiment's own state, e.g. its
    curriculum).  The checkpoint's ``metadata`` holds ``step``, ``history``
    and ``loop``.
    """
    if path is None:
        return None
    ours = made_by()  # the code's digest, read now, at the run's start: what this run's checkpoints will carry
    if not pathlib.Path(path).exists():
        return None
    checkpoint = load_checkpoint(path)
    metadata = checkpoint.metadata
    saved, expected = metadata.get("run"), json.loads(json.dumps(run))
    reason = None
    code = metadata.get("code")
    if not is_this_code(code):
        reason = ("it was saved by other code (" + _code_differences(code, ours)
                  + "), whose results would not be this code's")
    elif saved != expected:
        reason = "it was saved with other settings or data (" + _differences(saved, expected) + ")"
    else:
        _check_run_fields(path, checkpoint, batches, history, check_history)
        if metadata["step"] > budget:
            reason = f"it is at step {metadata['step']}, past this run's {budget}"
    if reason is not None:
        if progress is not None:
            progress(f"not resuming from {path}: {reason}; starting afresh")
        return None
    load_network_state(network, checkpoint.network)
    batches.rng.bit_generator.state = metadata["rng"]
    batches.order, batches.position = checkpoint.extra["order"], metadata["loop"]["position"]
    return checkpoint


def _check_run_fields(path, checkpoint, batches, history, check_history):
    """Refuse a checkpoint of a loop whose fields do not hold what :func:`save_run` writes, before anything loads."""

    def refuse(what):
        return damaged(path, what, START_AFRESH, CheckpointError)

    metadata, order = checkpoint.metadata, checkpoint.extra.get("order")
    step = metadata.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise refuse(f"its 'step' must be a whole number >= 0; got {step!r}")
    try:
        probe = type(batches.rng.bit_generator)()
        probe.state = metadata.get("rng")
    except (TypeError, ValueError, KeyError) as error:
        raise refuse(f"its 'rng' is not the state of a {type(probe).__name__} generator ({error})") from None
    try:
        check_record(metadata.get("history"), history, "its 'history'")
        check_record(metadata.get("loop"), {"position": 0, "losses": []}, "its 'loop'")
    except ValueError as error:
        raise refuse(str(error)) from None
    if check_history is not None:
        try:
            check_history(metadata["history"])
        except (TypeError, ValueError, KeyError) as error:
            raise refuse(f"its 'history' does not hold a state this experiment can carry on from ({error})") from None
    if not isinstance(order, np.ndarray) or order.ndim != 1 or order.dtype.kind not in "iu" or (
            len(order) and not np.array_equal(np.sort(order), np.arange(batches.examples))):
        raise refuse(f"its batch 'order' must be a permutation of the {batches.examples} training examples (or empty)")
    position, losses = metadata["loop"]["position"], metadata["loop"]["losses"]
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= len(order):
        raise refuse(f"its loop's 'position' must be a whole number from 0 to {len(order)}; got {position!r}")
    if not all(value is not None and math.isfinite(value) for value in losses):
        raise refuse("its loop's 'losses' must be finite numbers")


def _code_differences(code, ours):
    if not isinstance(code, dict):
        return "it records none: an older sgrad"
    if code.get("sgrad_version") != ours["sgrad_version"]:
        return f"sgrad {code.get('sgrad_version')} then, {ours['sgrad_version']} now"
    if ours["source_digest"] is None:
        return CHANGED + "; start Python again to run the edited code"
    return f"source digest {str(code.get('source_digest'))[:12]} then, {ours['source_digest'][:12]} now"


def _differences(saved, expected):
    if not isinstance(saved, dict):
        return "no run recorded"
    keys = [k for k in dict.fromkeys([*expected, *saved]) if saved.get(k) != expected.get(k)]
    if keys == ["config"]:
        config, ours = saved["config"], expected["config"]
        return ", ".join(f"{k} {config.get(k)!r} then, {ours.get(k)!r} now"
                         for k in dict.fromkeys([*ours, *config]) if config.get(k) != ours.get(k))
    return ", ".join(f"{k} differs" for k in keys)
