"""Decoupled Neural Interfaces: gradients that are predicted, not backpropagated, and the steps that use them.

- :mod:`.generators`: the synthetic-gradient models ĝ = M(h, c);
- :mod:`.decoupled`: the DNI step, written once, and the modules that take it (``DNI``, ``DNIBlock``);
- :mod:`.synthetic_inputs`: the synthetic inputs ĥ = I(x, c) of a forward-unlocked block (``InputGenerator``);
- :mod:`.steps`: one function per training algorithm of a stack (backprop, DNI, synthetic loss, complete unlock);
- :mod:`.zeroth_order`: a gradient estimated from queries alone, for a model that is a black box.
"""
