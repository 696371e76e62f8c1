"""Pure, vectorized kernels: the maths of a dense layer, a linear map, batch norm, one recurrent step, a convolution
and max pooling.

No state, no printing, no checks: the classes in :mod:`sgrad.nn.layers`,
:mod:`sgrad.nn.batchnorm`, :mod:`sgrad.nn.blocks`, :mod:`sgrad.recurrent.layers` and :mod:`sgrad.nn.conv` check
their inputs, hold state and call these.  Shapes use ``batch`` for the number of examples.  Each
function is written as its formula reads; the few that a training step runs
faster another way have a twin in :mod:`sgrad.nn.fast_kernels`, tested against these.
"""

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .nonlinearities import sigmoid

Nonlinearity = Callable[[np.ndarray], np.ndarray]


def linear_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Affine map ``z = x W + b``.

    x: (batch, in); weights W: (in, out); bias b: (out,) or None.  Returns z: (batch, out).
    """
    z = x @ weights
    if bias is not None:
        z += bias
    return z


def linear_backward(dz: np.ndarray, x: np.ndarray, weights: np.ndarray, with_bias: bool,
                    input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward pass of :func:`linear_forward`: ``(dL/dx, dL/dW, dL/db)``.

    dz: (batch, out), the gradient dL/dz.  ``dL/dx = dz Wᵀ`` (batch, in),
    ``dL/dW = xᵀ dz`` (in, out), ``dL/db = sum over the batch of dz`` (out,),
    None without a bias.  Gradients are summed over the batch: the loss decides
    any averaging.  ``input_delta=False`` skips dL/dx (None) when nothing below needs it.
    """
    dx = dz @ weights.T if input_delta else None
    dweights = x.T @ dz
    dbias = dz.sum(axis=0) if with_bias else None
    return dx, dweights, dbias


def dense_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, nonlin: Nonlinearity) -> np.ndarray:
    """A blog-style layer: ``h = f(x W + b)``.  Returns h: (batch, out)."""
    return nonlin(linear_forward(x, weights, bias))


def dense_backward(dh: np.ndarray, x: np.ndarray, h: np.ndarray, weights: np.ndarray, nonlin_deriv: Nonlinearity,
                   with_bias: bool, input_delta: bool = True
                   ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]:
    """Backward pass of :func:`dense_forward`: ``(dL/dx, dL/dW, dL/db, dL/dz)``.

    dh: (batch, out), the gradient dL/dh arriving at the layer's output h.
    ``dL/dz = dh * f'(z)``, with f' computed from the output h (the blog's
    ``weight_output_delta``); then :func:`linear_backward`, with the weights as
    given (the pre-update weights, in a training step).
    """
    dz = dh * nonlin_deriv(h)
    dx, dweights, dbias = linear_backward(dz, x, weights, with_bias, input_delta)
    return dx, dweights, dbias, dz


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode batch norm (Ioffe & Szegedy, 2015): ``(out, x_hat, inv_std, mean, var)``.

    x: (batch, features).  Each feature is normalised with the batch's own
    statistics: ``x_hat = (x - mean) / sqrt(var + eps)``, ``out = gamma * x_hat + beta``.
    """
    mean = x.mean(axis=0)
    var = ((x - mean) ** 2).mean(axis=0)
    inv_std = 1.0 / np.sqrt(var + eps)
    x_hat = (x - mean) * inv_std
    return gamma * x_hat + beta, x_hat, inv_std, mean, var


def batchnorm_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`batchnorm_forward`: ``(dL/dx, dL/dgamma, dL/dbeta)``.

    The mean and the variance depend on every row, hence the two mean terms::

        dx_hat = dout * gamma
        dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / std
    """
    dbeta = dout.sum(axis=0)
    dgamma = (dout * x_hat).sum(axis=0)
    dx_hat = dout * gamma
    dx = (dx_hat - dx_hat.mean(axis=0) - x_hat * (dx_hat * x_hat).mean(axis=0)) * inv_std
    return dx, dgamma, dbeta


def batchnorm_eval_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of evaluation-mode batch norm, ``out = gamma * (x - running_mean) * inv_std + beta``.

    The running statistics are constants, so it is an elementwise affine map:
    ``dL/dx = dout * gamma * inv_std``.  Returns ``(dL/dx, dL/dgamma, dL/dbeta)``.
    """
    return dout * (gamma * inv_std), (dout * x_hat).sum(axis=0), dout.sum(axis=0)


# ---------------------------------------------------------------- recurrent steps
#
# One step of a recurrent layer (sgrad.recurrent.layers) maps the input x_t and the carried state to the next state,
# with the same weights at every step.  Both cells start from the pre-activation z_t = x_t W_x + h_{t-1} W_h + b.
# Each step's backward returns dL/dz_t and the gradient for the state before it; the gradients of x_t, W_x, W_h
# and b follow from dz_t as for any linear map (linear_backward), summed over the steps by the layer.


def rnn_step_forward(x_t: np.ndarray, h_prev: np.ndarray, weights_x: np.ndarray, weights_h: np.ndarray,
                     bias: np.ndarray) -> np.ndarray:
    """One step of a tanh RNN: ``h_t = tanh(x_t W_x + h_{t-1} W_h + b)``.

    x_t: (batch, input_dim); h_prev h_{t-1}: (batch, hidden); weights_x W_x: (input_dim, hidden);
    weights_h W_h: (hidden, hidden); bias b: (hidden,).  Returns h_t: (batch, hidden).
    """
    return np.tanh(x_t @ weights_x + h_prev @ weights_h + bias)


def rnn_step_backward(dh_t: np.ndarray, h_t: np.ndarray, weights_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Backward of :func:`rnn_step_forward`: ``(dL/dz_t, dL/dh_{t-1})``, both (batch, hidden).

    dh_t: (batch, hidden), the whole of dL/dh_t: the loss at step t plus what came back from step t+1::

        dz_t = dh_t * (1 - h_t**2)          tanh' from its output h_t
        dh_{t-1} = dz_t W_hᵀ
    """
    dz = dh_t * (1.0 - h_t * h_t)
    return dz, dz @ weights_h.T


def lstm_step_forward(x_t: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray, weights_x: np.ndarray,
                      weights_h: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of an LSTM: ``(h_t, c_t, gates)``.

    x_t: (batch, input_dim); h_prev h_{t-1} and c_prev c_{t-1}: (batch, hidden); weights_x W_x:
    (input_dim, 4 hidden); weights_h W_h: (hidden, 4 hidden); bias b: (4 hidden,).  The four blocks
    of columns are the gates in PyTorch's order, input i, forget f, candidate g, output o::

        z_t = x_t W_x + h_{t-1} W_h + b                          [z_i, z_f, z_g, z_o]
        i = sigmoid(z_i), f = sigmoid(z_f), g = tanh(z_g), o = sigmoid(z_o)
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    Returns h_t and c_t: (batch, hidden), and gates: (batch, 4 hidden), [i, f, g, o] side by side
    (what :func:`lstm_step_backward` needs).
    """
    hidden = h_prev.shape[1]
    z = x_t @ weights_x + h_prev @ weights_h + bias
    i = sigmoid(z[:, :hidden])
    f = sigmoid(z[:, hidden:2 * hidden])
    g = np.tanh(z[:, 2 * hidden:3 * hidden])
    o = sigmoid(z[:, 3 * hidden:])
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    return h, c, np.concatenate([i, f, g, o], axis=1)


def lstm_step_backward(dh_t: np.ndarray, dc_t: np.ndarray, c_prev: np.ndarray, c_t: np.ndarray, gates: np.ndarray,
                       weights_h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`lstm_step_forward`: ``(dL/dz_t, dL/dh_{t-1}, dL/dc_{t-1})``.

    dh_t, dc_t: (batch, hidden), the gradients arriving at h_t (the loss at step t plus what came back
    from step t+1) and at c_t (from step t+1).  c_t reaches the loss directly and through h_t::

        dc = dc_t + dh_t * o * (1 - tanh(c_t)**2)
        dz_i = dc * g * i * (1 - i)               dz_f = dc * c_{t-1} * f * (1 - f)
        dz_g = dc * i * (1 - g**2)                dz_o = dh_t * tanh(c_t) * o * (1 - o)
        dh_{t-1} = dz_t W_hᵀ                      dc_{t-1} = dc * f

    Returns dz_t: (batch, 4 hidden), [dz_i, dz_f, dz_g, dz_o] side by side, and dh_{t-1}, dc_{t-1}: (batch, hidden).
    """
    hidden = dh_t.shape[1]
    i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    tanh_c = np.tanh(c_t)
    dc = dc_t + dh_t * o * (1.0 - tanh_c * tanh_c)
    dz = np.concatenate([dc * g * i * (1.0 - i), dc * c_prev * f * (1.0 - f), dc * i * (1.0 - g * g),
                         dh_t * tanh_c * o * (1.0 - o)], axis=1)
    return dz, dz @ weights_h.T, dc * f


# ---------------------------------------------------------------- convolution and pooling
#
# Feature maps are (batch, channels, height, width), PyTorch's layout.  A k_h × k_w window slides over the input,
# padded with `padding` on every side, in steps of `stride`: output position (y, x) reads the window whose top-left
# corner is at (stride y, stride x) of the padded input, so the output is H_out × W_out (conv_output_size).
# Convolution and pooling both read the input through sliding_windows, a strided view with one window per output
# position, and send gradients back through its adjoint, sum_windows.  Inside, the channels are the last axis in
# memory: a window is then a few runs of contiguous channels, which keeps the im2col copy and the scatter-add back
# fast.  The arrays returned are (batch, channels, height, width) all the same (views of channels-last memory).


def conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Positions of a window of ``kernel`` along an axis of ``size``: ``(size + 2 padding - kernel) // stride + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


def sliding_windows(x: np.ndarray, kernel: tuple[int, int], stride: int, padding: int,
                    fill: float = 0.0) -> np.ndarray:
    """Every window of x, without copying x (but for the padding): (batch, H_out, W_out, k_h, k_w, channels).

    x: (batch, channels, height, width), padded with ``fill`` on every side (0 for a
    convolution, -inf for max pooling).  ``windows[n, y, x, i, j, c]`` is
    ``x_pad[n, c, stride y + i, stride x + j]``.
    """
    channels_last = x.transpose(0, 2, 3, 1)
    if padding:
        channels_last = np.pad(channels_last, ((0, 0), (padding, padding), (padding, padding), (0, 0)),
                               constant_values=fill)
    windows = sliding_window_view(channels_last, kernel, axis=(1, 2))  # (batch, H', W', channels, k_h, k_w)
    return windows[:, ::stride, ::stride].transpose(0, 1, 2, 4, 5, 3)


def sum_windows(d_windows: np.ndarray, input_shape: tuple[int, ...], stride: int, padding: int) -> np.ndarray:
    """The adjoint of :func:`sliding_windows`: add each window's gradient back where it was read.  (batch, C, H, W).

    d_windows: (batch, H_out, W_out, k_h, k_w, channels); input_shape: (batch, channels, height, width).
    Windows overlap when stride < kernel, so a pixel collects from up to k_h k_w windows: a
    scatter-add.  It runs as one vectorized add per kernel offset (i, j), over the whole batch
    and every window at once, so the loop turns k_h k_w times (9 for a 3×3 kernel), never once
    per example or position.  (One strided write cannot add overlapping windows together;
    ``np.add.at`` can, with an index array per axis, but it reads less plainly and ran 17 times
    slower on the maps of a 5×5 convolution.)
    The gradient that lands on the padding is dropped.
    """
    batch, channels, height, width = input_shape
    _, out_height, out_width, kernel_height, kernel_width, _ = d_windows.shape
    d_padded = np.zeros((batch, height + 2 * padding, width + 2 * padding, channels), dtype=d_windows.dtype)
    for i in range(kernel_height):
        for j in range(kernel_width):
            d_padded[:, i:i + stride * out_height:stride, j:j + stride * out_width:stride] += d_windows[:, :, :, i, j]
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)


def _weight_matrix(weights: np.ndarray) -> np.ndarray:
    """W (out_channels, in_channels, k_h, k_w) as W_col (out_channels, k_h k_w in_channels), in the windows' order."""
    return weights.transpose(0, 2, 3, 1).reshape(weights.shape[0], -1)


def conv2d_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, stride: int, padding: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A 2-D convolution (PyTorch's ``conv2d``, a cross-correlation) as one matrix product: ``(z, X_col)``.

    x: (batch, in_channels, height, width); weights W: (out_channels, in_channels, k_h, k_w);
    bias b: (out_channels,) or None::

        z[n, o, y, x] = b[o] + sum over c, i, j of W[o, c, i, j] * x_pad[n, c, stride y + i, stride x + j]

    Every window, flattened, is one row of the im2col matrix X_col: (batch H_out W_out, k_h k_w in_channels);
    then ``Z = X_col W_colᵀ + b``, one row per output position.  Returns z: (batch, out_channels, H_out, W_out)
    and X_col, which the backward pass needs.
    """
    windows = sliding_windows(x, weights.shape[2:], stride, padding)
    batch, out_height, out_width = windows.shape[:3]
    columns = windows.reshape(batch * out_height * out_width, -1)  # the im2col copy
    z = columns @ _weight_matrix(weights).T
    if bias is not None:
        z += bias
    return z.reshape(batch, out_height, out_width, -1).transpose(0, 3, 1, 2), columns


def conv2d_backward(dz: np.ndarray, columns: np.ndarray, input_shape: tuple[int, ...], weights: np.ndarray,
                    stride: int, padding: int, with_bias: bool, input_delta: bool = True
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward pass of :func:`conv2d_forward`: ``(dL/dx, dL/dW, dL/db)``, as for a linear map on the rows of X_col.

    dz: (batch, out_channels, H_out, W_out), the gradient dL/dz; columns: X_col from the forward
    pass; input_shape: the shape of x.  With dZ the rows of dz, (batch H_out W_out, out_channels)::

        dL/dW_col = dZᵀ X_col        dL/db = sum of the rows of dZ        dL/dX_col = dZ W_col

    and dL/dx adds each row of dL/dX_col back onto the window it came from (:func:`sum_windows`).
    Summed over the batch, not averaged.  ``input_delta=False`` skips dL/dx (None); ``with_bias=False``
    gives None for dL/db.
    """
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    batch, _, out_height, out_width = dz.shape
    rows = dz.transpose(0, 2, 3, 1).reshape(-1, out_channels)
    d_weights = (rows.T @ columns).reshape(out_channels, kernel_height, kernel_width, in_channels)
    d_weights = np.ascontiguousarray(d_weights.transpose(0, 3, 1, 2))  # back to W's (out, in, k_h, k_w)
    d_bias = rows.sum(axis=0) if with_bias else None
    if not input_delta:
        return None, d_weights, d_bias
    d_windows = (rows @ _weight_matrix(weights)).reshape(batch, out_height, out_width, kernel_height, kernel_width,
                                                         in_channels)
    return sum_windows(d_windows, input_shape, stride, padding), d_weights, d_bias


def maxpool2d_forward(x: np.ndarray, kernel: tuple[int, int], stride: int, padding: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling: each output is the largest value of its window.  ``(out, argmax)``.

    x: (batch, channels, height, width), padded with -inf (padding never wins).  Returns out:
    (batch, channels, H_out, W_out), and argmax: (batch, H_out, W_out, channels), the position of each
    window's maximum among its k_h k_w values (the first, in a tie), which the backward pass needs.
    """
    windows = sliding_windows(x, kernel, stride, padding, fill=-np.inf)
    flat = windows.reshape(*windows.shape[:3], -1, windows.shape[5])  # (batch, H_out, W_out, k_h k_w, channels)
    argmax = flat.argmax(axis=3)
    out = np.take_along_axis(flat, argmax[:, :, :, None], axis=3)[:, :, :, 0]
    return out.transpose(0, 3, 1, 2), argmax


def maxpool2d_backward(dout: np.ndarray, argmax: np.ndarray, input_shape: tuple[int, ...], kernel: tuple[int, int],
                       stride: int, padding: int) -> np.ndarray:
    """Backward of :func:`maxpool2d_forward`: dL/dx, (batch, channels, height, width).

    Each window's gradient dout (batch, channels, H_out, W_out) goes to the input that was its
    maximum, and nowhere else; where windows overlap, a pixel collects from every window it won.
    """
    d_flat = np.zeros((*argmax.shape[:3], kernel[0] * kernel[1], argmax.shape[3]), dtype=dout.dtype)
    np.put_along_axis(d_flat, argmax[:, :, :, None], dout.transpose(0, 2, 3, 1)[:, :, :, None], axis=3)
    return sum_windows(d_flat.reshape(*argmax.shape[:3], *kernel, argmax.shape[3]), input_shape, stride, padding)
