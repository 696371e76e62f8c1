"""A speed trick: ``C += alpha A B`` as one call of the BLAS that NumPy itself uses, with no product array.

NumPy's ``C += alpha * (A @ B)`` makes the product, scales it and adds it: two passes over a C-sized array
besides the product.  The BLAS routine ``gemm`` computes ``C = alpha A B + beta C`` in one go, and NumPy's
wheels ship OpenBLAS with its C interface (``cblas_sgemm``, ``cblas_dgemm``) under their own names, but NumPy
does not expose ``beta``.  :func:`add_product` calls that routine through :mod:`ctypes` where it finds it (NumPy
built against ``scipy-openblas`` with 64-bit integers, as its Linux wheels are), on arrays it can hand over
as they are and large enough to gain by it (``SMALL``), and otherwise runs the NumPy expression.
``tests/test_blas.py`` checks the two against each other, and that this machine's NumPy takes the BLAS path.
"""

import ctypes
import functools
import pathlib

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS_ORDER and CBLAS_TRANSPOSE values
# Numbers in c below which the NumPy expression runs instead: on a small c, the passes the one call saves cost less
# than the call through ctypes itself.
SMALL = 1 << 14


@functools.cache
def _gemm(dtype: np.dtype):
    """The ``cblas_?gemm`` of NumPy's own OpenBLAS for ``dtype`` (float32 or float64), or None where there is none."""
    libs = pathlib.Path(np.__file__).parent.parent / "numpy.libs"
    found = sorted(libs.glob("libscipy_openblas64_*.so")) if libs.is_dir() else []
    if not found:
        return None
    try:
        library = ctypes.CDLL(str(found[0]))  # the library NumPy has loaded already: the same handle, the same threads
        routine = getattr(library, {np.float32: "scipy_cblas_sgemm64_", np.float64: "scipy_cblas_dgemm64_"}[dtype.type])
    except (OSError, AttributeError):
        return None
    scalar, index = (ctypes.c_float if dtype == np.float32 else ctypes.c_double), ctypes.c_int64
    routine.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index, scalar, ctypes.c_void_p, index,
                        ctypes.c_void_p, index, scalar, ctypes.c_void_p, index]
    routine.restype = None
    return routine


def available(dtype) -> bool:
    """Whether :func:`add_product` on arrays of ``dtype`` can run in one BLAS call here."""
    dtype = np.dtype(dtype)
    return dtype in (np.float32, np.float64) and _gemm(dtype) is not None


def _operand(a: np.ndarray) -> tuple[int, int] | None:
    """``(transpose flag, leading dimension)`` that hands ``a`` to a row-major gemm as it is, or None."""
    if a.flags.c_contiguous:
        return _NO_TRANS, max(1, a.shape[1])
    if a.flags.f_contiguous:
        return _TRANS, max(1, a.shape[0])
    return None


def add_product(c: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float) -> None:
    """``c += alpha * (a @ b)`` in place, for 2-D a (m, k), b (k, n) and c (m, n) of one floating dtype.

    One BLAS call where :func:`available` and the arrays allow it (c C-contiguous, of at least ``SMALL`` numbers and
    not sharing memory with a or b, which are each C- or F-contiguous), else the NumPy expression; the same numbers
    up to rounding.
    """
    if not all(isinstance(x, np.ndarray) and x.ndim == 2 and x.dtype.kind == "f" for x in (c, a, b)):
        raise TypeError("add_product needs 2-D floating-point arrays c, a and b; got "
                        + ", ".join(f"{type(x).__name__} {getattr(x, 'shape', '')} {getattr(x, 'dtype', '')}"
                                    for x in (c, a, b)))
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or c.shape != (m, n) or not (a.dtype == b.dtype == c.dtype):
        raise ValueError(f"add_product needs c (m, n) += alpha a (m, k) b (k, n) in one dtype; got c {c.shape} "
                         f"{c.dtype}, a {a.shape} {a.dtype}, b {b.shape} {b.dtype}")
    op_a, op_b = _operand(a), _operand(b)
    gemm = _gemm(c.dtype) if c.dtype in (np.float32, np.float64) else None
    if (gemm is None or op_a is None or op_b is None or not c.flags.c_contiguous or not c.flags.writeable
            or c.size < SMALL or k == 0 or np.may_share_memory(c, a) or np.may_share_memory(c, b)):
        c += a @ b if alpha == 1 else alpha * (a @ b)
        return
    gemm(_ROW_MAJOR, op_a[0], op_b[0], m, n, k, alpha, a.ctypes.data, op_a[1], b.ctypes.data, op_b[1], 1.0,
         c.ctypes.data, max(1, n))
