"""Synthetic-gradient generators ``ĝ = M(h, c)``.

A generator is any object with this small interface (write your own, e.g. an
oracle for a test, and pass it to :class:`sgrad.DNI` as ``generator=``):

``output_dim`` : int
    Width of h, and so of ĝ.
``condition_dim`` : int
    Width of the conditioning c (0: unconditioned).
``forward(h, condition=None) -> ĝ``
    Predict ĝ for h: (batch, output_dim) and c: (batch, condition_dim) or
    None, and remember what ``update`` needs.
``update(target, alpha) -> float``
    Take one descent step, with learning rate ``alpha``, on the regression
    loss ``L_M = 1/(2 batch) * sum((prediction - target)**2)`` of the last
    forward's prediction, and return that loss (measured before the step).
    It checks the target's shape.
``predict(h, condition=None) -> ĝ``
    The same prediction with no side effects, for diagnostics.

Here: :class:`LinearGenerator` (the blog's and the paper's), :class:`MLPGenerator`
(hidden layers, optionally batch-normalised, as in the public TensorFlow
reproduction), :class:`SyntheticLossGenerator` (predicts a loss, not a gradient)
and :class:`ConvGenerator` (a small CNN, for the feature maps of a convolutional
block: there h, ĝ and the target are (batch, channels, height, width), and
``output_dim`` is the number of channels).
"""

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import argument_checks
from ..nn.blocks import Sequential, dense_block
from ..nn.conditioned_conv import ConditionedConv2d
from ..nn.conv import Activation2d, BatchNorm2d, Conv2d, conv_block
from ..nn.layers import Layer
from ..nn.module import Module
from ..nn.nonlinearities import sigmoid


CONV_CONDITIONING = ("channels", "linear")  # how a ConvGenerator's first layer takes c
CONV_GENERATOR_INITS = ("he", "pytorch")
GENERATOR_BIAS_INITS = ("zeros", "pytorch")  # a dense generator's biases: zero, or PyTorch's nn.Linear start


def check_generator_interface(generator: Any) -> None:
    """Refuse an object without a generator's methods ``forward``, ``update`` and ``predict`` (:class:`Generator`'s)."""
    missing = [name for name in ("forward", "update", "predict") if not callable(getattr(generator, name, None))]
    if missing:
        raise TypeError(f"generator must have methods forward, update and predict (see sgrad.dni.generators); "
                        f"{type(generator).__name__} lacks {', '.join(missing)}")


def regression_loss(prediction: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """The generator's loss ``L_M = 1/(2 batch) * sum((prediction - target)**2)`` and its gradient dL_M/dprediction."""
    diff = prediction - target
    batch = prediction.shape[0]
    return 0.5 * float(np.vdot(diff, diff)) / batch, diff / batch  # vdot: the sum of squares in one pass


def generator_net(part_widths: Sequence[int], hidden: Sequence[int], output_dim: int, *, init: Any = "he",
                  bias_init: str = "zeros", batchnorm: bool = False, update_rule: Any = None,
                  rng: np.random.Generator | None = None, dtype: Any = np.float64) -> Sequential:
    """A dense generator's network on its input's parts side by side, e.g. ``[h, c]`` of widths ``(256, 10)``.

    Hidden Linear→(BatchNorm)→ReLU blocks of widths ``hidden``, then a linear output layer of ``output_dim``
    whose weights start at zero; ``init`` draws the hidden layers' weights.  ``bias_init``:

    - 'zeros' (default): every bias starts at zero, so the output starts at zero;
    - 'pytorch': every layer starts as PyTorch's ``nn.Linear``: each bias U(-1/√fan_in, 1/√fan_in), the
      output layer's included (the output starts at that bias, one constant per feature), and the first
      layer as one ``nn.Linear`` per part with their outputs added (its weights' rows and a bias drawn for
      each part with the part's own fan-in: ``fan_in = 10`` for one-hot labels c).  With ``init='pytorch'``
      that is the start of koz4k/dni-pytorch's ``BasicSynthesizer``, whose output layer's weights are zero.
    """
    bias_init = argument_checks.check_choice(bias_init, "bias_init", GENERATOR_BIAS_INITS)
    part_widths = tuple(width for width in part_widths if width)
    parts = part_widths if bias_init == "pytorch" else None  # 'zeros': one part, a single draw of the weights
    widths = (sum(part_widths), *argument_checks.check_widths(hidden, "hidden"))
    blocks = [dense_block(a, b, "relu", batchnorm=batchnorm, init=init, bias_init=bias_init,
                          parts=parts if k == 0 else None, update_rule=update_rule, rng=rng, dtype=dtype)
              for k, (a, b) in enumerate(zip(widths[:-1], widths[1:]))]
    out = Layer(widths[-1], output_dim, "identity", init="zeros", bias_init=bias_init,
                parts=None if blocks else parts, update_rule=update_rule, rng=rng, dtype=dtype)
    return Sequential(blocks + [out])


class RegressionNet(Module):
    """A network ``net`` on its input beside a condition, ``[input, c]``, that learns by regression onto targets.

    What the gradient generators (ĝ = M(h, c), below) and the input generators (ĥ = I(x, c),
    :mod:`sgrad.dni.synthetic_inputs`) share: ``net``, a module (forward, predict, backward, update,
    parameters, gradients); the gradients of its last regression step; and its input ``[input, c]``.
    """

    net: Any

    def _start_regression(self) -> None:
        """No forward pass yet, no update state of its own and no gradients."""
        self.update_state = {}
        self.input: np.ndarray | None = None
        self._gradients: dict[str, np.ndarray] = {}
        self._updated = False

    def children(self) -> dict[str, Any]:
        return {"net": self.net}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable arrays by name."""
        return self.net.parameters

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        """The regression loss's gradient for each parameter, from the last ``update``, keyed as :attr:`parameters`."""
        return self._gradients

    def _to_correct(self, prediction: np.ndarray | None, method: str, what: str, call: str) -> np.ndarray:
        """The last forward pass's ``prediction``, for ``method`` to regress onto its target; refused before any."""
        if prediction is None:
            raise ValueError(f"{method} needs {what} to correct; call {call} first")
        return prediction

    def _check_not_updated(self, call: str) -> None:
        """Refuse a second update for one forward pass: the first has stepped the net that made the prediction."""
        if self._updated:
            raise ValueError(f"update() after update(): the last forward pass used the old weights; "
                             f"call {call} again first")

    def _regression_step(self, dnet_output: np.ndarray, alpha: float) -> None:
        """Backpropagate dL/d(the net's output) through ``net``, keep the gradients, and step at ``alpha``."""
        self.net.backward(dnet_output, input_delta=False)  # [input, c] is data: no delta for it
        self._gradients = dict(self.net.gradients)
        self.net.update(alpha)
        self._updated = True

    def _join(self, x, condition):
        """[x, c]: x with c's columns after its own, in x's dtype."""
        if condition is None:
            return x
        return np.concatenate([x, condition.astype(x.dtype, copy=False)], axis=1)


class Generator(RegressionNet):
    """A network ``net`` on ``[h, c]`` that predicts ĝ and learns by regression onto its targets.

    ``net`` is a module (forward, predict, backward, update, parameters,
    gradients), ``backward(delta, input_delta=False)`` included.  Subclasses build it.
    ``prediction`` is what :meth:`update` regresses onto the target: ĝ itself here
    (a :class:`SyntheticLossGenerator` regresses its predicted loss instead).
    """

    prediction_name = "the last synthetic gradient"  # what update()'s target must match, for its error message

    def __init__(self, net: Any, output_dim: int, condition_dim: int) -> None:
        self.net = net
        self.output_dim = output_dim
        self.condition_dim = condition_dim
        self._start_regression()
        self.synthetic_gradient: np.ndarray | None = None
        self.prediction: np.ndarray | None = None

    def predict(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = M(h, c): (batch, output_dim), with no side effects."""
        self._check(h, condition)
        return self.net.predict(self._join(h, condition))

    def forward(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = M(h, c), remembering the input for :meth:`update`."""
        self._check(h, condition)  # a refused batch leaves everything as it was
        self.check_batch_size(h.shape[0])
        joined = self._join(h, condition)
        self.synthetic_gradient = self._net_forward(joined)
        self.input = joined
        self._updated = False
        return self.synthetic_gradient

    def update(self, target: np.ndarray, alpha: float) -> float:
        """One descent step on ``L_M`` of the last forward's prediction against ``target``; returns ``L_M``."""
        prediction = self._to_correct(self.prediction, "update()", "a prediction", "forward(h)")
        argument_checks.check_same_shape(target, "target", prediction, self.prediction_name)
        alpha = argument_checks.check_learning_rate(alpha)
        self._check_not_updated("forward(h)")
        loss, dprediction = regression_loss(prediction, target)
        self._regression_step(self._net_delta(dprediction), alpha)
        return loss

    def _net_forward(self, joined):
        """ĝ for ``joined`` = [h, c]: the net's output, which is also the prediction regressed onto the target."""
        self.prediction = self.net.forward(joined)
        return self.prediction

    def _net_delta(self, dprediction):
        """dL_M/d(the net's output), from dL_M/d(prediction): the same, as the prediction is the net's output."""
        return dprediction

    def _check(self, h, condition):
        self._check_h(h)
        argument_checks.check_condition(condition, self.condition_dim, h.shape[0], "this generator")

    def _check_h(self, h):
        argument_checks.check_batch(h, "h", self.output_dim, width_name="the generator's output_dim")

class _OfTheLayer:
    """``generator.<name>`` is ``generator.net.<name>``, to read and to set (a linear generator is one layer)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, generator: Any, owner: type | None = None) -> Any:
        return self if generator is None else getattr(generator.net, self.name)

    def __set__(self, generator: Any, value: Any) -> None:
        setattr(generator.net, self.name, value)


class LinearGenerator(Generator):
    """The blog's linear generator: ``ĝ = [h, c] @ weights + bias``.

    ``weights`` has shape (output_dim + condition_dim, output_dim): conditioning
    concatenates c (e.g. the labels) to h.  ``init='zeros'`` (the default, as in
    the paper) starts with ĝ = 0, so a fresh DNI layer does not move until its
    generator has learned something; ``init='blog'`` is the blog's random start.
    ``bias_init='pytorch'`` draws the bias as PyTorch's ``nn.Linear`` does, one on h and one on c
    (:func:`generator_net`), so ĝ starts at that bias: koz4k/dni-pytorch's start without hidden layers.
    ``weights``, ``bias`` and ``update_rule`` are those of its one layer, ``net``;
    ``weights_grad`` and ``bias_grad`` are its :attr:`gradients` from the last update.
    """

    weights, bias = _OfTheLayer(), _OfTheLayer()

    def __init__(self, output_dim: int, condition_dim: int = 0, *, init: str = "zeros", bias: bool = True,
                 bias_init: str = "zeros", update_rule: Any = None, seed: int | None = None,
                 rng: np.random.Generator | None = None, dtype: Any = np.float64) -> None:
        output_dim = argument_checks.check_integer(output_dim, "output_dim")
        condition_dim = argument_checks.check_integer(condition_dim, "condition_dim", minimum=0)
        bias_init = argument_checks.check_choice(bias_init, "bias_init", GENERATOR_BIAS_INITS)
        parts = tuple(width for width in (output_dim, condition_dim) if width) if bias_init == "pytorch" else None
        net = Layer(output_dim + condition_dim, output_dim, "identity", bias=bias, init=init, bias_init=bias_init,
                    parts=parts, update_rule=update_rule, seed=seed, rng=rng, dtype=dtype)
        super().__init__(net, output_dim, condition_dim)

    def parameter_jacobians(self, h: np.ndarray, condition: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """dĝ/dθ of each example, keyed as :attr:`parameters`: ``(batch, output_dim, *parameter.shape)``.

        ĝ_i = Σ_a x_a W_ai + b_i with x = [h, c], so dĝ_i/dW_ac = x_a [i = c] and dĝ_i/db_c = [i = c].
        What eligibility traces accumulate (:mod:`sgrad.recurrent.eligibility_traces`).
        """
        self._check(h, condition)
        x = self._join(h, condition)
        identity = np.eye(self.output_dim, dtype=x.dtype)
        jacobians = {"weights": np.einsum("ba,ic->biac", x, identity)}
        if self.bias is not None:
            jacobians["bias"] = np.broadcast_to(identity, (len(x), *identity.shape)).copy()
        return jacobians

    def apply_gradients(self, gradients: dict[str, np.ndarray], alpha: float) -> None:
        """One step of the update rule with ``gradients`` (keyed as :attr:`parameters`, each of its shape)."""
        for name, param in self.parameters.items():
            grad = gradients.get(name) if isinstance(gradients, dict) else None
            if not isinstance(grad, np.ndarray) or grad.shape != param.shape or not np.isfinite(grad).all():
                got = f"shape {grad.shape}" if isinstance(grad, np.ndarray) else repr(type(grad).__name__)
                raise ValueError(f"gradients must map each parameter to a finite array of its shape: {name!r} is "
                                 f"{param.shape}; got {got}")
        alpha = argument_checks.check_learning_rate(alpha)
        self._gradients = {name: gradients[name] for name in self.parameters}
        self.net.weights_grad, self.net.bias_grad = gradients["weights"], gradients.get("bias")
        self.net.update(alpha)

    @property
    def update_rule(self) -> Any:
        return self.net.update_rule

    @property
    def weights_grad(self) -> np.ndarray | None:
        return self.gradients.get("weights")

    @property
    def bias_grad(self) -> np.ndarray | None:
        return self.gradients.get("bias")


class MLPGenerator(Generator):
    """ĝ = MLP([h, c]): hidden Linear→(BatchNorm)→ReLU blocks, then a zero-initialised linear output.

    ``hidden=(1024, 1024), batchnorm=True`` is the generator of the public
    TensorFlow reproduction of the paper's MNIST experiments.  The hidden weights are
    drawn by ``init`` (default He normal) and the output layer's weights start at zero;
    with ``bias_init='zeros'`` (default) so do all biases, and ĝ = 0 at the start, as for
    :class:`LinearGenerator`.  ``init='pytorch', bias_init='pytorch'`` is the start of
    koz4k/dni-pytorch's synthesizer (:func:`generator_net`).
    """

    def __init__(self, output_dim: int, condition_dim: int = 0, *, hidden: Sequence[int] = (1024, 1024),
                 batchnorm: bool = True, init: str = "he", bias_init: str = "zeros", update_rule: Any = None,
                 seed: int | None = None, rng: np.random.Generator | None = None, dtype: Any = np.float64,
                 prediction_dim: int | None = None) -> None:
        output_dim = argument_checks.check_integer(output_dim, "output_dim")
        condition_dim = argument_checks.check_integer(condition_dim, "condition_dim", minimum=0)
        rng = argument_checks.make_rng(seed, rng)
        net = generator_net((output_dim, condition_dim), hidden, prediction_dim or output_dim, init=init,
                            bias_init=bias_init, batchnorm=batchnorm, update_rule=update_rule, rng=rng, dtype=dtype)
        super().__init__(net, output_dim, condition_dim)


class SyntheticLossGenerator(MLPGenerator):
    """Predicts a non-negative loss ``ℓ̂ = softplus(M([h, c]))`` per example, and offers its gradient as ĝ.

    After the variant of the public TensorFlow reproduction: a block descends
    ``ĝ = dL̂/dh`` with ``L̂ = mean over the batch of ℓ̂``, and the generator
    regresses ℓ̂ onto the next block's predicted loss (the top block's onto the
    real per-example loss).  ``forward`` returns ĝ (batch, output_dim) and keeps
    ``predicted_loss`` ℓ̂ (batch, 1); ``update(target, alpha)`` takes a target
    of shape (batch, 1).  ``hidden=()`` gives a linear model.

    The output layer's weights start at zero, so ĝ = 0 at the start, and its bias
    at ``softplus⁻¹(initial_loss)``, so ℓ̂ = ``initial_loss`` for every example:
    give the loss you expect at the start, ln(classes) for a softmax
    cross-entropy (the default, ln 2, is softplus(0)).  A wrong start is not
    harmless: Adam moves the bias by at most about alpha per step, so the
    output weights take up the gap in level too.
    """

    prediction_name = "the last predicted loss"
    _z: np.ndarray | None

    def __init__(self, output_dim: int, condition_dim: int = 0, *, initial_loss: float = float(np.log(2.0)),
                 **options: Any) -> None:
        initial_loss = argument_checks.check_number(initial_loss, "initial_loss", above=0,
                                                    example="2.3026 (ln 10, a uniform guess among 10 classes)")
        super().__init__(output_dim, condition_dim, prediction_dim=1, **options)
        # softplus⁻¹(ℓ) = ℓ + log(1 - exp(-ℓ)), written so that it neither overflows nor loses small ℓ.
        self.net.modules[-1].bias[...] = initial_loss + np.log(-np.expm1(-initial_loss))
        self._z = None

    @property
    def predicted_loss(self) -> np.ndarray | None:
        """ℓ̂ of the last forward pass, (batch, 1): what :meth:`update` regresses onto its target."""
        return self.prediction

    def predict(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = dL̂/dh for h, with no side effects (one forward and backward of a copy of the net)."""
        probe = copy.deepcopy(self)
        return probe.forward(h, condition)

    def _net_forward(self, joined):
        """ĝ = dL̂/dh with ``L̂ = mean over the batch of ℓ̂``, ℓ̂ = softplus(z) and z the net's output."""
        self._z = self.net.forward(joined)
        self.prediction = np.logaddexp(0.0, self._z)  # softplus, without overflow
        dinput = self.net.backward(sigmoid(self._z) / len(joined))  # softplus' = sigmoid
        return dinput[:, :self.output_dim]

    def _net_delta(self, dprediction):
        """dL_M/dz = dL_M/dℓ̂ * softplus'(z)."""
        return dprediction * sigmoid(self._z)


class ConvGenerator(Generator):
    """ĝ = CNN([h, c]) for feature maps h: (batch, channels, height, width); ĝ has the shape of h.

    Hidden Conv→(BatchNorm)→ReLU blocks of ``hidden`` channels (default two of 32), then a
    zero-initialised convolution to ``channels`` outputs; every kernel is ``kernel_size ×
    kernel_size`` (odd) and padded to keep the maps' size.  ``output_dim`` is ``channels``, so it
    matches a conv block's ``output_dim``.  A conditioned generator (cDNI) gets c: (batch,
    condition_dim), e.g. the one-hot labels, broadcast over the maps as ``condition_dim`` extra
    input channels, each constant over its map; what the first layer does with them is
    ``condition``:

    - 'channels' (default): they are more input channels of the first convolution;
    - 'linear': a linear map of c is added at every position of the first convolution's output
      (:class:`~sgrad.nn.conditioned_conv.ConditionedConv2d`), as koz4k/dni-pytorch's MNIST CNN
      example conditions its synthesizer.

    ``init``: 'he' (default: He normal weights, zero biases) or 'pytorch' (PyTorch's defaults,
    U(-1/√fan_in, 1/√fan_in) for weights and biases alike); either way the output convolution's
    weights start at zero, so ĝ starts at its bias: zero for 'he', a constant per channel for 'pytorch'.
    """

    def __init__(self, channels: int, condition_dim: int = 0, *, hidden: Sequence[int] = (32, 32),
                 kernel_size: int = 3, batchnorm: bool = True, condition: str = "channels", init: str = "he",
                 update_rule: Any = None, seed: int | None = None, rng: np.random.Generator | None = None,
                 dtype: Any = np.float64) -> None:
        channels = argument_checks.check_integer(channels, "channels")
        condition_dim = argument_checks.check_integer(condition_dim, "condition_dim", minimum=0)
        kernel_size = argument_checks.check_integer(kernel_size, "kernel_size")
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, so that padding keeps the maps' size (ĝ has the shape of h); "
                             f"got {kernel_size}. Use {kernel_size + 1} or {kernel_size - 1}")
        condition = argument_checks.check_choice(condition, "condition", CONV_CONDITIONING)
        init = argument_checks.check_choice(init, "init", CONV_GENERATOR_INITS)
        batchnorm = argument_checks.check_bool(batchnorm, "batchnorm")
        rng = argument_checks.make_rng(seed, rng)
        hidden = argument_checks.check_widths(hidden, "hidden")
        widths = (channels + condition_dim, *hidden)
        options = {"init": init, "bias_init": "zeros" if init == "he" else "pytorch", "update_rule": update_rule,
                   "rng": rng, "dtype": dtype}
        padding = kernel_size // 2
        # With condition='linear' the first layer sees h alone, and c through a linear map.
        linear = condition == "linear" and condition_dim > 0
        blocks: list[Any] = []
        for a, b in zip(widths[:-1], widths[1:]):
            if linear and not blocks:
                first = ConditionedConv2d(channels, condition_dim, b, kernel_size, padding=padding, bias=not batchnorm,
                                          **options)
                norm = [BatchNorm2d(b, update_rule=update_rule, dtype=dtype)] if batchnorm else []
                blocks.append(Sequential([first, *norm, Activation2d("relu")]))
            else:
                blocks.append(conv_block(a, b, kernel_size, "relu", batchnorm=batchnorm, **options))
        options["init"] = "zeros"
        if linear and not hidden:
            out: Any = ConditionedConv2d(channels, condition_dim, channels, kernel_size, padding=padding, **options)
        else:
            out = Conv2d(widths[-1], channels, kernel_size, padding=padding, **options)
        super().__init__(Sequential(blocks + [out]), channels, condition_dim)

    def _check_h(self, h):
        argument_checks.check_feature_maps(h, "h", self.output_dim, channels_name="the generator's output_dim")

    def _join(self, h, condition):
        """[h, c]: c (batch, condition_dim) broadcast to maps of h's size, as extra channels after h's."""
        if condition is None:
            return h
        batch, _, height, width = h.shape
        return super()._join(h, np.broadcast_to(condition[:, :, None, None], (batch, condition.shape[1], height, width)))
