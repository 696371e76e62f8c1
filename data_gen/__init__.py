"""Datasets for sgrad's experiments: binary addition, MNIST, and the Copy and Repeat Copy tasks.

Each dataset module loads on first use (``data_gen.load_mnist`` brings in the
MNIST loader, ``data_gen.generate_dataset`` the binary-addition generator), so
that importing :mod:`data_gen.checks`, as sgrad does, loads neither.
"""

import importlib
from typing import Any

_LAZY = {
    **{name: "binary_addition" for name in ("bits_to_int", "generate_dataset", "generate_split", "int_to_bits",
                                            "split_operands")},
    **{name: "mnist" for name in ("MnistData", "MnistNotFoundError", "load_mnist", "one_hot", "prepare_mnist")},
    **{name: "copy_task" for name in ("Curriculum", "bits_error", "copy_batch", "repeat_copy_batch")},
    **{name: "text" for name in ("TextNotFoundError", "decode", "encode", "load_text", "one_hot_ids",
                                 "random_windows", "split_ids", "stream_rows", "vocabulary")},
}

__all__ = ["binary_addition", "bits_to_int", "checks", "generate_dataset", "generate_split", "int_to_bits",
           "split_operands", "mnist", "MnistData", "MnistNotFoundError", "load_mnist", "one_hot", "prepare_mnist",
           "copy_task", "Curriculum", "bits_error", "copy_batch", "repeat_copy_batch",
           "text", "TextNotFoundError", "decode", "encode", "load_text", "one_hot_ids", "random_windows",
           "split_ids", "stream_rows", "vocabulary"]


def __getattr__(name: str) -> Any:
    if name in ("binary_addition", "mnist", "checks", "copy_task", "text"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'data_gen' has no attribute {name!r}")
