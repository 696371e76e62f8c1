"""Decoupled Neural Interfaces: a module that updates itself from a synthetic gradient.

One decoupled step of a module k, in the paper's notation, is :func:`synthetic_step`, whose
first line is the forward pass and the rest :func:`update_module_from_synthetic_gradient`:

1. ``h_k = f_k(h_{k-1})``                    forward
2. ``ĝ_k = M_k(h_k, c)``                     predict dL/dh_k
3. ``δ_{k-1} = ĝ_k ∂h_k/∂h_{k-1}``            backward, as if ĝ_k were dL/dh_k
4. ``θ_k ← θ_k - α_k ĝ_k ∂h_k/∂θ_k``         update at once, at the module's own rate α_k, without waiting for the
                                            layers above
5. return ``δ_{k-1}``, computed with the parameters *before* step 4, as backprop would.

Later, when module k+1 has done the same, its returned delta δ_k is the
bootstrapped target for ``M_k``, which takes one step towards it at the generator's
own rate: :meth:`DecoupledModule.update_generator`.  Only the top of a stack computes
a true gradient from the loss.

Each act is named for what it changes: the module updates from ĝ
(:meth:`~DecoupledModule.forward_and_update`, or
:meth:`~DecoupledModule.update_from_synthetic_gradient` once ``forward`` has run), and
the generator updates towards its target (:meth:`~DecoupledModule.update_generator`).
The blog's :class:`DNI` keeps the blog's names for them too:
``forward_and_synthetic_update`` and ``update_synthetic_weights``.

The two halves serve every caller: a single process runs them back to back, and a
pipeline's worker (:mod:`sgrad.parallel.schedules`) runs its whole stage forward
first, to send h up sooner, then :meth:`DNIBlock.update_from_synthetic_gradient`
for each block.

:class:`DNI` is the blog's layer that does this; :class:`DNIBlock` does it for
any block (e.g. Linear→BatchNorm→ReLU).  Both call :func:`synthetic_step`.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from ..nn.blocks import check_module
from ..nn.layers import Layer
from ..nn.module import Module, restored_on_error, running_averages_kept
from ..nn.optimizers import UpdateRule
from .generators import LinearGenerator, check_generator_interface


def synthetic_step(module: Any, generator: Any, x: np.ndarray, condition: np.ndarray | None, alpha: float, *,
                   input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """One decoupled update of ``module`` from its generator's ĝ, lines 1 to 5; returns ``(δ, h, ĝ)``.

    x: (batch, input_dim), the module's input h_{k-1}, or (batch, channels, height, width) for a
    convolutional block.  condition: c, (batch, condition_dim) for a conditioned generator, else None.
    alpha: the module's learning rate (the generator does not step here).  Whatever is refused or
    raised before the update (bad input, a condition that does not fit, a ĝ that
    :func:`update_module_from_synthetic_gradient` refuses, an error of either forward pass) leaves
    module and generator as they were (:func:`~sgrad.nn.module.restored_on_error`).
    """
    with restored_on_error(module, generator):
        h = module.forward(x)                                    # 1. h_k = f_k(h_{k-1})
        delta, g_hat = update_module_from_synthetic_gradient(module, generator, h, condition, alpha,
                                                             input_delta=input_delta)  # 2. to 5.
    return delta, h, g_hat


def update_module_from_synthetic_gradient(module: Any, generator: Any, h: np.ndarray, condition: np.ndarray | None,
                                          module_alpha: float, *, input_delta: bool = True
                                          ) -> tuple[np.ndarray | None, np.ndarray]:
    """Lines 2 to 5 of the step, once ``h = module.forward(x)`` has run: the module steps along ĝ; ``(δ, ĝ)``.

    h: the module's output h_k, as its last forward pass made it.  module_alpha: the module's learning
    rate.  δ is ĝ backpropagated through the module with its pre-update parameters (``input_delta=False``
    skips it and returns None, for a module whose input is data).  ĝ of another shape or dtype than h,
    or holding NaN or inf, is refused before anything steps.  The generator only predicts here.
    """
    _check_step(generator, h, condition, input_delta)
    g_hat = generator.forward(h, condition)                      # 2. ĝ_k = M_k(h_k, c)
    argument_checks.check_same_shape(g_hat, "the generator's synthetic gradient", h, "this layer's output",
                                     same_dtype=True)  # refused before anything steps
    delta = module.backward(g_hat, input_delta=input_delta)      # 3. δ_{k-1}, and ĝ_k's gradients of θ_k
    module.update(module_alpha)                                  # 4. descend on ĝ_k at once
    return delta, g_hat                                          # 5. δ_{k-1} from the parameters before step 4


def _check_step(generator, h, condition, input_delta):
    argument_checks.check_bool(input_delta, "input_delta")
    argument_checks.check_condition(condition, generator.condition_dim, h.shape[0], "this DNI")


def check_generator(generator: Any, output_dim: int, condition_dim: int) -> None:
    """Check that ``generator`` has the interface of :mod:`sgrad.dni.generators` and fits a module of ``output_dim``."""
    check_generator_interface(generator)
    for name, expected in (("output_dim", output_dim), ("condition_dim", condition_dim)):
        got = getattr(generator, name, None)
        if got != expected:
            raise ValueError(f"generator.{name} must equal the layer's {name}, {expected}; got {got!r}")


class DecoupledModule(Module):
    """What :class:`DNI` and :class:`DNIBlock` add to a module: a generator, and the DNI step with it.

    The module's own ``forward``, ``backward`` and ``update`` are the step's lines 1, 3 and 4.
    ``generator`` is checked when it is attached (in the constructor, or by assigning another).
    Two rates, each used by one act: ``alpha``, the module's, when it updates from ĝ; ``generator_alpha``,
    the generator's, when it updates towards its target.
    """

    output_dim: int
    condition_dim: int
    alpha: float
    generator_alpha: float
    synthetic_gradient: np.ndarray | None

    def _decouple(self, generator: Any, alpha: float, generator_alpha: float | None) -> None:
        self.alpha = argument_checks.check_learning_rate(alpha, "alpha")
        self.generator_alpha = (self.alpha if generator_alpha is None
                                else argument_checks.check_learning_rate(generator_alpha, "generator_alpha"))
        self.generator = generator
        self.synthetic_gradient = None

    @property
    def generator(self) -> Any:
        """The synthetic-gradient model M (see :mod:`sgrad.dni.generators`), among the module's own attributes."""
        return vars(self)["generator"]

    @generator.setter
    def generator(self, generator: Any) -> None:
        check_generator(generator, self.output_dim, self.condition_dim)
        vars(self)["generator"] = generator

    def forward_and_update(self, input: np.ndarray, condition: np.ndarray | None = None, *,
                           input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """The module's step: forward, predict ĝ = M(h, c), descend on ĝ at ``alpha``; ``(input_delta, output)``.

        input: (batch, input_dim).  condition: (batch, condition_dim) for a cDNI,
        else None.  ``input_delta`` is ĝ backpropagated through this layer with
        its pre-update weights: the bootstrapped target for the layer below.
        ``input_delta=False`` skips it (returns None) for a bottom layer, whose
        input is data and has no generator to train.  A refused step changes nothing.
        """
        delta, output, self.synthetic_gradient = synthetic_step(self, self.generator, input, condition, self.alpha,
                                                                input_delta=input_delta)
        return delta, output

    def update_from_synthetic_gradient(self, h: np.ndarray, condition: np.ndarray | None = None, *,
                                       input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """The module's step after ``h = forward(input)`` has run: ĝ = M(h, c), δ, the update at ``alpha``; ``(δ, ĝ)``.

        ``forward`` then ``update_from_synthetic_gradient`` is :meth:`forward_and_update`, bit for bit; a
        pipeline's worker runs its stage forward first.  A refused ĝ changes nothing.
        """
        with restored_on_error(self):
            delta, self.synthetic_gradient = update_module_from_synthetic_gradient(
                self, self.generator, h, condition, self.alpha, input_delta=input_delta)
        return delta, self.synthetic_gradient

    def update_generator(self, target: np.ndarray, *, h: np.ndarray | None = None,
                         condition: np.ndarray | None = None) -> float:
        """One descent step of the generator towards ``target``, at ``generator_alpha``; returns its regression loss.

        target: (batch, output_dim), what the layer above returned (or the true gradient dL/dh,
        for the top DNI of a stack); a :class:`~sgrad.dni.generators.SyntheticLossGenerator` takes a
        predicted loss, (batch, 1).  The step corrects the generator's last prediction.  For a
        target that comes after the generator has predicted for later batches (in a pipeline),
        give that batch's ``h`` and ``condition``: the generator predicts for them once more
        (its running averages put back, so that the batch counts in them once), then steps.
        """
        if h is not None:
            with running_averages_kept(self.generator):
                self.generator.forward(h, condition)
        elif self.synthetic_gradient is None:
            raise ValueError("the generator's update needs a synthetic gradient to correct; call forward_and_update(input) "
                             "first (forward_and_synthetic_update(input), the blog's name, on a DNI)")
        return self.generator.update(target, self.generator_alpha)


class DNI(DecoupledModule, Layer):
    """A :class:`~sgrad.Layer` decoupled by a synthetic-gradient generator.

    The blog's call works as written: ``DNI(16, 128, sigmoid, sigmoid_out2deriv, alpha=0.1)``. It takes
    :class:`~sgrad.Layer`'s parameters and has its attributes, and these:

    Parameters
    ----------
    alpha : float
        Learning rate of the layer's own update (default 0.1, the blog's).
    condition_dim : int
        Width of the conditioning c given to the generator; > 0 makes a cDNI.
    generator : object, optional
        A generator with the interface in :mod:`sgrad.dni.generators`.  Default: a
        :class:`~sgrad.dni.generators.LinearGenerator` built with ``generator_init``.
    generator_alpha : float, optional
        Learning rate of the generator (default: ``alpha``, as in the blog).
    generator_init : str
        Initialisation of the default generator: 'zeros' (the paper's) or 'blog'.
    generator_update_rule : str or UpdateRule, optional
        Update rule of the default generator (default: the layer's).

    Attributes
    ----------
    synthetic_gradient : (batch, output_dim) array, ĝ from the last step
    generator : the synthetic-gradient model M
    """

    def __init__(self, input_dim: int, output_dim: int, nonlin: str | Callable[[np.ndarray], np.ndarray],
                 nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None = None, alpha: float = 0.1, *,
                 condition_dim: int = 0, generator: Any = None, generator_alpha: float | None = None,
                 generator_init: str = "zeros", generator_update_rule: str | UpdateRule | None = None,
                 bias: bool = True, init: str | np.ndarray = "xavier", update_rule: str | UpdateRule | None = None,
                 seed: argument_checks.Seed = None, rng: np.random.Generator | None = None,
                 dtype: DTypeLike = np.float64) -> None:
        rng = argument_checks.make_rng(seed, rng)
        super().__init__(input_dim, output_dim, nonlin, nonlin_deriv, bias=bias, init=init,
                         update_rule=update_rule, rng=rng, dtype=dtype)
        self.condition_dim = argument_checks.check_integer(condition_dim, "condition_dim", minimum=0)
        if generator is None:
            generator = LinearGenerator(
                self.output_dim, self.condition_dim, init=generator_init,
                update_rule=self.update_rule if generator_update_rule is None else generator_update_rule,
                rng=rng, dtype=dtype)
        self._decouple(generator, alpha, generator_alpha)

    def children(self) -> dict[str, Any]:
        return {"generator": self.generator}

    def forward_and_synthetic_update(self, input: np.ndarray, condition: np.ndarray | None = None, *,
                                     input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """The blog's name for :meth:`~DecoupledModule.forward_and_update`: the layer's step on ĝ."""
        return self.forward_and_update(input, condition, input_delta=input_delta)

    def update_synthetic_weights(self, target: np.ndarray, *, h: np.ndarray | None = None,
                                 condition: np.ndarray | None = None) -> float:
        """The blog's name for :meth:`~DecoupledModule.update_generator`: the generator's step towards ``target``."""
        return self.update_generator(target, h=h, condition=condition)

    def update_from_true_gradient(self, true_gradient: np.ndarray) -> np.ndarray | None:
        """The blog's top-layer step (its ``normal_update``): backprop ``true_gradient`` (dL/dh), descend at ``alpha``,
        return the input delta.

        The returned delta uses the pre-update weights.
        """
        input_delta = self.backward(true_gradient)
        self.update(self.alpha)
        return input_delta

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, condition_dim={self.condition_dim})"


class DNIBlock(DecoupledModule):
    """Any block (e.g. :func:`sgrad.nn.blocks.dense_block`, Linear→BatchNorm→ReLU) decoupled by a generator.

    Works as :class:`DNI` does: ``forward_and_update(input, condition)``
    runs the block, asks ``generator`` for ĝ = M(h, c), descends on it at once,
    and returns ``(input_delta, output)``; ``update_generator(target)``
    trains the generator.  ``forward``, ``backward``, ``update`` and ``predict``
    are the block's own.  The generator's target checks its shape: a
    :class:`~sgrad.dni.generators.SyntheticLossGenerator` takes a predicted loss of
    shape (batch, 1) instead of a gradient.
    """

    def __init__(self, block: Any, generator: Any, alpha: float = 0.1, *, generator_alpha: float | None = None) -> None:
        check_module(block, "block", sized=True)
        self.block = block
        self.input_dim = block.input_dim
        self.output_dim = block.output_dim
        self.condition_dim = getattr(generator, "condition_dim", 0)
        self.update_state = {}
        self.output: np.ndarray | None = None
        self._decouple(generator, alpha, generator_alpha)

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

    def __repr__(self) -> str:
        return f"DNIBlock({self.block!r}, generator={type(self.generator).__name__})"
