"""Weight initialisations.  Each draws from the ``rng`` it is given, never from global state."""

import numpy as np
from numpy.typing import DTypeLike

# The shape of a weight matrix, (fan_in, fan_out).
Shape = tuple[int, int]


def xavier(shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """Glorot/Xavier uniform: U(-a, a) with ``a = sqrt(6 / (fan_in + fan_out))``; suits tanh and sigmoid."""
    limit = np.sqrt(6.0 / (shape[0] + shape[1]))
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


def he(shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """He/Kaiming normal: N(0, 2 / fan_in); suits ReLU."""
    return (rng.standard_normal(shape) * np.sqrt(2.0 / shape[0])).astype(dtype)


def pytorch(shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """U(-a, a) with ``a = 1 / sqrt(fan_in)``: PyTorch's default for ``nn.Linear`` (its Kaiming uniform with a = √5).

    Its standard deviation, ``1 / sqrt(3 fan_in)``, is 2.45 times smaller than :func:`he`'s.
    """
    limit = 1.0 / np.sqrt(shape[0])
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


def blog(shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """The blog post's ``randn * 0.2 - 0.1``: small, and shifted towards negative weights."""
    return (rng.standard_normal(shape) * 0.2 - 0.1).astype(dtype)


def zeros(shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """All zeros: the paper's choice for a synthetic-gradient generator's output layer."""
    return np.zeros(shape, dtype=dtype)


INITIALIZERS = {"xavier": xavier, "he": he, "pytorch": pytorch, "blog": blog, "zeros": zeros}
BIAS_INITIALIZERS = ("zeros", "pytorch")


def initial_bias(init: str, size: int, fan_in: int, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """A new bias of ``size`` entries: 'zeros', or 'pytorch', U(-1/√fan_in, 1/√fan_in), PyTorch's default for the
    bias of ``nn.Linear`` and ``nn.Conv2d`` (fan_in: the inputs each output sums over)."""
    if init == "zeros":
        return np.zeros(size, dtype=dtype)
    limit = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-limit, limit, size=size).astype(dtype)


def initialize(init: str | np.ndarray, shape: Shape, rng: np.random.Generator, dtype: DTypeLike) -> np.ndarray:
    """Return a new array of ``shape`` from an initializer name, or a copy of a given array."""
    if isinstance(init, np.ndarray):
        if init.shape != tuple(shape):
            raise ValueError(f"an initial weight array must have shape {tuple(shape)}; got {init.shape}")
        if not np.isfinite(init).all():
            raise ValueError("the initial weight array holds NaN or inf")
        return init.astype(dtype, copy=True)
    if isinstance(init, str) and init in INITIALIZERS:
        return INITIALIZERS[init](shape, rng, dtype)
    known = ", ".join(repr(k) for k in INITIALIZERS)
    raise ValueError(f"unknown init {init!r}; choose one of {known}, or pass an array of shape {tuple(shape)}")
