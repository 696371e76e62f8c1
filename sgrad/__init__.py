"""sgrad: Decoupled Neural Interfaces (synthetic gradients) in pure NumPy, for teaching.

The blog post's names are kept: :class:`Layer`, :class:`DNI`, and the
nonlinearity pairs such as :func:`sigmoid` / :func:`sigmoid_out2deriv`.

The package's folders are its layers, bottom to top (:data:`LAYERS`, drawn in
``docs/architecture.md``): beneath them all, the modules at sgrad's top (the
argument checks, atomic files, the version, provenance); then ``nn``, the
modules and their kernels; ``dni``, the generators and the DNI step; ``recurrent``,
truncated BPTT with DNI; ``training``, the plumbing every experiment shares;
``parallel``; ``experiments``; ``course``; ``cli``.  A module imports only from
its own layer and those beneath it.

``import sgrad`` loads the foundation, ``nn`` and ``dni`` alone: the experiments
(``sgrad.train``, ``sgrad.compare``, ...) and their datasets, ``TrainingDiverged``
and the course load when first used, and matplotlib only where a figure is drawn.
Nor does it read sgrad's source: the digest that stamps a result
(:mod:`sgrad.provenance`) is computed when first needed.
"""

import importlib
from typing import Any

from . import provenance  # first: it notes the source files as they are when sgrad is imported
from .dni import zeroth_order as blackbox
from .dni.decoupled import DNI, DNIBlock, synthetic_step
from .dni.generators import LinearGenerator, MLPGenerator, SyntheticLossGenerator
from .dni.synthetic_inputs import InputGenerator
from .nn import checkpoint
from .nn.batchnorm import BatchNorm
from .nn.blocks import Activation, Sequential, dense_block
from .nn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .nn.layers import Layer
from .nn.losses import bce_with_logits, mse, softmax, softmax_cross_entropy
from .nn.module import Module
from .nn.nonlinearities import (identity, identity_out2deriv, relu, relu_out2deriv, sigmoid, sigmoid_out2deriv, tanh,
                                tanh_out2deriv)
from .nn.optimizers import SGD, Adam, Momentum, UpdateRule
from .version import __version__

# sgrad's sub-packages, bottom to top.  A module imports only from its own sub-package, from those before it, and
# from the modules at sgrad's top, which import from none of them; tests/test_architecture.py checks it.
LAYERS = ("nn", "dni", "recurrent", "training", "parallel", "experiments", "course", "cli")

# What loads on first use, by the module that defines it: the binary-addition experiment (it brings in
# data_gen), what a training run raises, and the course.
_EXPERIMENT = "sgrad.experiments.binary_addition"
_LAZY = {**{name: _EXPERIMENT for name in ("METHODS", "TrainConfig", "train", "compare", "results_table")},
         "TrainingDiverged": "sgrad.training.diverged"}

__all__ = [
    "DNI", "DNIBlock", "synthetic_step", "Layer", "Module", "LinearGenerator", "MLPGenerator",
    "SyntheticLossGenerator", "InputGenerator", "BatchNorm", "Activation", "Sequential", "dense_block",
    "sigmoid", "sigmoid_out2deriv", "tanh", "tanh_out2deriv", "relu", "relu_out2deriv",
    "identity", "identity_out2deriv",
    "mse", "bce_with_logits", "softmax", "softmax_cross_entropy",
    "SGD", "Momentum", "Adam", "UpdateRule",
    "METHODS", "TrainConfig", "TrainingDiverged", "train", "compare", "results_table",
    "checkpoint", "save_checkpoint", "load_checkpoint", "CheckpointError",
    "blackbox", "course", "provenance", "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "course":
        return importlib.import_module("sgrad.course")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sgrad' has no attribute {name!r}")
