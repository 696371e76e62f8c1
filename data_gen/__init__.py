"""Datasets for sgrad's experiments."""

from . import binary_addition, mnist
from .binary_addition import bits_to_int, generate_dataset, generate_split, int_to_bits, split_operands
from .mnist import MnistData, MnistNotFoundError, load_mnist, one_hot, prepare_mnist

__all__ = ["binary_addition", "bits_to_int", "generate_dataset", "generate_split", "int_to_bits",
           "split_operands", "mnist", "MnistData", "MnistNotFoundError", "load_mnist", "one_hot",
           "prepare_mnist"]
