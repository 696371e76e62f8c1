"""Freed memory kept in the process from one training step to the next, instead of going back to the kernel.

A training step allocates the same arrays at every step (activations, deltas, gradients, im2col matrices) and
frees them by the end of it.  By default glibc's ``malloc`` hands a large freed block back to the kernel (a block
of more than its mmap threshold, which starts at 128 KB and follows the largest block freed so far, up to 32 MB;
or free memory at the heap's top beyond twice that), and the next step takes fresh pages again: the kernel
zeroes each 4 KB page at its first write, a page fault each, hundreds a step for the MNIST examples
(``docs/results/complete-unlock.md`` says what it costs there).

:func:`keep_freed_memory` sets both thresholds once, for the whole process: blocks up to ``MMAP_THRESHOLD`` come
from the heap, and up to ``TRIM_THRESHOLD`` of free memory stays at its top.  The numbers computed do not change;
the process keeps the memory of its largest step until it ends.  The training loop and the parallel workers call
it.  Off glibc it does nothing.  (glibc's ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment
variables set the same thresholds for a whole program.)
"""

import ctypes

# glibc's mallopt parameters (malloc.h) and the values set.  MMAP_THRESHOLD is glibc's largest (on 64 bits).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def keep_freed_memory() -> bool:
    """Keep freed blocks of up to ``MMAP_THRESHOLD`` bytes in this process; True if the C library took the setting.

    False, and nothing changed, where the C library has no ``mallopt`` (macOS) or refuses it (musl accepts
    the call and ignores it).  Calling it again changes nothing more.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
