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
of batch norm, checkpoints, the benchmarks, and two operations on a whole tree:

- :func:`restored_on_error`: a step that fails puts back every module as it was, its attributes, buffers,
  parameters and update-rule states (the DNI step's guarantee: a refused or failed step changes nothing);
- :func:`running_averages_kept`: a forward pass that only rebuilds what backward needs leaves the running
  averages as they were.
"""

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import argument_checks
from .optimizers import get_update_rule


class Module:
    """Base of sgrad's modules: the tree, the mode, and the arrays a module owns."""

    training: bool = True
    # The attributes in which forward() keeps what backward() needs, each None until the first forward pass;
    # a subclass adds its own after its parent's, whose backward reads them by place.
    backward_needs: tuple[str, ...] = ()
    _stale: bool = False  # set by a module's update(): its last forward pass used the parameters from before the step
    # The update rule's state of each own parameter, by name (Adam's moments, for one): see sgrad.nn.optimizers.
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

    def forward_cache(self, method: str = "backward()", call: str = "forward(x)") -> tuple[Any, ...]:
        """What the last forward pass kept for ``method`` (a pass back through it): :attr:`backward_needs`'s values.

        Every backward pass's guard, written once: ``method`` is refused before any forward pass (one of
        :attr:`backward_needs` is still None), and once ``update()`` has moved the parameters that the last
        forward pass used.  ``call`` is the forward pass to run (again) first.
        """
        cache = []
        for name in self.backward_needs:  # a plain loop: this runs at every backward pass of every module
            value = getattr(self, name)
            if value is None:
                raise ValueError(f"{method} needs a forward pass first; call {call} first")
            cache.append(value)
        if self._stale:
            raise ValueError(f"{method} after update(): the last forward pass used the old weights; "
                             f"call {call} again first")
        return tuple(cache)

    def mark_stepped(self) -> None:
        """Note that the parameters have moved since the last forward pass: :meth:`forward_cache` refuses until the
        next one.  Every ``update`` ends with it."""
        self._stale = True

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``mode=True``) or evaluation mode on this module and everything inside it."""
        for _, module in self.submodules():
            module.training = bool(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode: batch norm uses its running statistics, so one example's output stands alone."""
        return self.train(False)


class NothingToLearn(Module):
    """For a module without parameters (a nonlinearity, pooling, a reshape): no gradients, and no step to take."""

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        return {}

    def update(self, alpha: float) -> None:
        """Nothing to learn."""


class OwnParameters(Module):
    """For a module that learns arrays of its own: a dense layer, a convolution, a recurrent layer.

    Each parameter ``name`` of :meth:`own_parameters` has its gradient ``name_grad`` (``weights_grad``,
    ``bias_grad``, ...): set by the module's ``backward``, None before it and once :meth:`update` has used it.
    The constructor calls ``_start_learning`` once the parameters exist; ``backward`` refuses to run once
    ``update`` has stepped (:meth:`Module.forward_cache`): the last forward pass used the weights from
    before it.
    """

    update_rule: Any
    update_state: dict[str, Any]
    _calls_before_update = "backward(output_delta) after forward(input)"  # what update() asks for when it has no gradients

    def _start_learning(self, update_rule: Any) -> None:
        """Take ``update_rule`` (a name or an UpdateRule) with its state for each parameter, and no gradients yet."""
        self.update_rule = get_update_rule(update_rule)
        self.update_state = {name: self.update_rule.init_state(p) for name, p in self.own_parameters().items()}
        for name in self.update_state:
            setattr(self, name + "_grad", None)
        self._stale = False

    @property
    def gradients(self) -> dict[str, Any]:
        """dL/d(parameter) from the last ``backward``, keyed as :attr:`parameters`."""
        return {name: getattr(self, name + "_grad") for name in self.own_parameters()}

    def update(self, alpha: float = 0.1) -> None:
        """One descent step with the gradients stored by the last ``backward``; ``alpha`` is the learning rate.

        Each forward/backward pair pays for one step: stale gradients are never applied twice.
        """
        params = self.own_parameters()
        gradients = [getattr(self, name + "_grad") for name in params]
        if any(gradient is None for gradient in gradients):
            raise ValueError(f"update() needs the gradients of the last forward pass; call {self._calls_before_update} "
                             "first")
        alpha = argument_checks.check_learning_rate(alpha)
        for (name, param), gradient in zip(params.items(), gradients):
            step_in_place(self.update_rule, param, gradient, self.update_state[name], alpha)
            setattr(self, name + "_grad", None)
        self.mark_stepped()


class WeightsAndBias(OwnParameters):
    """For a module that learns ``weights`` and an optional ``bias`` (None if disabled): a dense layer, a convolution."""

    weights: np.ndarray
    bias: np.ndarray | None
    weights_grad: np.ndarray | None = None
    bias_grad: np.ndarray | None = None

    def own_parameters(self) -> dict[str, np.ndarray]:
        """The trainable arrays by name: ``{'weights': W, 'bias': b}`` (no bias if disabled)."""
        params = {"weights": self.weights}
        if self.bias is not None:
            params["bias"] = self.bias
        return params


# --- operations on a whole tree -----------------------------------------------------------------------


# What the restored_on_error bodies running in this thread have stepped in place, in order: (array, its values
# before the step).  None outside any body; a body inside another shares the outer one's, from where it began.
_journal: contextvars.ContextVar[list[tuple[np.ndarray, np.ndarray]] | None] = contextvars.ContextVar(
    "sgrad_journal", default=None)


@contextlib.contextmanager
def restored_on_error(*trees: Any) -> Iterator[None]:
    """Run the body as one transaction: if it raises, put every module of ``trees`` back as it was, and re-raise.

    Every module of the trees (:meth:`Module.submodules`; a user's object with the module interface counts as
    one) gets each attribute bound again to what it held, which restores its caches (input, output, ĝ, flags),
    and each buffer (batch norm's running statistics, which a forward pass changes in place) its values.  Every
    array that an ``update`` of sgrad's modules stepped in place in the body (:func:`step_in_place`: the
    parameters and their update rule's state, Adam's moments and step count) gets its values back too, so an
    update that fails half-way, some parameters stepped and some not, leaves none stepped.  Those are copied
    when they are about to be stepped, so a body that steps nothing copies none.  Not restored: arrays
    changed in place by other code, such as a user's object's own update or a body that writes into a
    parameter itself.
    """
    snapshot = [(module, dict(vars(module)), _buffer_copies(module)) for module in _each_module(trees)]
    journal, token = _journal.get(), None
    if journal is None:  # the outermost body
        journal = []
        token = _journal.set(journal)
    start = len(journal)
    try:
        yield
    except BaseException:
        _put_back(journal[start:][::-1])  # the newest first, so that each array ends as it was before its first step
        del journal[start:]
        for module, attributes, buffers in snapshot:
            vars(module).clear()
            vars(module).update(attributes)
            _put_back(buffers)
        raise
    finally:
        if token is not None:
            _journal.reset(token)


def step_in_place(rule: Any, param: np.ndarray, gradient: np.ndarray, state: dict[str, Any], alpha: float) -> None:
    """``rule.step(param, gradient, state, alpha)``: one update-rule step of ``param`` and ``state``, in place.

    Inside :func:`restored_on_error` the arrays' values are kept first, so that a failure can put them back.
    """
    journal = _journal.get()
    if journal is not None:
        journal.append((param, param.copy()))
        for array in state.values():
            if isinstance(array, np.ndarray):
                journal.append((array, array.copy()))
    rule.step(param, gradient, state, alpha)


@contextlib.contextmanager
def running_averages_kept(*trees: Any) -> Iterator[None]:
    """Run the body (a forward pass that only rebuilds what backward needs), then put back every buffer of ``trees``.

    A batch run forward again this way counts once in batch norm's running averages.
    """
    buffers = [copy for module in _each_module(trees) for copy in _buffer_copies(module)]
    try:
        yield
    finally:
        _put_back(buffers)


def _each_module(trees: tuple[Any, ...]) -> Iterator[Any]:
    """Every module of ``trees``, once, parents first."""
    seen: set[int] = set()
    for tree in trees:
        for _, module in (tree.submodules() if isinstance(tree, Module) else [("", tree)]):
            if id(module) not in seen and hasattr(module, "__dict__"):
                seen.add(id(module))
                yield module


def _buffer_copies(module: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(buffer, a copy of it)]`` for each buffer of ``module`` alone (none for a user's object)."""
    return [(array, array.copy()) for array in module.buffers().values()] if isinstance(module, Module) else []


def _put_back(copies: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write each copy back into its array, in order."""
    for array, before in copies:
        array[...] = before
