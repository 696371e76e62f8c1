"""Datasets for sgrad's experiments."""

from . import binary_addition
from .binary_addition import bits_to_int, generate_dataset, generate_split, int_to_bits, split_operands

__all__ = ["binary_addition", "bits_to_int", "generate_dataset", "generate_split", "int_to_bits",
           "split_operands"]
