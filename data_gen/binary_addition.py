"""Binary addition, the blog post's task: learn the bits of ``a + b`` from the bits of ``a`` and ``b``.

With ``output_dim = d``:

- the operands ``a, b`` are integers below ``2**(d-1)``, so their sum fits in d bits;
- ``x`` is the d bits of ``a`` followed by the d bits of ``b``: shape (n, 2d);
- ``y`` is the d bits of ``a + b``: shape (n, d);
- bits are most significant first, as floats 0.0 / 1.0.

Everything is vectorized: no Python loop over examples.
"""

import numbers

import numpy as np
from numpy.typing import ArrayLike

from .checks import Seed, check_bit_rows, check_integer, check_integers, make_rng

MIN_OUTPUT_DIM = 2
MAX_OUTPUT_DIM = 62  # operands and sums must fit in int64


def int_to_bits(values: ArrayLike, width: int) -> np.ndarray:
    """Bits of non-negative integers, most significant first: (n,) ints -> (n, width) floats.

    Every value must fit in ``width`` bits, ``0 <= value < 2**width``.
    """
    width = check_integer(width, "width")
    if width > MAX_OUTPUT_DIM + 1:
        raise ValueError(f"width must be at most {MAX_OUTPUT_DIM + 1} (bits of an int64); got {width}")
    values = check_integers(values, "values", below=2**width)
    shifts = np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] >> shifts) & 1).astype(np.float64)


def bits_to_int(bits: ArrayLike) -> np.ndarray:
    """Integers from rows of bits, most significant first: (n, width) -> (n,) int64.

    Rows may be probabilities or logits' sigmoid: each bit is read as ``bit >= 0.5``.
    """
    bits = check_bit_rows(bits, "bits")
    if bits.shape[1] > MAX_OUTPUT_DIM + 1:
        raise ValueError(f"at most {MAX_OUTPUT_DIM + 1} bits fit in int64; got {bits.shape[1]}")
    weights = np.int64(1) << np.arange(bits.shape[1] - 1, -1, -1, dtype=np.int64)
    return (bits >= 0.5).astype(np.int64) @ weights


def split_operands(x: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The operands ``(a, b)`` encoded in ``x``: (n, 2d) bits -> two (n,) int64 arrays."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] % 2:
        raise ValueError(f"x must have shape (n, 2 * output_dim); got shape {x.shape}")
    d = x.shape[1] // 2
    return bits_to_int(x[:, :d]), bits_to_int(x[:, d:])


def encode(a: ArrayLike, b: ArrayLike, output_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(x, y)`` rows for operand arrays ``a`` and ``b``."""
    x = np.concatenate([int_to_bits(a, output_dim), int_to_bits(b, output_dim)], axis=1)
    return x, int_to_bits(np.asarray(a) + np.asarray(b), output_dim)


def generate_dataset(output_dim: int = 8, num_examples: int = 1000, seed: Seed = None, *,
                     rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``num_examples`` additions with operands uniform below ``2**(output_dim-1)``.

    Compatible with the blog's ``generate_dataset(output_dim=8, num_examples=1000)``;
    pairs may repeat, as in the blog.  Returns ``(x, y)`` of shapes
    (num_examples, 2 * output_dim) and (num_examples, output_dim).
    """
    output_dim = _check_output_dim(output_dim)
    num_examples = check_integer(num_examples, "num_examples")
    rng = make_rng(seed, rng)
    a, b = rng.integers(0, 2 ** (output_dim - 1), size=(2, num_examples), dtype=np.int64)
    return encode(a, b, output_dim)


def generate_split(output_dim: int = 8, num_train: int = 1000, num_test: int = 1000, seed: Seed = None, *,
                   rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A train set and a held-out set with no (a, b) operand pair on both sides.

    The pairs are distinct across the whole split (and within each side), so
    held-out accuracy measures generalisation to unseen additions.  Pairs are
    ordered: (3, 5) and (5, 3) count as different pairs.

    Returns ``(x_train, y_train, x_test, y_test)``.
    """
    output_dim = _check_output_dim(output_dim)
    num_train = check_integer(num_train, "num_train")
    num_test = check_integer(num_test, "num_test", minimum=0)
    rng = make_rng(seed, rng)
    needed = num_train + num_test
    available = 4 ** (output_dim - 1)
    if needed > available:
        raise ValueError(
            f"output_dim={output_dim} has only {available} distinct operand pairs, but "
            f"num_train + num_test = {needed}; ask for fewer examples or a larger output_dim"
        )
    a, b = _distinct_pairs(needed, 2 ** (output_dim - 1), rng)
    x, y = encode(a, b, output_dim)
    return x[:num_train], y[:num_train], x[num_train:], y[num_train:]


def _distinct_pairs(count, high, rng):
    """``count`` distinct (a, b) pairs below ``high``, in the order they were first drawn."""
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < count:
        # Draw a surplus; repeats are dropped, keeping each pair's first draw.
        fresh = rng.integers(0, high, size=(2 * (count - len(pairs)) + 16, 2), dtype=np.int64)
        pairs = np.concatenate([pairs, fresh])
        _, first = np.unique(pairs, axis=0, return_index=True)
        pairs = pairs[np.sort(first)][:count]
    return pairs[:, 0], pairs[:, 1]


def _check_output_dim(output_dim):
    if isinstance(output_dim, bool) or not isinstance(output_dim, numbers.Integral):
        raise TypeError(f"output_dim must be an integer; got {output_dim!r}")
    if not MIN_OUTPUT_DIM <= output_dim <= MAX_OUTPUT_DIM:
        raise ValueError(
            f"output_dim must be between {MIN_OUTPUT_DIM} and {MAX_OUTPUT_DIM} (the sum's bits, "
            f"which must fit in int64); got {output_dim}"
        )
    return int(output_dim)
