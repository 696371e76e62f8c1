"""The blog's ``Layer``: a dense layer with a hand-written forward and backward pass."""

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from . import kernels
from .initializers import BIAS_INITIALIZERS, initial_bias, initialize
from .module import WeightsAndBias
from .nonlinearities import resolve_nonlinearity
from .optimizers import UpdateRule


class Layer(WeightsAndBias):
    """A dense layer ``h = nonlin(input @ weights + bias)``.

    The blog's positional call works as written::

        layer = Layer(16, 128, sigmoid, sigmoid_out2deriv)

    and a name may stand for the pair: ``Layer(16, 128, "tanh")``.

    Parameters
    ----------
    input_dim, output_dim : int
        Widths of the input (batch, input_dim) and the output (batch, output_dim).
    nonlin, nonlin_deriv : str, or a pair of functions
        A name from :data:`sgrad.nn.nonlinearities.NONLINEARITIES`, or a function
        and the function that maps its *output* to its derivative.
    bias : bool
        Whether the layer has a bias (default True; the blog's layers have none).
    init : str or ndarray
        Weight initialisation: 'xavier' (default), 'he', 'pytorch', 'blog', 'zeros', or an
        array of shape (input_dim, output_dim).
    bias_init : str
        'zeros' (default) or 'pytorch': U(-1/√input_dim, 1/√input_dim), PyTorch's default.
    parts : tuple of int, or None
        The widths of the parts that lie side by side in the input (summing to input_dim), e.g.
        ``(256, 10)`` for ``[h, c]``.  Each part's rows of the weights are drawn with its own fan-in, and
        the bias is the sum of one bias per part, each drawn with its part's fan-in: the start of one
        ``nn.Linear`` per part with their outputs added, as PyTorch code often takes a condition c.
        None (default): one part, ``(input_dim,)``.
    update_rule : str or UpdateRule
        'sgd' (default, the blog's), 'momentum', 'adam', or an
        :class:`~sgrad.nn.optimizers.UpdateRule` instance.
    seed, rng : int or numpy.random.Generator
        Where the initial weights come from.  Same seed, same weights.
    dtype : numpy dtype
        Floating type of the parameters (default float64).

    Attributes
    ----------
    weights : (input_dim, output_dim) array
    bias : (output_dim,) array, or None
    input : (batch, input_dim), the last forward pass's input
    output : (batch, output_dim), the last forward pass's output h
    weight_output_delta : (batch, output_dim), dL/dz from the last backward, z the pre-activation
    weights_grad : dL/dweights from the last backward
    bias_grad : dL/dbias from the last backward
    """

    backward_needs = ("input", "output")

    def __init__(self, input_dim: int, output_dim: int, nonlin: str | Callable[[np.ndarray], np.ndarray],
                 nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None = None, *, bias: bool = True,
                 init: str | np.ndarray = "xavier", bias_init: str = "zeros", parts: Sequence[int] | None = None,
                 update_rule: str | UpdateRule | None = None, seed: argument_checks.Seed = None,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64) -> None:
        self.input_dim = argument_checks.check_integer(input_dim, "input_dim")
        self.output_dim = argument_checks.check_integer(output_dim, "output_dim")
        self.nonlin, self.nonlin_deriv = resolve_nonlinearity(nonlin, nonlin_deriv)
        self.dtype = argument_checks.check_float_dtype(dtype)
        rng = argument_checks.make_rng(seed, rng)
        parts = _check_parts(parts, self.input_dim)
        if isinstance(init, np.ndarray) and len(parts) > 1:
            raise ValueError(f"parts draw each part's rows of the weights, but init is an array that gives them all; "
                             f"got parts={parts}. Leave parts out, or give init as a name such as 'pytorch'")
        bias_init = argument_checks.check_choice(bias_init, "bias_init", BIAS_INITIALIZERS)
        bias = argument_checks.check_bool(bias, "bias")
        # Each part's rows in turn, then each part's bias: one part (the default) draws as a single nn.Linear.
        self.weights = np.concatenate([initialize(init, (width, self.output_dim), rng, self.dtype) for width in parts])
        self.bias = (np.sum([initial_bias(bias_init, self.output_dim, width, rng, self.dtype) for width in parts],
                            axis=0, dtype=self.dtype) if bias else None)
        self._start_learning(update_rule)
        self.input: np.ndarray | None = None
        self.output: np.ndarray | None = None
        self.weight_output_delta: np.ndarray | None = None

    def forward(self, input: np.ndarray) -> np.ndarray:
        """Compute and remember ``h = nonlin(input @ weights + bias)``.

        input: (batch, input_dim) float array.  Returns output h: (batch, output_dim).
        The layer keeps a reference to ``input`` (as the blog's does), so do not
        change it in place before ``backward``.
        """
        argument_checks.check_batch(input, "input", self.input_dim, width_name="this layer's input_dim")
        self.weights_grad = self.bias_grad = None
        self._stale = False
        self.input = input
        self.output = kernels.dense_forward(input, self.weights, self.bias, self.nonlin)
        return self.output

    def predict(self, input: np.ndarray) -> np.ndarray:
        """The output for ``input`` with no side effects: nothing is remembered for ``backward``."""
        argument_checks.check_batch(input, "input", self.input_dim, width_name="this layer's input_dim")
        return kernels.dense_forward(input, self.weights, self.bias, self.nonlin)

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate ``output_delta = dL/dh`` (batch, output_dim) through the last forward.

        Stores ``weight_output_delta`` (dL/dz) and the parameter gradients, and
        returns the input delta dL/d(input): (batch, input_dim).  Nothing is
        averaged here: the loss that produced ``output_delta`` sets the scale.
        ``input_delta=False`` skips the input delta (a third of the layer's matrix
        work) and returns None: for a layer whose input is data.
        """
        input, output = self.forward_cache("backward()", "forward(input)")
        argument_checks.check_same_shape(output_delta, "output_delta", output, "this layer's last output")
        delta, self.weights_grad, self.bias_grad, self.weight_output_delta = kernels.dense_backward(
            output_delta, input, output, self.weights, self.nonlin_deriv, self.bias is not None,
            input_delta)
        return delta

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.input_dim}, {self.output_dim}, "
                f"nonlin={self.nonlin.__name__}, bias={self.bias is not None})")


def _check_parts(parts: Sequence[int] | None, input_dim: int) -> tuple[int, ...]:
    """``parts`` as a tuple of widths >= 1 that sum to ``input_dim``; None: ``(input_dim,)``."""
    if parts is None:
        return (input_dim,)
    widths = argument_checks.check_widths(parts, "parts")
    if not widths or sum(widths) != input_dim:
        raise ValueError(f"parts must be the widths of the input's parts, summing to input_dim = {input_dim}, such as "
                         f"({input_dim},); got {parts!r}")
    return widths
