"""Blocks of layers: an elementwise nonlinearity, a chain of modules, and the paper's Linear→BatchNorm→ReLU.

Every module here follows the :class:`~sgrad.Layer` convention, so a block can
sit wherever a layer can, including under one DNI (:class:`sgrad.DNIBlock`):

- ``forward(x)`` remembers what ``backward`` needs; ``predict(x)`` has no side effects;
- ``backward(output_delta)`` stores the ``gradients`` and returns the input delta;
  ``backward(output_delta, input_delta=False)`` returns None instead, for a module whose input is data;
- ``update(alpha)`` takes one descent step; ``parameters`` and ``gradients`` are dicts.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from .batchnorm import BatchNorm
from .layers import Layer
from .module import Module, NothingToLearn
from .nonlinearities import resolve_nonlinearity
from .optimizers import UpdateRule

MODULE_METHODS = ("forward", "backward", "predict", "update")


class Activation(NothingToLearn):
    """An elementwise nonlinearity as a module of its own (no parameters): ``h = f(x)`` on rows (batch, features).

    :class:`~sgrad.nn.conv.Activation2d` is the same on feature maps: it checks its input as maps.
    """

    backward_needs = ("output",)

    def __init__(self, nonlin: str | Callable[[np.ndarray], np.ndarray],
                 nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.nonlin, self.nonlin_deriv = resolve_nonlinearity(nonlin, nonlin_deriv)
        self.update_state = {}
        self.output: np.ndarray | None = None

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_batch(x, "input")

    def predict(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        return self.nonlin(x)

    def forward(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        self.output = self.nonlin(x)
        return self.output

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """``dL/dx = dL/dh * f'(x)``, with f' computed from the output h, as in the blog's pairs."""
        [output] = self.forward_cache()
        argument_checks.check_same_shape(output_delta, "output_delta", output, "the last output")
        return output_delta * self.nonlin_deriv(output) if input_delta else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.nonlin.__name__!r})"


class Sequential(Module):
    """Modules applied one after the other; backward runs them in reverse.

    ``parameters`` and ``gradients`` are keyed ``'<index>.<name>'``, e.g. ``'0.weights'``.
    """

    def __init__(self, modules: Iterable[Any]) -> None:
        self.modules = list(modules)
        if not self.modules:
            raise ValueError("Sequential needs at least one module")
        for index, module in enumerate(self.modules):
            check_module(module, f"module {index} of the Sequential")
        sized = [m for m in self.modules if hasattr(m, "input_dim")]
        if not sized:
            raise ValueError("Sequential needs at least one module with an input_dim, such as a Layer")
        for before, after in zip(sized[:-1], sized[1:]):
            if before.output_dim != after.input_dim:
                raise ValueError(f"{after!r} takes {after.input_dim} input features, but {before!r} before it "
                                 f"gives {before.output_dim}; make each module's input_dim the last one's output_dim")
        self.input_dim = sized[0].input_dim
        self.output_dim = sized[-1].output_dim
        self.update_state = {}
        self._stale = False  # set by update(): the last forward pass used the old parameters

    def children(self) -> dict[str, Any]:
        return {f"modules.{k}": module for k, module in enumerate(self.modules)}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return {f"{i}.{name}": p for i, m in enumerate(self.modules) for name, p in m.parameters.items()}

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        return {f"{i}.{name}": g for i, m in enumerate(self.modules) for name, g in m.gradients.items()}

    # Each module checks what it is given; what one module hands the next it made itself, from numbers checked on
    # the way in, so the modules after the first run within argument_checks.handed_on (no pass for NaN and inf).

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = self.modules[0].predict(x)
        with argument_checks.handed_on():
            for module in self.modules[1:]:
                x = module.predict(x)
        return x

    def forward(self, x: np.ndarray) -> np.ndarray:
        if isinstance(x, np.ndarray) and x.ndim >= 2 and len(x):  # else the first module's forward says what is wrong
            self.check_batch_size(x.shape[0])  # before any module remembers anything
        x = self.modules[0].forward(x)
        with argument_checks.handed_on():
            for module in self.modules[1:]:
                x = module.forward(x)
        self._stale = False
        return x

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate through the modules in reverse; ``input_delta=False``: the first returns None."""
        self.forward_cache("backward()", "forward(input)")  # its modules keep the caches: this refuses a stale step
        first, *rest = self.modules
        if not rest:
            return first.backward(output_delta, input_delta=input_delta)
        delta = rest[-1].backward(output_delta)
        with argument_checks.handed_on():
            for module in reversed(rest[:-1]):
                delta = module.backward(delta)
            return first.backward(delta, input_delta=input_delta)

    def update(self, alpha: float) -> None:
        argument_checks.check_learning_rate(alpha)
        for module in self.modules:
            if module.parameters:
                module.update(alpha)
        self.mark_stepped()

    def __repr__(self) -> str:
        return "Sequential([" + ", ".join(map(repr, self.modules)) + "])"


def check_module(module: Any, name: str, *, sized: bool = False) -> None:
    """Check that ``module`` follows the Layer convention: forward, backward, predict, update and parameters.

    ``sized=True`` also asks for ``input_dim`` and ``output_dim``, as a block under a DNI needs.
    """
    missing = [method for method in MODULE_METHODS if not callable(getattr(module, method, None))]
    attributes = ("parameters", "input_dim", "output_dim") if sized else ("parameters",)
    missing += [attribute for attribute in attributes if not hasattr(module, attribute)]
    if missing:
        kind = "a Layer or a Sequential block" if sized else "a module such as a Layer, BatchNorm or Activation"
        raise TypeError(f"{name} must be {kind} (with {', '.join(MODULE_METHODS + attributes)}); "
                        f"got {type(module).__name__}, which lacks {', '.join(missing)}")


def dense_block(input_dim: int, output_dim: int, nonlin: str | Callable[[np.ndarray], np.ndarray] = "relu", *,
                batchnorm: bool = True, init: str | np.ndarray = "he", bias_init: str = "zeros",
                parts: Sequence[int] | None = None, update_rule: str | UpdateRule | None = None,
                seed: argument_checks.Seed = None, rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64
                ) -> Sequential:
    """The paper's hidden block: Linear→BatchNorm→nonlinearity (or Linear→nonlinearity without batch norm).

    With batch norm the linear map has no bias: the norm's shift beta plays its part.  ``init``,
    ``bias_init`` and ``parts`` are the linear map's (:class:`~sgrad.Layer`).
    """
    batchnorm = argument_checks.check_bool(batchnorm, "batchnorm")
    rng = argument_checks.make_rng(seed, rng)
    linear = Layer(input_dim, output_dim, "identity", bias=not batchnorm, init=init, bias_init=bias_init, parts=parts,
                   update_rule=update_rule, rng=rng, dtype=dtype)
    modules: list[Any] = [linear]
    if batchnorm:
        modules.append(BatchNorm(output_dim, update_rule=update_rule, dtype=dtype))
    modules.append(Activation(nonlin))
    return Sequential(modules)
