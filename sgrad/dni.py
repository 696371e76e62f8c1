"""The blog's ``DNI``: a layer that updates itself from a synthetic gradient.

One training step of a DNI layer k, in the paper's notation:

1. ``h_k = f(h_{k-1} W_k + b_k)``                         (forward)
2. ``ĝ_k = M_k(h_k, c)``                                  (predict dL/dh_k)
3. ``δ = ĝ_k * f'(h_k)``; ``W_k -= alpha * h_{k-1}^T δ``  (descend on ĝ_k at once)
4. return ``δ W_k^T`` with the weights *before* step 3, as backprop would.

Later, when layer k+1 has done the same, its returned delta is the
bootstrapped target for ``M_k``: ``update_synthetic_weights(target)``.  Only
the top of a stack computes a true gradient from the loss.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from data_gen._checks import Seed

from . import _validation
from .blocks import update_module
from .generators import Generator, LinearGenerator
from .layers import Layer
from .optimizers import UpdateRule


class _Decoupled:
    """The two DNI steps, shared by :class:`DNI` (a blog-style layer) and :class:`DNIBlock` (any block).

    Needs ``generator``, ``alpha``, ``generator_alpha``, ``condition_dim``,
    ``input_dim``, ``update(alpha)`` (or ``_update(alpha, spend)``), and ``_module_forward`` / ``_module_backward``.
    """

    def forward_and_synthetic_update(self: Any, input: np.ndarray, condition: np.ndarray | None = None, *,
                                     input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """Forward, predict ĝ = M(h, c), descend on ĝ, and return ``(input_delta, output)``.

        input: (batch, input_dim).  condition: (batch, condition_dim) for a cDNI,
        else None.  ``input_delta`` is ĝ backpropagated through this layer with
        its pre-update weights: the bootstrapped target for the layer below.
        ``input_delta=False`` skips it (returns None) for a bottom layer, whose
        input is data and has no generator to train.
        """
        _validation.check_batch(input, "input", self.input_dim, width_name="this layer's input_dim")
        return self._forward_and_synthetic_update(input, condition, input_delta)

    def _forward_and_synthetic_update(self: Any, input, condition, input_delta):
        """``forward_and_synthetic_update`` for an input that sgrad made: everything but the input is checked."""
        # The condition is checked before anything runs, so a bad one changes nothing.
        _validation.check_condition(condition, self.condition_dim, input.shape[0], "this DNI")
        _validation.check_batch_rows(self, input.shape[0])
        output = self._module_forward(input)
        if getattr(self.generator.forward, "__func__", None) is Generator.forward:
            # sgrad's own generator: h is this layer's output and c was checked above, so skip its checks.
            g_hat = self.generator._forward(output, condition)
        else:
            g_hat = self.generator.forward(output, condition)
        self.synthetic_gradient = g_hat
        if not isinstance(g_hat, np.ndarray) or g_hat.shape != output.shape or g_hat.dtype.kind != "f":
            # Any generator's prediction must fit before a layer descends on it; this raises and says why.
            _validation.check_same_shape(g_hat, "the generator's synthetic gradient", output, "this layer's output")
        delta = self._module_backward(self.synthetic_gradient, input_delta)
        update_module(self, self.alpha, spend=True)  # the gradients of ĝ were made just above, for this step
        return delta, output

    def update_synthetic_weights(self: Any, target_gradient: np.ndarray) -> float:
        """One descent step of the generator towards ``target_gradient``; returns its regression loss.

        target_gradient: (batch, output_dim), what the layer above returned (or
        the true gradient dL/dh, for the top DNI of a stack).  The generator
        checks its shape: a :class:`~sgrad.generators.SyntheticLossGenerator`
        takes a predicted loss of shape (batch, 1) instead.
        """
        if self.synthetic_gradient is None:
            raise ValueError(
                "update_synthetic_weights() needs a synthetic gradient to correct; "
                "call forward_and_synthetic_update(input) first"
            )
        return self.generator.update(target_gradient, self.generator_alpha)

    def _update_synthetic_weights(self: Any, target_gradient):
        """``update_synthetic_weights`` inside a training step, for a target that sgrad made: an sgrad
        generator does not re-check it, and spends its gradients (``generator.gradients`` is left empty)."""
        if self.synthetic_gradient is not None and \
                getattr(self.generator.update, "__func__", None) is Generator.update:
            return self.generator._update(target_gradient, self.generator_alpha, spend=True)
        return self.update_synthetic_weights(target_gradient)


class DNI(Layer, _Decoupled):
    """A :class:`~sgrad.Layer` decoupled by a synthetic-gradient generator.

    The blog's call works as written: ``DNI(16, 128, sigmoid, sigmoid_out2deriv, alpha=0.1)``.

    Parameters beyond :class:`~sgrad.Layer`'s
    -----------------------------------------
    alpha : float
        Learning rate of the layer's own update (default 0.1, the blog's).
    condition_dim : int
        Width of the conditioning c given to the generator; > 0 makes a cDNI.
    generator : object, optional
        A generator with the interface in :mod:`sgrad.generators`.  Default: a
        :class:`~sgrad.generators.LinearGenerator` built with ``generator_init``.
    generator_alpha : float, optional
        Learning rate of the generator (default: ``alpha``, as in the blog).
    generator_init : str
        Initialisation of the default generator: 'zeros' (the paper's) or 'blog'.
    generator_update_rule : str or UpdateRule, optional
        Update rule of the default generator (default: the layer's).

    Attributes (beyond :class:`~sgrad.Layer`'s)
    -------------------------------------------
    synthetic_gradient : (batch, output_dim) array, ĝ from the last step
    generator : the synthetic-gradient model M
    """

    def __init__(self, input_dim: int, output_dim: int, nonlin: str | Callable[[np.ndarray], np.ndarray],
                 nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None = None, alpha: float = 0.1, *,
                 condition_dim: int = 0, generator: Any = None, generator_alpha: float | None = None,
                 generator_init: str = "zeros", generator_update_rule: str | UpdateRule | None = None,
                 bias: bool = True, init: str | np.ndarray = "xavier", update_rule: str | UpdateRule | None = None,
                 seed: Seed = None, rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64) -> None:
        rng = _validation.make_rng(seed, rng)
        super().__init__(input_dim, output_dim, nonlin, nonlin_deriv, bias=bias, init=init,
                         update_rule=update_rule, rng=rng, dtype=dtype)
        self.alpha = _validation.check_learning_rate(alpha, "alpha")
        self.generator_alpha = (self.alpha if generator_alpha is None
                                else _validation.check_learning_rate(generator_alpha, "generator_alpha"))
        self.condition_dim = _validation.check_positive_int(condition_dim, "condition_dim", minimum=0)
        if generator is None:
            generator = LinearGenerator(
                self.output_dim, self.condition_dim, init=generator_init,
                update_rule=self.update_rule if generator_update_rule is None else generator_update_rule,
                rng=rng, dtype=dtype)
        else:
            _check_generator(generator, self.output_dim, self.condition_dim)
        self.generator = generator
        self.synthetic_gradient = None

    def normal_update(self, true_gradient: np.ndarray) -> np.ndarray | None:
        """The blog's top-layer step: backprop ``true_gradient`` (dL/dh), descend, return the input delta.

        The returned delta uses the pre-update weights.
        """
        input_delta = self.backward(true_gradient)
        self.update(self.alpha)
        return input_delta

    def _module_forward(self, input):
        return self._forward(input)

    def _module_backward(self, output_delta, input_delta=True):
        return self._backward(output_delta, input_delta)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, condition_dim={self.condition_dim})"


class DNIBlock(_Decoupled):
    """Any block (e.g. :func:`sgrad.blocks.dense_block`, Linear→BatchNorm→ReLU) decoupled by a generator.

    Works as :class:`DNI` does: ``forward_and_synthetic_update(input, condition)``
    runs the block, asks ``generator`` for ĝ = M(h, c), descends on it at once,
    and returns ``(input_delta, output)``; ``update_synthetic_weights(target)``
    trains the generator.  ``forward`` and ``predict`` only run the block.
    """

    def __init__(self, block: Any, generator: Any, alpha: float = 0.1, *, generator_alpha: float | None = None) -> None:
        _validation.check_module(block, "block", sized=True)
        _check_generator(generator, block.output_dim, getattr(generator, "condition_dim", 0))
        self.block = block
        self.generator = generator
        self.input_dim = block.input_dim
        self.output_dim = block.output_dim
        self.condition_dim = generator.condition_dim
        self.alpha = _validation.check_learning_rate(alpha, "alpha")
        self.generator_alpha = (self.alpha if generator_alpha is None
                                else _validation.check_learning_rate(generator_alpha, "generator_alpha"))
        self.synthetic_gradient = None
        self.output: np.ndarray | None = None

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return self.block.parameters

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        return self.block.gradients

    def train(self, mode: bool = True) -> "DNIBlock":
        for part in (self.block, self.generator):
            if hasattr(part, "train"):
                part.train(mode)
        return self

    def eval(self) -> "DNIBlock":
        return self.train(False)

    def forward(self, input: np.ndarray) -> np.ndarray:
        self.output = self.block.forward(input)
        return self.output

    def predict(self, input: np.ndarray) -> np.ndarray:
        return self.block.predict(input)

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        return self.block.backward(output_delta, input_delta=input_delta)

    def update(self, alpha: float) -> None:
        self.block.update(alpha)

    def _update(self, alpha, spend):
        update_module(self.block, alpha, spend)

    def _module_forward(self, input):
        # forward_and_synthetic_update has checked the input: run the block without checking it again.
        self.output = getattr(self.block, "_forward", self.block.forward)(input)
        return self.output

    def _module_backward(self, output_delta, input_delta=True):
        # forward_and_synthetic_update has checked ĝ, or made it with one of sgrad's generators.
        return _validation.backward_made_here(self.block, output_delta, input_delta)

    def __repr__(self) -> str:
        return f"DNIBlock({self.block!r}, generator={type(self.generator).__name__})"


def _check_generator(generator, output_dim, condition_dim):
    missing = [name for name in ("forward", "update", "predict") if not callable(getattr(generator, name, None))]
    if missing:
        raise TypeError(
            f"generator must have methods forward, update and predict (see sgrad.generators); "
            f"{type(generator).__name__} lacks {', '.join(missing)}"
        )
    for name, expected in (("output_dim", output_dim), ("condition_dim", condition_dim)):
        got = getattr(generator, name, None)
        if got != expected:
            raise ValueError(f"generator.{name} must equal the layer's {name}, {expected}; got {got!r}")
