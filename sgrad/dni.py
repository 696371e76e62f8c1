"""Decoupled Neural Interfaces: a module that updates itself from a synthetic gradient.

One decoupled step of a module k, in the paper's notation, is :func:`synthetic_step`:

1. ``h_k = f_k(h_{k-1})``                    forward
2. ``ĝ_k = M_k(h_k, c)``                     predict dL/dh_k
3. ``δ_{k-1} = ĝ_k ∂h_k/∂h_{k-1}``            backward, as if ĝ_k were dL/dh_k
4. ``θ_k ← θ_k - α ĝ_k ∂h_k/∂θ_k``           update at once, without waiting for the layers above
5. return ``δ_{k-1}``, computed with the parameters *before* step 4, as backprop would.

Later, when module k+1 has done the same, its returned delta δ_k is the
bootstrapped target for ``M_k``: ``update_synthetic_weights(δ_k)``.  Only the
top of a stack computes a true gradient from the loss.

:class:`DNI` is the blog's layer that does this; :class:`DNIBlock` does it for
any block (e.g. Linear→BatchNorm→ReLU).  Both call :func:`synthetic_step`.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from . import validation
from .blocks import check_module
from .generators import LinearGenerator
from .layers import Layer
from .module import Module
from .optimizers import UpdateRule


def synthetic_step(module: Any, generator: Any, x: np.ndarray, condition: np.ndarray | None, alpha: float, *,
                   input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """One decoupled update of ``module`` from its generator's ĝ; returns ``(δ, h, ĝ)``.

    x: (batch, input_dim), the module's input h_{k-1}, or (batch, channels, height,
    width) for a convolutional block.  condition: c, (batch, condition_dim) for a
    conditioned generator, else None.  δ is ĝ
    backpropagated through the module with its pre-update parameters
    (``input_delta=False`` skips it and returns None, for a module whose input
    is data).

    The input, the condition and the batch size are checked before anything
    changes.  ĝ can only be checked once the module's forward pass has made h,
    so ĝ of another shape or dtype than h, or holding NaN or inf, is refused
    after steps 1 and 2 but before the backward pass and the update; so is
    any error raised by either forward pass.  Module and generator are then
    put back as they were: every attribute of every module in their trees
    (:meth:`~sgrad.module.Module.submodules`) is bound again to what it held,
    which restores the caches (input, output, ĝ, flags), and the buffers that
    a forward pass changes in place (batch norm's running statistics) get
    their values back.  Parameters and update-rule states need nothing, as
    nothing has stepped yet.  Not restored: arrays that a user's own module or
    generator changes in place without listing them in ``buffers()``.
    """
    input_delta = validation.check_bool(input_delta, "input_delta")
    if isinstance(x, np.ndarray) and x.ndim in (2, 4):  # rows, or maps; else module.forward says what is wrong
        validation.check_condition(condition, generator.condition_dim, x.shape[0], "this DNI")
        for part in (module, generator):
            if isinstance(part, Module):
                part.check_batch_size(x.shape[0])
    before = _restore_point(module, generator)  # references and small buffer copies: a few µs
    try:
        h = module.forward(x)                                    # 1. h_k
        g_hat = generator.forward(h, condition)                  # 2. ĝ_k = M_k(h_k, c)
        validation.check_same_shape(g_hat, "the generator's synthetic gradient", h, "this layer's output",
                                    same_dtype=True)
    except BaseException:
        _restore(before)
        raise
    delta = module.backward(g_hat, input_delta=input_delta)     # 3. δ_{k-1}, and ĝ's gradients of θ_k
    module.update(alpha)                                         # 4. descend on ĝ_k at once
    return delta, h, g_hat


def _restore_point(*trees):
    """``[(module, its attributes, copies of its buffers)]`` for every module in ``trees``, each once."""
    point, seen = [], set()
    for tree in trees:
        for _, module in (tree.submodules() if isinstance(tree, Module) else [("", tree)]):
            if id(module) in seen or not hasattr(module, "__dict__"):
                continue
            seen.add(id(module))
            buffers = module.buffers() if isinstance(module, Module) else {}
            point.append((module, dict(vars(module)), {name: array.copy() for name, array in buffers.items()}))
    return point


def _restore(point):
    for module, attributes, buffers in point:
        vars(module).clear()
        vars(module).update(attributes)
        for name, array in buffers.items():
            getattr(module, name)[...] = array


def check_generator(generator: Any, output_dim: int, condition_dim: int) -> None:
    """Check that ``generator`` has the interface of :mod:`sgrad.generators` and fits a module of ``output_dim``."""
    missing = [name for name in ("forward", "update", "predict") if not callable(getattr(generator, name, None))]
    if missing:
        raise TypeError(f"generator must have methods forward, update and predict (see sgrad.generators); "
                        f"{type(generator).__name__} lacks {', '.join(missing)}")
    for name, expected in (("output_dim", output_dim), ("condition_dim", condition_dim)):
        got = getattr(generator, name, None)
        if got != expected:
            raise ValueError(f"generator.{name} must equal the layer's {name}, {expected}; got {got!r}")


def _no_prediction_yet() -> ValueError:
    return ValueError("update_synthetic_weights() needs a synthetic gradient to correct; "
                      "call forward_and_synthetic_update(input) first")


class DNI(Layer):
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
                 seed: validation.Seed = None, rng: np.random.Generator | None = None,
                 dtype: DTypeLike = np.float64) -> None:
        rng = validation.make_rng(seed, rng)
        super().__init__(input_dim, output_dim, nonlin, nonlin_deriv, bias=bias, init=init,
                         update_rule=update_rule, rng=rng, dtype=dtype)
        self.alpha = validation.check_learning_rate(alpha, "alpha")
        self.generator_alpha = (self.alpha if generator_alpha is None
                                else validation.check_learning_rate(generator_alpha, "generator_alpha"))
        self.condition_dim = validation.check_integer(condition_dim, "condition_dim", minimum=0)
        if generator is None:
            generator = LinearGenerator(
                self.output_dim, self.condition_dim, init=generator_init,
                update_rule=self.update_rule if generator_update_rule is None else generator_update_rule,
                rng=rng, dtype=dtype)
        else:
            check_generator(generator, self.output_dim, self.condition_dim)
        self.generator = generator
        self.synthetic_gradient: np.ndarray | None = None

    def children(self) -> dict[str, Any]:
        return {"generator": self.generator}

    def forward_and_synthetic_update(self, input: np.ndarray, condition: np.ndarray | None = None, *,
                                     input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """Forward, predict ĝ = M(h, c), descend on ĝ, and return ``(input_delta, output)``.

        input: (batch, input_dim).  condition: (batch, condition_dim) for a cDNI,
        else None.  ``input_delta`` is ĝ backpropagated through this layer with
        its pre-update weights: the bootstrapped target for the layer below.
        ``input_delta=False`` skips it (returns None) for a bottom layer, whose
        input is data and has no generator to train.
        """
        delta, output, self.synthetic_gradient = synthetic_step(self, self.generator, input, condition, self.alpha,
                                                                input_delta=input_delta)
        return delta, output

    def update_synthetic_weights(self, target_gradient: np.ndarray) -> float:
        """One descent step of the generator towards ``target_gradient``; returns its regression loss.

        target_gradient: (batch, output_dim), what the layer above returned (or
        the true gradient dL/dh, for the top DNI of a stack).
        """
        if self.synthetic_gradient is None:
            raise _no_prediction_yet()
        return self.generator.update(target_gradient, self.generator_alpha)

    def normal_update(self, true_gradient: np.ndarray) -> np.ndarray | None:
        """The blog's top-layer step: backprop ``true_gradient`` (dL/dh), descend, return the input delta.

        The returned delta uses the pre-update weights.
        """
        input_delta = self.backward(true_gradient)
        self.update(self.alpha)
        return input_delta

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, condition_dim={self.condition_dim})"


class DNIBlock(Module):
    """Any block (e.g. :func:`sgrad.blocks.dense_block`, Linear→BatchNorm→ReLU) decoupled by a generator.

    Works as :class:`DNI` does: ``forward_and_synthetic_update(input, condition)``
    runs the block, asks ``generator`` for ĝ = M(h, c), descends on it at once,
    and returns ``(input_delta, output)``; ``update_synthetic_weights(target)``
    trains the generator.  ``forward``, ``backward``, ``update`` and ``predict``
    are the block's own.  The generator's target checks its shape: a
    :class:`~sgrad.generators.SyntheticLossGenerator` takes a predicted loss of
    shape (batch, 1) instead of a gradient.
    """

    def __init__(self, block: Any, generator: Any, alpha: float = 0.1, *, generator_alpha: float | None = None) -> None:
        check_module(block, "block", sized=True)
        check_generator(generator, block.output_dim, getattr(generator, "condition_dim", 0))
        self.block = block
        self.generator = generator
        self.input_dim = block.input_dim
        self.output_dim = block.output_dim
        self.condition_dim = generator.condition_dim
        self.alpha = validation.check_learning_rate(alpha, "alpha")
        self.generator_alpha = (self.alpha if generator_alpha is None
                                else validation.check_learning_rate(generator_alpha, "generator_alpha"))
        self.update_state = {}
        self.synthetic_gradient: np.ndarray | None = None
        self.output: np.ndarray | None = None

    def children(self) -> dict[str, Any]:
        return {"block": self.block, "generator": self.generator}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return self.block.parameters

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        return self.block.gradients

    def forward(self, input: np.ndarray) -> np.ndarray:
        self.output = self.block.forward(input)
        return self.output

    def predict(self, input: np.ndarray) -> np.ndarray:
        return self.block.predict(input)

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        return self.block.backward(output_delta, input_delta=input_delta)

    def update(self, alpha: float) -> None:
        self.block.update(alpha)

    def forward_and_synthetic_update(self, input: np.ndarray, condition: np.ndarray | None = None, *,
                                     input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """As :meth:`DNI.forward_and_synthetic_update`: ``(input_delta, output)``."""
        delta, self.output, self.synthetic_gradient = synthetic_step(self.block, self.generator, input, condition,
                                                                     self.alpha, input_delta=input_delta)
        return delta, self.output

    def update_synthetic_weights(self, target: np.ndarray) -> float:
        """As :meth:`DNI.update_synthetic_weights`: one generator step towards ``target``; returns its loss."""
        if self.synthetic_gradient is None:
            raise _no_prediction_yet()
        return self.generator.update(target, self.generator_alpha)

    def __repr__(self) -> str:
        return f"DNIBlock({self.block!r}, generator={type(self.generator).__name__})"
