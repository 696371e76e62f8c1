"""Blocks of layers: an elementwise nonlinearity, a chain of modules, and the paper's Linear→BatchNorm→ReLU.

Every module here follows the :class:`~sgrad.Layer` convention, so a block can
sit wherever a layer can, including under one DNI (:class:`sgrad.DNIBlock`):

- ``forward(x)`` remembers what ``backward`` needs; ``predict(x)`` has no side effects;
- ``backward(output_delta)`` stores the ``gradients`` and returns the input delta;
  ``backward(output_delta, input_delta=False)`` returns None instead, for a module whose input is data;
- ``update(alpha)`` takes one descent step; ``parameters`` and ``gradients`` are dicts.
"""

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
from numpy.typing import DTypeLike

from data_gen._checks import Seed

from . import _validation, kernels
from .batchnorm import BatchNorm
from .layers import Layer
from .nonlinearities import relu, resolve_nonlinearity
from .optimizers import UpdateRule


class Activation:
    """An elementwise nonlinearity as a module of its own (no parameters)."""

    # No parameters, so nothing to learn: one empty dict, shared by every Activation and never filled.
    parameters: ClassVar[dict[str, np.ndarray]] = {}
    gradients: ClassVar[dict[str, np.ndarray]] = {}

    def __init__(self, nonlin: str | Callable[[np.ndarray], np.ndarray],
                 nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.nonlin, self.nonlin_deriv = resolve_nonlinearity(nonlin, nonlin_deriv)
        self.output = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        _validation.check_batch(x, "input")
        return self.nonlin(x)

    def forward(self, x: np.ndarray) -> np.ndarray:
        _validation.check_batch(x, "input")
        return self._forward(x)

    def _forward(self, x, overwrite=False):
        """``forward`` unchecked; ``overwrite``: x is a fresh array that nothing else holds, so ReLU may reuse it."""
        self.output = relu(x, out=x) if overwrite and self.nonlin is relu else self.nonlin(x)
        return self.output

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        if self.output is None:
            raise ValueError("backward() needs a forward pass first; call forward(x)")
        _validation.check_same_shape(output_delta, "output_delta", self.output, "the last output")
        return self._backward(output_delta, input_delta)

    def _backward(self, output_delta, input_delta=True):
        return kernels.times_derivative(output_delta, self.output, self.nonlin_deriv) if input_delta else None

    def update(self, alpha: float) -> None:
        """Nothing to learn."""

    def __repr__(self) -> str:
        return f"Activation({self.nonlin.__name__!r})"


class Sequential:
    """Modules applied one after the other; backward runs them in reverse.

    ``parameters`` and ``gradients`` are keyed ``'<index>.<name>'``, e.g. ``'0.weights'``.
    """

    def __init__(self, modules: Iterable[Any]) -> None:
        self.modules = list(modules)
        if not self.modules:
            raise ValueError("Sequential needs at least one module")
        for index, module in enumerate(self.modules):
            _validation.check_module(module, f"module {index} of the Sequential")
        sized = [m for m in self.modules if hasattr(m, "input_dim")]
        if not sized:
            raise ValueError("Sequential needs at least one module with an input_dim, such as a Layer")
        for before, after in zip(sized[:-1], sized[1:]):
            if before.output_dim != after.input_dim:
                raise ValueError(f"{after!r} takes {after.input_dim} input features, but {before!r} before it "
                                 f"gives {before.output_dim}; make each module's input_dim the last one's output_dim")
        self.input_dim = sized[0].input_dim
        self.output_dim = sized[-1].output_dim
        self._stale = False  # set by update(): the last forward pass used the old parameters

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return {f"{i}.{name}": p for i, m in enumerate(self.modules) for name, p in m.parameters.items()}

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        return {f"{i}.{name}": g for i, m in enumerate(self.modules) for name, g in m.gradients.items()}

    def train(self, mode: bool = True) -> "Sequential":
        for module in self.modules:
            if hasattr(module, "train"):
                module.train(mode)
        return self

    def eval(self) -> "Sequential":
        return self.train(False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        _validation.check_batch(x, "input", self.input_dim, width_name="this block's input_dim")
        for module in self.modules:
            x = module.predict(x)
        return x

    def forward(self, x: np.ndarray) -> np.ndarray:
        _validation.check_batch(x, "input", self.input_dim, width_name="this block's input_dim")
        _validation.check_batch_rows(self, x.shape[0])  # before any module remembers anything
        return self._forward(x)

    def _forward(self, x):
        self._stale = False
        # The input was checked once, above: sgrad's own modules skip their checks (``_forward``)
        # on what the module before them made; any other module gets its public forward.
        previous = None
        for module in self.modules:
            if isinstance(module, Activation) and isinstance(previous, BatchNorm):
                x = module._forward(x, overwrite=True)  # batch norm keeps no reference to its output
            else:
                x = getattr(module, "_forward", module.forward)(x)
            previous = module
        return x

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate through the modules in reverse; ``input_delta=False``: the first returns None.

        The top module checks ``output_delta`` (its public ``backward``); below it,
        sgrad's own modules take what the module above made unchecked (``_backward``).
        """
        if self._stale:
            raise ValueError("backward() after update(): the last forward pass used the old weights; "
                             "call forward(input) again first")
        return self._run_backward(output_delta, input_delta, checked=False)

    def _backward(self, output_delta, input_delta=True):
        """``backward`` for a caller whose ``output_delta`` sgrad made itself: no module checks it."""
        return self._run_backward(output_delta, input_delta, checked=True)

    def _run_backward(self, output_delta, input_delta, checked):
        for k, module in enumerate(reversed(self.modules)):
            wanted = input_delta or k < len(self.modules) - 1  # only the bottom module may skip its delta
            if (checked or k > 0) and hasattr(module, "_backward"):
                output_delta = module._backward(output_delta, wanted)
            elif wanted:
                output_delta = module.backward(output_delta)
            else:
                output_delta = module.backward(output_delta, input_delta=False)
        return output_delta

    def update(self, alpha: float) -> None:
        self._update(alpha, spend=False)

    def _update(self, alpha, spend):
        """``update``; ``spend`` is passed on to the modules that take it (see :meth:`sgrad.Layer.update`)."""
        _validation.check_learning_rate(alpha)
        for module in self.modules:
            if module.parameters:
                update_module(module, alpha, spend)
        self._stale = True

    def __repr__(self) -> str:
        return "Sequential([" + ", ".join(map(repr, self.modules)) + "])"


def update_module(module: Any, alpha: float, spend: bool) -> None:
    """``module.update(alpha)``; sgrad's own modules take ``spend``: the caller holds no other reference to
    the gradients, so an update rule may overwrite them (plain SGD then needs no temporary array)."""
    inner = getattr(module, "_update", None)
    if inner is None:
        module.update(alpha)
    else:
        inner(alpha, spend)


def dense_block(input_dim: int, output_dim: int, nonlin: str | Callable[[np.ndarray], np.ndarray] = "relu", *,
                batchnorm: bool = True, init: str | np.ndarray = "he", update_rule: str | UpdateRule | None = None,
                seed: Seed = None, rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64
                ) -> Sequential:
    """The paper's hidden block: Linear→BatchNorm→nonlinearity (or Linear→nonlinearity without batch norm).

    With batch norm the linear map has no bias: the norm's shift beta plays its part.
    """
    batchnorm = _validation.check_bool(batchnorm, "batchnorm")
    rng = _validation.make_rng(seed, rng)
    linear = Layer(input_dim, output_dim, "identity", bias=not batchnorm, init=init, update_rule=update_rule,
                   rng=rng, dtype=dtype)
    modules: list[Any] = [linear]
    if batchnorm:
        modules.append(BatchNorm(output_dim, update_rule=update_rule, dtype=dtype))
    modules.append(Activation(nonlin))
    return Sequential(modules)
