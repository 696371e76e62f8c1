"""sgrad's version, written once: ``sgrad.__version__``, ``sgrad --version`` and the package's metadata read it here."""

__version__ = "0.1.0"
