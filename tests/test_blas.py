"""sgrad/nn/blas.py: ``c += alpha a b`` in one call of NumPy's own BLAS, against the NumPy expression."""

import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import dtypes, seeds

from sgrad.nn import blas

LAYOUTS = ["C", "F", "transposed view", "strided"]


def laid_out(array, layout):
    """``array``'s values in the given memory layout."""
    if layout == "C":
        return np.ascontiguousarray(array)
    if layout == "F":
        return np.asfortranarray(array)
    if layout == "transposed view":
        return np.ascontiguousarray(array.T).T
    wide = np.zeros((array.shape[0], 2 * array.shape[1]), dtype=array.dtype)  # every other column: neither C nor F
    wide[:, ::2] = array
    return wide[:, ::2]


# c of 130 x 129 numbers and more goes to the BLAS (blas.SMALL), smaller to the NumPy expression
@given(dtype=dtypes, m=st.sampled_from([1, 3, 17, 130]), k=st.integers(0, 40), n=st.sampled_from([1, 5, 40, 129]),
       layout_a=st.sampled_from(LAYOUTS), layout_b=st.sampled_from(LAYOUTS), c_layout=st.sampled_from(["C", "F"]),
       alpha=st.sampled_from([1.0, -0.01, 2.5]), seed=seeds)
@example(dtype=np.float32, m=130, k=40, n=129, layout_a="transposed view", layout_b="C", c_layout="C", alpha=-0.01,
         seed=0)  # the SGD step's shape of call, on the BLAS path
@example(dtype=np.float64, m=130, k=17, n=129, layout_a="C", layout_b="F", c_layout="C", alpha=2.5, seed=1)
def test_add_product_is_the_numpy_expression(dtype, m, k, n, layout_a, layout_b, c_layout, alpha, seed):
    rng = np.random.default_rng(seed)
    a = laid_out(rng.standard_normal((m, k)).astype(dtype), layout_a)
    b = laid_out(rng.standard_normal((k, n)).astype(dtype), layout_b)
    c = laid_out(rng.standard_normal((m, n)).astype(dtype), c_layout)
    a_before, b_before = a.copy(), b.copy()
    expected = c.astype(np.float64) + alpha * (a.astype(np.float64) @ b.astype(np.float64))
    blas.add_product(c, a, b, alpha)
    assert c.dtype == dtype
    # A sum of k products and c: rounding of that size.
    size = k * np.max(np.abs(a), initial=0) * np.max(np.abs(b), initial=0) * abs(alpha) + np.max(np.abs(expected))
    assert np.max(np.abs(c - expected)) <= 4 * (k + 1) * np.finfo(dtype).eps * size
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)


def numpy_uses_scipy_openblas():
    blas_config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return blas_config.get("name") == "scipy-openblas" and "USE64BITINT" in blas_config.get("openblas configuration", "")


@pytest.mark.skipif(sys.platform != "linux" or not numpy_uses_scipy_openblas(),
                    reason="the one-call path is for NumPy's Linux wheels, built with scipy-openblas")
def test_numpy_s_wheel_takes_the_one_call_path_with_no_product_array():
    assert blas.available(np.float32) and blas.available(np.float64)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((600, 50)), rng.standard_normal((50, 700))
    c = rng.standard_normal((600, 700))
    expected = c + 0.5 * (a @ b)
    product_bytes, c_again = c.nbytes, c.copy()
    tracemalloc.start()  # NumPy reports its arrays' memory to tracemalloc
    try:
        blas.add_product(c, a, b, 0.5)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        c_again += 0.5 * (a @ b)  # the NumPy expression, for comparison
        _, numpy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < product_bytes / 10, f"add_product took {peak} bytes: it made a product array"
    assert numpy_peak >= product_bytes  # the measure sees the expression's product array
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


def test_add_product_refuses_what_it_cannot_add():
    c, a, b = np.zeros((2, 3)), np.ones((2, 4)), np.ones((4, 3))
    with pytest.raises(ValueError, match=r"c \(m, n\) \+= alpha a \(m, k\) b \(k, n\).*a \(2, 4\) float64, b \(3, 3\)"):
        blas.add_product(c, a, np.ones((3, 3)), 1.0)
    with pytest.raises(ValueError, match="one dtype"):
        blas.add_product(c, a.astype(np.float32), b, 1.0)
    with pytest.raises(TypeError, match="2-D floating-point arrays"):
        blas.add_product(c, a.astype(np.int64), b, 1.0)
    with pytest.raises(TypeError, match="2-D floating-point arrays"):
        blas.add_product(c, np.ones(4), b, 1.0)
    np.testing.assert_array_equal(c, 0.0)  # nothing added on the way to any refusal


def test_add_product_of_c_with_itself_reads_c_before_it_changes():
    rng = np.random.default_rng(1)
    c = rng.standard_normal((5, 5)).astype(np.float32)
    expected = c + 0.5 * (c @ c.T)
    blas.add_product(c, c, c.T, 0.5)  # the BLAS would read c while writing it: NumPy's expression makes a copy
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
