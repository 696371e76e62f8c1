"""The experiments: a file per experiment, each run by one command of ``sgrad``.

- :mod:`.binary_addition`: ``sgrad compare``, the blog's task, four methods side by side;
- :mod:`.mnist`: ``sgrad paper``, the paper's MNIST experiments over methods and depths;
- :mod:`.mnist_cnn`: the convolutional nets of ``sgrad paper --arch cnn``;
- :mod:`.parallel`: ``sgrad parallel``, every block in its own worker, against wall-clock time;
- :mod:`.rnn`: ``sgrad rnn``, recurrent DNI on Copy and Repeat Copy;
- :mod:`.char_lm`: a character-level language model with recurrent DNI (from Python);
  its LSTM model is :mod:`.rnn`'s (:mod:`.lstm_model`).

What they need besides: :mod:`.side_by_side` (independent runs, each in a worker process of its own) and
:mod:`.plotting` (the figures; matplotlib loads only there).  The plumbing they share, written once (the
loop, the settings, the results folder, the cell cache, run resume), is :mod:`sgrad.training`.
"""
