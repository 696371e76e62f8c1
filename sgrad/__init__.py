"""sgrad: Decoupled Neural Interfaces (synthetic gradients) in pure NumPy, for teaching.

The blog post's names are kept: :class:`Layer`, :class:`DNI`, and the
nonlinearity pairs such as :func:`sigmoid` / :func:`sigmoid_out2deriv`.
"""

from . import blackbox, checkpoint, checks
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .comparison import compare, results_table
from .batchnorm import BatchNorm
from .blocks import Activation, Sequential, dense_block
from .dni import DNI, DNIBlock
from .generators import LinearGenerator, MLPGenerator, SyntheticLossGenerator
from .layers import Layer
from .losses import bce_with_logits, mse, softmax, softmax_cross_entropy
from .nonlinearities import (identity, identity_out2deriv, relu, relu_out2deriv, sigmoid,
                             sigmoid_out2deriv, tanh, tanh_out2deriv)
from .optimizers import SGD, Adam, Momentum, UpdateRule
from .training import METHODS, TrainConfig, TrainingDiverged, train

__version__ = "0.1.0"

__all__ = [
    "DNI", "DNIBlock", "Layer", "LinearGenerator", "MLPGenerator", "SyntheticLossGenerator",
    "BatchNorm", "Activation", "Sequential", "dense_block",
    "sigmoid", "sigmoid_out2deriv", "tanh", "tanh_out2deriv", "relu", "relu_out2deriv",
    "identity", "identity_out2deriv",
    "mse", "bce_with_logits", "softmax", "softmax_cross_entropy",
    "SGD", "Momentum", "Adam", "UpdateRule",
    "METHODS", "TrainConfig", "TrainingDiverged", "train", "compare", "results_table",
    "checkpoint", "save_checkpoint", "load_checkpoint", "CheckpointError",
    "blackbox", "checks",
]
