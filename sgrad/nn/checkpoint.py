"""Checkpoints: a network's arrays, and whatever its caller adds, in one ``.npz`` file, saved atomically.

A checkpoint holds

- every array that training changes, named by the attribute path that reaches
  it: a layer's ``weights`` and ``bias``, its update rule's state
  (``update_state.weights.m``, ``.v`` and the step count ``.t`` for Adam),
  batch norm's ``gamma``, ``beta``, ``running_mean`` and ``running_var``, and
  the same inside every block and generator, e.g. ``'1.generator.net.modules.2.weights'``;
- any extra arrays the caller adds (a training loop's current batch order);
- JSON metadata: the format and its version, what made it (``code``: sgrad's
  version and the digest of its source, :func:`~sgrad.provenance.made_by`), then whatever the
  caller adds (settings, step, the batch generator's state, the history so far).

Saving writes a temporary file beside the checkpoint and renames it over the
old one (:func:`sgrad.atomic_files.atomic_write`), so an interrupted save leaves
the previous checkpoint whole.  A training run saved and carried on (its batch
order and history with the network) is :mod:`sgrad.training.resume`.
"""

import json
import os
import pathlib
import zipfile
from typing import Any, NamedTuple

import numpy as np

from ..atomic_files import atomic_write
from ..provenance import made_by
from .module import Module

FORMAT = "sgrad-checkpoint"
FORMAT_VERSION = 1
START_AFRESH = "delete it to start afresh, or restore it from a copy"  # what to do with a damaged checkpoint
_NETWORK, _EXTRA, _METADATA = "network.", "extra.", "metadata"

Network = Any  # a layer or block (Layer, DNI, DNIBlock, Sequential, BatchNorm, ...), or a list of them
PathLike = str | os.PathLike


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: truncated or corrupt, from a newer sgrad, or for another network."""


class CheckpointNotFoundError(FileNotFoundError, CheckpointError):
    """No checkpoint file where one was asked for."""


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` read.

    metadata : the JSON metadata (``format``, ``format_version`` and what the saver added).
    network : the network's arrays by name, as :func:`network_state` names them.
    extra : the extra arrays by name.
    """

    metadata: dict
    network: dict
    extra: dict


def network_state(network: Network) -> dict[str, np.ndarray]:
    """Copies of every array that training changes in ``network``, by name.

    network : a layer or block (``Layer``, ``DNI``, ``DNIBlock``, ``Sequential``,
        ``BatchNorm``, ...) or a list of them (names then start with the index).
    Each array keeps its shape, e.g. ``'0.weights'``: (input_dim, output_dim),
    ``'0.update_state.weights.t'``: () for Adam's step count.
    """
    return {name: np.array(_get(owner, key)) for name, (owner, key) in _slots(network).items()}


def load_network_state(network: Network, arrays: dict[str, np.ndarray]) -> None:
    """Copy ``arrays`` (named as :func:`network_state` names them) into ``network``, in place.

    Every name, shape and dtype is checked before anything is copied, so a
    mismatch raises :class:`CheckpointError` (naming the array) and leaves the
    network unchanged.
    """
    slots = _slots(network)
    _check_architecture(slots, arrays, network)
    for name, (owner, key) in slots.items():
        live = _get(owner, key)
        if isinstance(live, np.ndarray):
            live[...] = arrays[name]
        else:  # a plain number in an update rule's state
            _set(owner, key, type(live)(arrays[name].item()))


def save_checkpoint(path: PathLike, network: Network, *, metadata: dict | None = None,
                    extra: dict[str, np.ndarray] | None = None) -> pathlib.Path:
    """Write ``network``'s state, ``extra`` arrays and JSON ``metadata`` to ``path`` (an .npz file), atomically.

    The file is written beside ``path`` under a temporary name and renamed over
    it only when complete: if the save fails or is interrupted, the previous
    checkpoint at ``path`` is still there and whole.  The metadata also gets
    ``code`` (:func:`made_by`).  ``extra`` arrays of Python objects are refused
    with a TypeError before anything is written.  Returns the path.
    """
    path = pathlib.Path(path)
    meta = {**(metadata or {}), "code": made_by(), "format": FORMAT, "format_version": FORMAT_VERSION}
    payload = {_NETWORK + name: value for name, value in network_state(network).items()}
    for name, value in (extra or {}).items():
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"extra[{name!r}] holds Python objects (dtype {array.dtype}), which a checkpoint cannot "
                            "store (loading it would run pickled code); pass arrays of numbers, and put "
                            "other values into metadata as JSON")
        payload[_EXTRA + name] = array
    payload[_METADATA] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    return atomic_write(path, lambda file: _write_npz(file, payload))


def load_checkpoint(path: PathLike, network: Network | None = None) -> Checkpoint:
    """Read the checkpoint at ``path``; if ``network`` is given, copy its arrays into it (see :func:`load_network_state`).

    Raises :class:`CheckpointNotFoundError` for a missing file and
    :class:`CheckpointError` for a truncated or corrupt one, one written by a
    newer sgrad, or one saved from a different network.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointNotFoundError(f"no checkpoint at {path}: expected an .npz file written by "
                                      "sgrad.nn.checkpoint.save_checkpoint; check the path")
    payload = _read_npz(path)
    if _METADATA not in payload:
        raise CheckpointError(f"{path} is an .npz file but not an sgrad checkpoint (it has no {_METADATA!r} entry)")
    try:
        metadata = json.loads(payload.pop(_METADATA).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is corrupt (its metadata is not JSON: {error}); "
                              "delete it to start afresh, or restore it from a copy") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path} is an .npz file but not an sgrad checkpoint (format {FORMAT!r} expected)")
    version = metadata.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{path} is damaged: its 'format_version' must be a whole number from 1 to "
                              f"{FORMAT_VERSION}; got {version!r}; delete it to start afresh, or restore it from a copy")
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path} was written in checkpoint format version {version!r}, but this sgrad reads "
                              f"versions up to {FORMAT_VERSION}; load it with a newer sgrad")
    checkpoint = Checkpoint(metadata,
                            {k[len(_NETWORK):]: v for k, v in payload.items() if k.startswith(_NETWORK)},
                            {k[len(_EXTRA):]: v for k, v in payload.items() if k.startswith(_EXTRA)})
    if network is not None:
        try:
            load_network_state(network, checkpoint.network)
        except CheckpointError as error:
            raise CheckpointError(f"cannot load {path}: {error}") from None
    return checkpoint


def _slots(network):
    """``{name: (owner, key)}`` for every array training changes; the owner is a module or a state dict.

    The names follow the module tree (:meth:`sgrad.nn.module.Module.submodules`):
    a list's modules are named by their index, and every module's arrays by
    the path that reaches it, e.g. ``'0.block.modules.1.running_mean'``.
    """
    tops = [(str(k), module) for k, module in enumerate(network)] if isinstance(network, (list, tuple)) \
        else [("", network)]
    slots = {}
    for prefix, top in tops:
        if not isinstance(top, Module):
            raise TypeError(f"cannot checkpoint {type(top).__name__} at {prefix or 'the top'}: "
                            "build the network from sgrad's modules (Layer, DNI, blocks, generators)")
        for path, module in top.submodules(prefix):
            base = f"{path}." if path else ""
            if not isinstance(module, Module):
                if getattr(module, "parameters", None):
                    raise TypeError(f"cannot checkpoint {type(module).__name__} at {path}: it is not an sgrad "
                                    "Module, so its arrays cannot be named; build it from sgrad's modules")
                continue
            for name in module.own_parameters():
                slots[base + name] = (module, name)
                for key in module.update_state[name]:
                    slots[f"{base}update_state.{name}.{key}"] = (module.update_state[name], key)
            for name in module.buffers():
                slots[base + name] = (module, name)
        _check_reached(top, slots, prefix)
    return slots


def _check_reached(module, slots, prefix):
    """Every trainable array of ``module`` must be among ``slots``: a module that does not list a child in
    ``children()`` would otherwise lose that child's arrays without a word."""
    reached = {id(_get(owner, key)) for owner, key in slots.values()}
    for name, param in module.parameters.items():
        if id(param) not in reached:
            raise TypeError(f"cannot checkpoint {type(module).__name__} at {prefix or 'the top'}: its parameter "
                            f"{name!r} belongs to no module listed by children(); list it there")


def _check_architecture(slots, arrays, network):
    if isinstance(network, (list, tuple)):
        saved_layers = len({name.split(".", 1)[0] for name in arrays})
        if saved_layers != len(network):
            raise CheckpointError(f"the checkpoint holds a network of {saved_layers} layers, this network has "
                                  f"{len(network)}; build the network with the settings it was saved with")
    missing = [name for name in slots if name not in arrays]
    unknown = [name for name in arrays if name not in slots]
    if missing or unknown:
        raise CheckpointError(
            "the checkpoint was saved from a different network: "
            + (f"it has no array {missing[0]!r}, which this network needs" if missing
               else f"it holds {unknown[0]!r}, which this network does not have")
            + f" ({len(missing)} missing, {len(unknown)} unexpected); build the network with the settings it was saved with")
    for name, (owner, key) in slots.items():
        live, saved = np.asarray(_get(owner, key)), arrays[name]
        if saved.shape != live.shape or saved.dtype != live.dtype:
            raise CheckpointError(f"array {name!r} is {saved.dtype} of shape {saved.shape} in the checkpoint but "
                                  f"{live.dtype} of shape {live.shape} in this network; build the network with "
                                  "the settings (widths, depth, dtype) it was saved with")


def _get(owner, key):
    return owner[key] if isinstance(owner, dict) else getattr(owner, key)


def _set(owner, key, value):
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)


def _write_npz(file, payload):
    np.savez(file, **payload)


def _read_npz(path):
    """Every entry of the .npz at ``path``, read in full: reading checks each entry's CRC, so damage shows here."""
    try:
        with open(path, "rb") as file:  # opened here, so that it is closed even when np.load fails
            archive = np.load(file, allow_pickle=False)
            if isinstance(archive, np.lib.npyio.NpzFile):
                with archive:
                    return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as error:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt: {error}); "
                              "delete it to start afresh, or restore it from a copy") from None
    raise CheckpointError(f"{path} holds a single array, not a checkpoint (an .npz archive written by "
                          "sgrad.nn.checkpoint.save_checkpoint); check the path")
