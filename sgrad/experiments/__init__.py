"""The experiments: one resumable loop (:mod:`.loop`) and a file per experiment that uses it.

- :mod:`.binary_addition`: ``sgrad compare``, the blog's task, four methods side by side;
- :mod:`.mnist`: ``sgrad paper``, the paper's MNIST experiments over methods and depths.
"""
