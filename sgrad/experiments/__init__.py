"""The experiments: a file per experiment, and the plumbing they share, written once.

The experiments:

- :mod:`.binary_addition`: ``sgrad compare``, the blog's task, four methods side by side;
- :mod:`.mnist`: ``sgrad paper``, the paper's MNIST experiments over methods and depths;
- :mod:`.mnist_cnn`: the convolutional nets of ``sgrad paper --arch cnn``;
- :mod:`.parallel`: ``sgrad parallel``, every block in its own worker, against wall-clock time;
- :mod:`.rnn`: ``sgrad rnn``, recurrent DNI on Copy and Repeat Copy;
- :mod:`.char_lm`: a character-level language model with recurrent DNI (from Python);
  its LSTM model is :mod:`.rnn`'s (:mod:`.lstm_model`).

What they share:

- :mod:`.loop`: the one resumable training loop (batches, divergence, checkpoints, wall time);
- :mod:`.settings`: the settings every experiment has, and the checks made before any work;
- :mod:`.files`: the results folder, atomic writes and where checkpoints go;
- :mod:`.cells`: the cache of finished cells, so that an interrupted grid resumes.
"""
