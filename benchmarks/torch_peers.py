"""The benchmark's peer: the same MNIST nets and training steps in PyTorch, CPU eager mode.

Only ``benchmarks/performance.py`` imports this file, and only when PyTorch is
installed; nothing in sgrad needs it.  Each builder returns ``step(x, y)``, one
training step on x: (batch, 784) and one-hot y: (batch, 10), doing what the
matching sgrad step does and nothing more: PyTorch's autograd skips the input
delta of a layer whose input is data (sgrad's layers always return it).
"""

import torch
from torch import nn
from torch.nn import functional


def hidden_blocks(depth, width, batchnorm, input_dim=784):
    """The paper's hidden blocks: (Linear→BatchNorm→ReLU) × (depth - 1), as a list of nn.Sequential."""
    widths = (input_dim,) + (width,) * (depth - 1)
    blocks = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        parts = [nn.Linear(fan_in, fan_out, bias=not batchnorm)]
        if batchnorm:
            parts.append(nn.BatchNorm1d(fan_out))
        parts.append(nn.ReLU())
        blocks.append(nn.Sequential(*parts))
    return blocks


def generator(width, condition_dim, hidden):
    """ĝ = M([h, c]): hidden Linear→BatchNorm→ReLU layers, then a zero-initialised linear output."""
    widths = (width + condition_dim, *hidden)
    parts = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        parts += [nn.Linear(fan_in, fan_out, bias=False), nn.BatchNorm1d(fan_out), nn.ReLU()]
    out = nn.Linear(widths[-1], width)
    nn.init.zeros_(out.weight)
    nn.init.zeros_(out.bias)
    return nn.Sequential(*parts, out)


def _optimizer(module, update_rule, lr):
    if update_rule == "sgd":
        return torch.optim.SGD(module.parameters(), lr=lr)
    return torch.optim.Adam(module.parameters(), lr=lr)


def backprop_step(*, batchnorm, dtype, update_rule="sgd", lr=1e-3, depth=3, width=256):
    """One backprop step of the paper's net: forward, softmax cross-entropy (batch mean), backward, update."""
    net = nn.Sequential(*hidden_blocks(depth, width, batchnorm), nn.Linear(width, 10)).to(dtype)
    optimizer = _optimizer(net, update_rule, lr)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def dni_step(*, conditioned, generator_hidden, dtype, update_rule="sgd", lr=1e-3, depth=3, width=256):
    """One decoupled step, as :func:`sgrad.dni.steps.dni_step` with bootstrapped targets.

    Block k: h_k = block(h_{k-1}); ĝ_k = M_k(h_k, c); descend on ĝ_k at once and
    keep ĝ_k backpropagated through the block (pre-update weights) as M_{k-1}'s
    target.  The top layer alone sees the loss.  Then every generator takes one
    step of ``1/(2 batch) * sum((ĝ_k - target_k)**2)``.
    """
    blocks = [b.to(dtype) for b in hidden_blocks(depth, width, batchnorm=True)]
    generators = [generator(width, 10 if conditioned else 0, generator_hidden).to(dtype) for _ in blocks]
    top = nn.Linear(width, 10).to(dtype)
    block_optimizers = [_optimizer(b, update_rule, lr) for b in blocks]
    generator_optimizers = [_optimizer(g, update_rule, lr) for g in generators]
    top_optimizer = _optimizer(top, update_rule, lr)

    def step(x, y):
        h, deltas, predictions = x, [], []
        for k, (block, gen, optimizer) in enumerate(zip(blocks, generators, block_optimizers)):
            block_input = h.detach().requires_grad_(k > 0)  # the bottom block's input delta is never used
            h = block(block_input)
            generator_input = torch.cat([h.detach(), y], dim=1) if conditioned else h.detach()
            prediction = gen(generator_input)
            optimizer.zero_grad(set_to_none=True)
            h.backward(prediction.detach())
            optimizer.step()
            deltas.append(block_input.grad)
            predictions.append(prediction)
        top_input = h.detach().requires_grad_(True)
        loss = functional.cross_entropy(top(top_input), y)
        top_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        top_optimizer.step()
        targets = deltas[1:] + [top_input.grad]
        for prediction, target, optimizer in zip(predictions, targets, generator_optimizers):
            optimizer.zero_grad(set_to_none=True)
            (0.5 * ((prediction - target) ** 2).sum() / len(x)).backward()
            optimizer.step()
        return loss

    return step
