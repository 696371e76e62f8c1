"""What every module has: one public path, an explicit tree of children, and training or evaluation mode.

A module (a :class:`~sgrad.Layer`, :class:`~sgrad.BatchNorm`, a
:class:`~sgrad.Sequential` block, a generator, a DNI block) is used as::

    h = module.forward(x)                # remembers what backward needs
    dx = module.backward(dh)             # stores the gradients, returns dL/dx
    module.update(alpha)                 # one descent step with those gradients
    h = module.predict(x)                # the output, with no side effects

Each public method checks its inputs once, then calls kernels that trust them.

A container lists its children in :meth:`Module.children`; :meth:`Module.submodules`
walks the tree.  That one walk serves ``train``/``eval``, the batch-size rule
of batch norm, checkpoints and the benchmarks.
"""

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import validation


class Module:
    """Base of sgrad's modules: the tree, the mode, and the arrays a module owns."""

    training: bool = True
    # The update rule's state of each own parameter, by name (Adam's moments, for one): see sgrad.optimizers.
    update_state: dict[str, dict[str, Any]]

    def children(self) -> dict[str, Any]:
        """The modules directly inside this one, by the name that reaches them (none for a leaf)."""
        return {}

    def submodules(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """``(path, module)`` for this module and every module inside it, parents first.

        The path names the way from this module down, e.g. ``'generator.net.modules.0'``;
        this module's own path is ``prefix`` (``''`` by default).
        """
        yield prefix, self
        for name, child in self.children().items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(child, Module):
                yield from child.submodules(path)
            else:  # a user's object with the module interface: a leaf of the tree
                yield path, child

    def own_parameters(self) -> dict[str, np.ndarray]:
        """The arrays this module itself learns, by name (not its children's)."""
        return {}

    def buffers(self) -> dict[str, np.ndarray]:
        """Arrays this module changes in training without learning them (batch norm's running statistics)."""
        return {}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable arrays by name.  A container gives its children's, named by their place."""
        return self.own_parameters()

    def min_batch(self) -> int:
        """The fewest rows a forward pass of this module alone can take (batch norm in training needs 2)."""
        return 1

    def check_batch_size(self, rows: int, name: str = "input") -> None:
        """Refuse a batch that some module inside cannot take, before any of them has changed."""
        needed = max(getattr(module, "min_batch", lambda: 1)() for _, module in self.submodules())
        if rows < needed:
            raise ValueError(
                f"{name} has {rows} row, but batch norm in training mode needs a batch of at least {needed} rows; "
                "use eval() for single examples (training mode normalises with the batch's own statistics)")

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``mode=True``) or evaluation mode on this module and everything inside it."""
        for _, module in self.submodules():
            module.training = bool(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode: batch norm uses its running statistics, so one example's output stands alone."""
        return self.train(False)


class WeightsAndBias:
    """For a module that learns ``weights`` and an optional ``bias`` (a dense layer, a convolution).

    The module sets ``weights``, ``bias`` (None if disabled), ``update_rule`` and ``update_state`` and, in
    ``backward``, ``weights_grad`` and ``bias_grad``; ``update`` sets ``_stale`` (the last forward pass used the old
    weights).
    """

    weights: np.ndarray
    bias: np.ndarray | None
    weights_grad: np.ndarray | None
    bias_grad: np.ndarray | None
    update_rule: Any
    update_state: dict[str, Any]
    _stale: bool

    def own_parameters(self) -> dict[str, np.ndarray]:
        """The trainable arrays by name: ``{'weights': W, 'bias': b}`` (no bias if disabled)."""
        params = {"weights": self.weights}
        if self.bias is not None:
            params["bias"] = self.bias
        return params

    @property
    def gradients(self) -> dict[str, Any]:
        """dL/d(parameter) from the last ``backward``, keyed as :attr:`parameters`."""
        grads = {"weights": self.weights_grad}
        if self.bias is not None:
            grads["bias"] = self.bias_grad
        return grads

    def update(self, alpha: float = 0.1) -> None:
        """One descent step with the gradients stored by the last ``backward``; ``alpha`` is the learning rate.

        Each forward/backward pair pays for one step: stale gradients are never applied twice.
        """
        if self.weights_grad is None:
            raise ValueError("update() needs the gradients of the last forward pass; "
                             "call backward(output_delta) after forward(input) first")
        alpha = validation.check_learning_rate(alpha)
        for name, param in self.own_parameters().items():
            self.update_rule.step(param, self.gradients[name], self.update_state[name], alpha)
        self.weights_grad = self.bias_grad = None
        self._stale = True
