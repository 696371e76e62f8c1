"""What every experiment's settings share, and the checks made before any work starts.

Every experiment checks its whole grid before its first cell trains: the settings every config
has (:func:`check_settings`), the methods (:func:`check_methods`), the data (:func:`check_split`,
:func:`check_batch_fits`) and the memory a network would need (:func:`check_network_size`).
The results folder is checked in :mod:`sgrad.training.results_folder`.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..argument_checks import check_batch, check_choice, check_fits_dtype, check_integer, check_learning_rate
from ..nn.optimizers import UPDATE_RULES, get_update_rule

DTYPES = ("float32", "float64")
# The methods whose hidden layers learn from generators rather than from the true gradient.
DECOUPLED = ("dni", "cdni", "synthetic-loss", "complete", "ccomplete")
# What a generator regresses onto: bootstrapped targets (the method) or the true gradient (a teaching option).
TARGETS = ("bootstrap", "true")
# The most memory that a network's parameters, their gradients and its update rule's state may take: far more
# than any network the experiments train needs, and little enough to leave room for MNIST on a laptop.  A network
# that size would take days per pass over MNIST on one core.
MAX_NETWORK_BYTES = 2 * 2**30


def check_settings(config: Any, own: dict[str, Any]) -> None:
    """Check the settings every experiment's config has, and store them with its ``own`` checked ones on ``config``.

    Every experiment has batch_size, update_rule, alpha, generator_alpha, dtype
    and seed.  ``config`` is a frozen dataclass; it gets plain Python ints,
    floats and tuples, because it goes into JSON (checkpoints, results).
    """
    shared = {
        "batch_size": check_integer(config.batch_size, "batch_size"),
        "update_rule": check_choice(config.update_rule, "update rule", UPDATE_RULES),
        "alpha": check_learning_rate(config.alpha, "alpha"),
        "generator_alpha": (None if config.generator_alpha is None
                            else check_learning_rate(config.generator_alpha, "generator_alpha")),
        "dtype": check_choice(config.dtype, "dtype", DTYPES),
        "seed": check_integer(config.seed, "seed", minimum=0),
    }
    for field, value in {**own, **shared}.items():
        object.__setattr__(config, field, value)


def learning_rates(config: Any, generators: bool) -> dict[str, float]:
    """The learning rates a divergence names: ``{'alpha': ...}``, and ``generator_alpha`` if the run has ``generators``
    that learn at a rate of their own."""
    rates = {"alpha": config.alpha}
    if generators and config.generator_alpha is not None:
        rates["generator_alpha"] = config.generator_alpha
    return rates


def check_methods(methods: str | Sequence[str], known: Sequence[str]) -> list[str]:
    """``methods`` as a list: one name, or a non-empty sequence of names, each one of ``known``."""
    methods = [methods] if isinstance(methods, str) else list(methods)
    if not methods or any(method not in known for method in methods):
        raise ValueError(f"methods must be a non-empty list drawn from {', '.join(known)}; got {methods!r}")
    return methods


def check_split(data: Sequence[np.ndarray], batch_size: int, dtype: str,
                check_targets: Callable[[Any, Any], None]) -> None:
    """Check ``data = (x_train, y_train, x_test, y_test)`` before training on it in ``dtype``.

    x arrays: finite floats (n, features), as many features in both, each
    value within ``dtype``'s range; ``check_targets(y_train, y_test)`` checks
    the experiment's own targets; every y has a row per row of its x; the
    training set holds at least ``batch_size`` examples.
    """
    if not isinstance(data, (tuple, list)) or len(data) != 4:
        raise TypeError(f"data must be a tuple (x_train, y_train, x_test, y_test); got {type(data).__name__}"
                        + (f" of {len(data)} items" if isinstance(data, (tuple, list)) else ""))
    x_train, y_train, x_test, y_test = data
    check_batch(x_train, "x_train")
    check_batch(x_test, "x_test", x_train.shape[1], width_name="the width of x_train")
    check_targets(y_train, y_test)
    for x_name, x, y_name, y in (("x_train", x_train, "y_train", y_train), ("x_test", x_test, "y_test", y_test)):
        if len(x) != len(y):
            raise ValueError(f"{x_name} and {y_name} must have as many rows; got {len(x)} and {len(y)}")
        check_fits_dtype(x, x_name, dtype)
    check_batch_fits(batch_size, len(x_train))


def check_batch_fits(batch_size: int, examples: int) -> None:
    """Refuse a ``batch_size`` larger than the training set's ``examples``: no full batch could be drawn."""
    if examples < batch_size:
        raise ValueError(f"batch_size ({batch_size}) is larger than the training set ({examples} examples); "
                         "use a smaller batch_size or more training examples")


def check_network_size(parameters: int, dtype: str, update_rule: str, what: str) -> None:
    """Refuse, before it is built, a network whose arrays would take more than :data:`MAX_NETWORK_BYTES`.

    parameters : how many numbers the network learns.  Each takes ``dtype``'s
    bytes, once as a parameter, once as a gradient and once per array of the
    update rule's state (two for Adam).  ``what`` names the network in the message.
    """
    state = get_update_rule(update_rule).init_state(np.zeros(1))
    arrays = 2 + sum(np.shape(value) == (1,) for value in state.values())
    needed = parameters * arrays * np.dtype(dtype).itemsize
    if needed > MAX_NETWORK_BYTES:
        raise ValueError(f"{what} would need {needed:,} bytes ({needed / 2**30:,.1f} GiB) for its {parameters:,} "
                         f"parameters, their gradients and {update_rule}'s state, more than the "
                         f"{MAX_NETWORK_BYTES / 2**30:g} GiB that sgrad allows "
                         "(sgrad.training.settings.MAX_NETWORK_BYTES); use smaller widths")
