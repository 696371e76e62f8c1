"""The neural-network modules and the maths beneath them: what backprop needs, and nothing of DNI.

Bottom to top:

- :mod:`.nonlinearities`, :mod:`.initializers`, :mod:`.losses`, :mod:`.optimizers`: the blog's nonlinearity
  pairs, weight initialisations, losses returning ``(L, dL/doutput)``, update rules with one
  ``step(param, grad, state, lr)``;
- :mod:`.kernels`: pure functions on arrays, the forward and backward of a dense layer, batch norm, one RNN or
  LSTM step, a convolution and max pooling, as their formulas read; :mod:`.fast_kernels`: the speed tricks
  that pay, each tested against the plain kernel it replaces;
- :mod:`.module`: ``Module``, the tree of children and the one ``submodules()`` walk, and what every module
  shares (the forward-before-backward guard, the update of its own parameters);
- :mod:`.layers`, :mod:`.batchnorm`, :mod:`.blocks`, :mod:`.conv`, :mod:`.conditioned_conv`, :mod:`.dropout`:
  the modules, each with one public ``forward`` / ``backward`` / ``update`` / ``predict``;
- :mod:`.checkpoint`: a module tree saved to a file and loaded back.
"""
