"""sgrad: Decoupled Neural Interfaces (synthetic gradients) in pure NumPy, for teaching.

The blog post's names are kept: :class:`Layer`, :class:`DNI`, and the
nonlinearity pairs such as :func:`sigmoid` / :func:`sigmoid_out2deriv`.

``import sgrad`` loads the library alone: the experiments (``sgrad.train``,
``sgrad.compare``, ...) and their datasets load when first used, and
matplotlib only where a figure is drawn.  Nor does it read sgrad's source:
the digest that stamps a result (:mod:`sgrad.provenance`) is computed when
first needed.
"""

import importlib
from typing import Any

from . import provenance  # first: it notes the source files as they are when sgrad is imported
from . import blackbox, checkpoint, course
from .batchnorm import BatchNorm
from .blocks import Activation, Sequential, dense_block
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .divergence import TrainingDiverged
from .dni import DNI, DNIBlock, synthetic_step
from .generators import LinearGenerator, MLPGenerator, SyntheticLossGenerator
from .layers import Layer
from .losses import bce_with_logits, mse, softmax, softmax_cross_entropy
from .module import Module
from .nonlinearities import (identity, identity_out2deriv, relu, relu_out2deriv, sigmoid, sigmoid_out2deriv, tanh,
                             tanh_out2deriv)
from .optimizers import SGD, Adam, Momentum, UpdateRule
from .version import __version__

# The binary-addition experiment, loaded on first use (it brings in data_gen).
_EXPERIMENT = "sgrad.experiments.binary_addition"
_LAZY = {name: _EXPERIMENT for name in ("METHODS", "TrainConfig", "train", "compare", "results_table")}

__all__ = [
    "DNI", "DNIBlock", "synthetic_step", "Layer", "Module", "LinearGenerator", "MLPGenerator",
    "SyntheticLossGenerator", "BatchNorm", "Activation", "Sequential", "dense_block",
    "sigmoid", "sigmoid_out2deriv", "tanh", "tanh_out2deriv", "relu", "relu_out2deriv",
    "identity", "identity_out2deriv",
    "mse", "bce_with_logits", "softmax", "softmax_cross_entropy",
    "SGD", "Momentum", "Adam", "UpdateRule",
    "METHODS", "TrainConfig", "TrainingDiverged", "train", "compare", "results_table",
    "checkpoint", "save_checkpoint", "load_checkpoint", "CheckpointError",
    "blackbox", "course", "provenance", "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sgrad' has no attribute {name!r}")
