"""Every Hypothesis strategy the tests draw from: sizes, seeds, dtypes, names and arrays.

Import them in a test file with ``from strategies import seeds, widths`` (pytest puts ``tests/`` on
``sys.path``).  Most tests draw a seed and build their arrays from it with NumPy, so a failure prints the
few numbers that reproduce it.  Shapes go down to a batch of one (two where batch norm trains).  How many
examples each test draws is the Hypothesis profile's choice (conftest.py).
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sgrad.nn.nonlinearities import NONLINEARITIES

# --- sizes and seeds ----------------------------------------------------------------------------

seeds = st.integers(0, 2**32 - 1)
widths = st.integers(1, 4)
batches = st.integers(1, 5)
training_batches = st.integers(2, 5)  # batch norm in training normalises with the batch's statistics: 2 rows at least
condition_dims = st.integers(0, 2)  # 0: unconditioned
hidden_widths = st.lists(st.integers(1, 4), max_size=2).map(tuple)  # () included: a linear generator net
matrix_sides = st.integers(1, 40)
long_batches = st.integers(2, 64)  # sums over more rows: where two ways of summing round apart
sum_widths = st.integers(2, 62)  # bits of a binary-addition sum: data_gen's range
example_counts = st.integers(1, 20)
draws = st.data()  # for a test whose later draws depend on earlier ones (a row index below the drawn row count)


def indices(size):
    """A position in ``range(size)``: a row or a column of a drawn matrix."""
    return st.integers(0, size - 1)


# --- names and switches ----------------------------------------------------------------------------

booleans = st.booleans()  # bias, batchnorm, training mode
MODULE_KINDS = ["layer", "dense_block"]  # what a DNI step decouples: the blog's Layer, the paper's block
module_kinds = st.sampled_from(MODULE_KINDS)

nonlinearities = st.sampled_from(sorted(NONLINEARITIES))
update_rules = st.sampled_from(["sgd", "momentum", "adam"])
generator_kinds = st.sampled_from(["linear", "mlp", "synthetic-loss"])
gradient_generator_kinds = st.sampled_from(["linear", "mlp"])  # the ones whose net outputs ĝ itself
LOSS_NAMES = ["mse", "bce", "softmax_ce, class indices", "softmax_ce, probability rows"]  # see test_losses.loss_case
loss_names = st.sampled_from(LOSS_NAMES)
reductions = st.sampled_from(["mean", "sum", "none"])

# --- dtypes and memory layouts -------------------------------------------------------------------

dtypes = st.sampled_from([np.float32, np.float64])  # what sgrad computes in
float_dtypes = st.sampled_from([np.float16, np.float32, np.float64])  # every float an input may hold
orders = st.sampled_from("CF")
non_finite = st.sampled_from([np.nan, np.inf, -np.inf])

# --- numbers -------------------------------------------------------------------------------------

LIMIT = 1e4  # how large a logit the stability tests go to: past where exp overflows in float32 (88) and float64 (709)
logits = st.floats(min_value=-LIMIT, max_value=LIMIT, width=32)  # the same number in float32 and float64


@st.composite
def logit_rows_with_targets(draw):
    """``(logits, bits, label)``: one row of logits up to ±LIMIT, bit targets of its width, one class label."""
    row = draw(st.lists(logits, min_size=1, max_size=6))
    bits = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=len(row), max_size=len(row)))
    return row, bits, draw(indices(len(row)))


@st.composite
def float_matrices(draw):
    """A 2-D float16/32/64 array in C or Fortran order, of any floats: NaN, ±inf and the dtype's extremes too."""
    dtype = np.dtype(draw(float_dtypes))
    bits = 8 * dtype.itemsize
    largest = float(np.finfo(dtype).max)
    elements = st.one_of(st.floats(width=bits), st.sampled_from([largest, -largest]))  # column sums that overflow
    array = draw(hnp.arrays(dtype, (draw(matrix_sides), draw(matrix_sides)), elements=elements))
    return np.asarray(array, order=draw(orders))
