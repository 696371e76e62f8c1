"""Synthetic inputs ``ĥ_k = I_k(x, c)``: a block's input predicted from what both sides of an interface have.

A block that trains on ĥ_k instead of the real h_k need not wait for the blocks below it to run forward:
it is *forward-unlocked*.  With a synthetic gradient ĝ_k = M_k(h_k, c) at the same interface for the
blocks below (:mod:`.decoupled`), neither side waits for the other, and the net is *completely
unlocked* (Jaderberg et al. 2016, section 3.3).

I_k sees only what both sides have when a step starts: the network's input x and, for a conditioned
generator, the label c.  It learns by regression onto the real h_k once that arrives, descending

    L_I = 1/(batch · width) Σ (ĥ_k − h_k)²,

the mean over every entry.  That is the squared error of koz4k/dni-pytorch's forward synthesizer, so
the two report the same L_I; on a batch-normalised h_k (unit variance per feature) L_I reads as the
share of h_k's variance that ĥ_k leaves unexplained, about 1 for ĥ_k = 0.  The gradient generators
descend ½‖ĝ − target‖²/batch instead (:func:`~sgrad.dni.generators.regression_loss`): the two differ
by the factor 2/width, which Adam's step does not see (up to its ε) and SGD's does.

:func:`~sgrad.dni.steps.complete_unlock_step` trains a stack this way.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import argument_checks
from .generators import RegressionNet, generator_net
from ..nn.module import restored_on_error, running_averages_kept


def mean_squared_error(prediction: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """``L_I = 1/(batch · width) Σ (prediction − target)²`` and its gradient dL_I/dprediction."""
    diff = prediction - target
    return float(np.vdot(diff, diff)) / diff.size, 2.0 * diff / diff.size


class InputGenerator(RegressionNet):
    """``ĥ = I(x, c)``: an MLP that predicts the output h of a block, its synthetic input for the block above.

    input_dim : width of x, the network's input (784 for MNIST's rows of pixels).
    output_dim : width of h, the block output that ĥ stands in for.
    condition_dim : width of c (e.g. 10 for one-hot labels); 0 leaves it unconditioned.
    hidden : widths of the hidden Linear→(BatchNorm)→ReLU blocks on ``[x, c]``; ``()`` makes I linear.
    batchnorm, init, update_rule, seed, rng, dtype : of those blocks (``init`` as for
        :func:`~sgrad.nn.blocks.dense_block`); the output layer's weights start at zero.
    bias_init : 'zeros' (default: every bias zero, so ĥ = 0 at first) or 'pytorch' (PyTorch's
        ``nn.Linear`` start, with c through a Linear of its own: :func:`~sgrad.dni.generators.generator_net`).

    ``forward(x, c)`` predicts ĥ and remembers what :meth:`update` needs; ``update(h, alpha)`` takes one
    descent step on ``L_I`` against the real h and returns ``L_I``; ``predict`` has no side effects.
    """

    def __init__(self, input_dim: int, output_dim: int, condition_dim: int = 0, *, hidden: Sequence[int] = (256, 256),
                 batchnorm: bool = False, init: str = "he", bias_init: str = "zeros", update_rule: Any = None,
                 seed: argument_checks.Seed = None, rng: np.random.Generator | None = None,
                 dtype: Any = np.float64) -> None:
        self.input_dim = argument_checks.check_integer(input_dim, "input_dim")
        self.output_dim = argument_checks.check_integer(output_dim, "output_dim")
        self.condition_dim = argument_checks.check_integer(condition_dim, "condition_dim", minimum=0)
        self.dtype = argument_checks.check_float_dtype(dtype)
        rng = argument_checks.make_rng(seed, rng)
        self.net = generator_net((self.input_dim, self.condition_dim), hidden, self.output_dim, init=init,
                                 bias_init=bias_init, batchnorm=batchnorm, update_rule=update_rule, rng=rng,
                                 dtype=self.dtype)
        self._start_regression()
        self.synthetic_input: np.ndarray | None = None

    def predict(self, x: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĥ = I(x, c): (batch, output_dim), with no side effects."""
        self.check_input(x, condition)
        return self.net.predict(self._join(x, condition))

    def forward(self, x: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĥ = I(x, c): (batch, output_dim), remembering ``[x, c]`` for :meth:`update`.

        x: (batch, input_dim) in the generator's dtype; condition: (batch, condition_dim), or None for an
        unconditioned generator.  A refused batch leaves everything as it was.
        """
        self.check_input(x, condition)
        self.check_batch_size(x.shape[0], "x")
        joined = self._join(x, condition)
        self.synthetic_input = self.net.forward(joined)
        self.input = joined
        self._updated = False
        return self.synthetic_input

    def update(self, h: np.ndarray, alpha: float, *, x: np.ndarray | None = None,
               condition: np.ndarray | None = None) -> float:
        """One descent step on ``L_I`` of the last ĥ against the real ``h``, at rate ``alpha``; returns ``L_I``.

        h: the block's real output for the batch of the last :meth:`forward`, of ĥ's shape and dtype.
        ``L_I`` is measured before the step.  Refused (and nothing changed): no forward first, a second
        update for one forward, an h of another shape or dtype or holding NaN or inf, a bad ``alpha``.
        For an h that comes after the generator has predicted for later batches (in a pipeline), give
        that batch's ``x`` and ``condition``: the generator predicts for them once more (its running
        averages put back, so that the batch counts in them once), then steps; refused, that leaves it as it was.
        """
        if x is not None:
            with restored_on_error(self):
                with running_averages_kept(self):
                    self.forward(x, condition)
                return self.update(h, alpha)
        synthetic_input = self._to_correct(self.synthetic_input, "update(h)", "a synthetic input", "forward(x)")
        argument_checks.check_same_shape(h, "h", synthetic_input, "the last synthetic input", same_dtype=True)
        alpha = argument_checks.check_learning_rate(alpha)
        self._check_not_updated("forward(x)")
        loss, dprediction = mean_squared_error(synthetic_input, h)
        self._regression_step(dprediction, alpha)
        return loss

    def check_input(self, x: np.ndarray, condition: np.ndarray | None) -> None:
        """Refuse what :meth:`forward` refuses: an x that is not finite, (batch, input_dim) and in the generator's
        dtype, or a condition that does not fit (see :func:`~sgrad.argument_checks.check_condition`)."""
        argument_checks.check_batch(x, "x", self.input_dim, width_name="the input generator's input_dim")
        if x.dtype != self.dtype:
            raise TypeError(f"x must have the input generator's dtype, {self.dtype}; got {x.dtype}. Pass "
                            f"x.astype(np.{self.dtype}), or build the generator with dtype={x.dtype}")
        argument_checks.check_condition(condition, self.condition_dim, x.shape[0], "this input generator")

    def __repr__(self) -> str:
        return (f"InputGenerator({self.input_dim}, {self.output_dim}, condition_dim={self.condition_dim}, "
                f"net={self.net!r})")


def check_input_generators(layers: Sequence[Any], input_generators: Sequence[Any], x: np.ndarray,
                           condition: np.ndarray | None) -> None:
    """Refuse a completely unlocked stack's step before anything changes.

    layers: ``[B_1, ..., B_m, top]``, each B_k a DNI block (with ``forward_and_update``);
    input_generators: ``[I_1, ..., I_m]``, I_k predicting B_k's output h_k.  Checks that there is one
    input generator per DNI block, each taking x's width and dtype and giving its block's width, that
    the condition fits every generator and every block's gradient generator, and that each module can
    take a batch of x's rows.
    """
    if len(layers) < 2:
        raise ValueError(f"a completely unlocked stack needs a DNI block and a top layer; got {len(layers)} layer")
    blocks = list(layers[:-1])
    if len(input_generators) != len(blocks):
        raise ValueError(f"one input generator per DNI block: the stack has {len(blocks)} block(s) below its top, "
                         f"and {len(input_generators)} input generator(s) came; give I_k for each block's output h_k")
    for k, (block, generator) in enumerate(zip(blocks, input_generators), start=1):
        if not callable(getattr(block, "forward_and_update", None)):
            raise TypeError(f"layer {k} must be a DNI block (DNI or DNIBlock), whose ĝ_k = M_k(h_k, c) updates it; "
                            f"got {type(block).__name__}")
        if not isinstance(generator, InputGenerator):
            raise TypeError(f"input generator {k} must be an InputGenerator; got {type(generator).__name__}")
        if generator.output_dim != block.output_dim:
            raise ValueError(f"input generator {k} predicts {generator.output_dim} features, but layer {k} gives "
                             f"h_{k} of {block.output_dim}; build it with output_dim={block.output_dim}")
        generator.check_input(x, condition)
        argument_checks.check_condition(condition, block.condition_dim, x.shape[0], f"layer {k}'s DNI")
    for module in (*layers, *input_generators):
        module.check_batch_size(x.shape[0], "x")
