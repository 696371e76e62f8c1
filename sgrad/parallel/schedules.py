"""The schedules: what worker k does with batch t, in which order, and what it waits for.

Every schedule runs on the same workers (:mod:`sgrad.parallel.worker`: worker k holds a stage of
consecutive blocks, the top one also the top layer) and the same batches.  Worker k's step t:

``backprop``, locked (as :func:`sgrad.steps.backprop_step`, bit for bit)
    forward h_k = f_k(h_{k-1}) and send it up; wait for g_k = dL/dh_k from above (the top
    computes it from the loss); backpropagate it through the stage, each layer taking its
    descent step as soon as it has passed its delta down; send g_{k-1} down.  While the workers
    above run, worker k waits: the update and backward locks.

``pipelined-backprop``: delayed gradients (DDG, Huo et al. 2018, "Decoupled parallel backpropagation
with convergence guarantee")
    forward batch t and send h_k up at once, then backpropagate the gradient of an earlier batch,
    t - d_k, with d_k = K - 1 - k (the top: 0, its own batch).  That gradient left the worker above
    one step ago, so no worker waits in the steady state.  The stage's caches hold batch t by then,
    so it runs its forward pass on the input it kept for batch t - d_k once more (re-materialisation,
    as GPipe does; batch norm's running averages are put back, so a batch counts in them once),
    with its current weights: the local Jacobian is today's, only g_k is d_k steps stale.  The
    paper's DDG backpropagates through the weights of the earlier step instead; sgrad's modules
    keep one forward pass, so this is the variant they allow.
    Why DDG and not GPipe's micro-batches: both leave every worker's batch whole here, so batch
    norm normalises over the same 256 rows as backprop and DNI (GPipe's micro-batches would
    normalise over 256/M rows: another model) and the matrix products keep their size; and DDG
    has no pipeline bubble, so it is the stronger rival for DNI's throughput.  Its price: one more
    forward pass per step below the top, and gradients up to K - 1 steps stale.

``dni`` and ``cdni``, unlocked
    forward h_k = f_k(h_{k-1}) and send it up at once; let each generator M_j of the stage regress
    onto the targets δ_j that have come (it waits only for those more than ``staleness`` batches
    old); predict ĝ_j = M_j(h_j, c) (cDNI: c = the labels); backpropagate ĝ_j through the block
    (δ_{j-1}, with the weights before the step) and descend on it at once; send the bottom
    block's δ down as the target of the generator below.  A target comes back when the worker
    above has done the same with the batch; the generator regresses onto it with the
    activations it kept for that batch.  Staleness s of a target: how many later batches the
    generator has predicted for before regressing onto it, at most ``staleness`` (a worker's
    inner blocks and the top stage's last block get theirs at once: s = 0).
    With ``staleness=0`` M_j has regressed onto batch t-1's target before it predicts batch t's
    ĝ, as in :func:`sgrad.steps.dni_step`, and the run is that step's, bit for bit; it is
    unlocked all the same, since h_k goes up before any of it and the worker above sends δ back
    while this one forwards the next batch.  With ``staleness >= 1`` a worker goes on without a
    late target, and regresses onto it when it comes after running the generator once more on
    the kept (h_j, c) (another forward pass, batch norm's running averages put back); which
    targets come late depends on the machine's timing, so such runs differ from one another.

``flush(t)`` lets what is in flight land (delayed gradients, late targets) before a checkpoint
and at the end, so that the state a worker reports is whole.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def running_averages_kept(*modules: Any) -> Iterator[None]:
    """Run the body (a forward pass that only rebuilds what backward needs), then put back every running average."""
    saved = [(array, array.copy()) for module in modules for _, part in module.submodules()
             for array in part.buffers().values()]
    yield
    for array, before in saved:
        array[...] = before


def forward(worker: Any, layers: list[Any], x: np.ndarray) -> np.ndarray:
    """``layers``' output for x, remembering what their backward passes need."""
    with worker.timeline.record("forward"):
        for layer in layers:
            x = layer.forward(x)
    return x


def backward_and_update(worker: Any, delta: np.ndarray, t: int) -> None:
    """Backpropagate dL/dh through the stage, top first; each layer steps as soon as it has passed its delta down.

    The stage's input delta goes to the worker below as soon as it is computed, before the bottom layer's step.
    """
    for k in range(len(worker.layers) - 1, -1, -1):
        with worker.timeline.record("backward"):
            delta = worker.layers[k].backward(delta, input_delta=not (worker.is_bottom and k == 0))
        if k == 0:
            worker.send_down(t, delta)
        with worker.timeline.record("update"):
            worker.layers[k].update(worker.plan.alpha)


class Backprop:
    """Locked backprop: a batch goes all the way up and down before the next starts."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def step(self, t: int) -> None:
        w = self.worker
        x, y = w.take_input(t)
        h = forward(w, w.layers, x)
        if w.is_top:
            delta = w.top_gradient(h, y)
        else:
            w.send_up(t, h, y)
            delta = w.take_target(t)  # the lock: nothing to do until the workers above are done
        backward_and_update(w, delta, t)

    def flush(self, t: int) -> None:
        """Nothing is in flight after a locked step."""


class PipelinedBackprop:
    """Delayed gradients (DDG): worker k backpropagates batch t - d_k, d_k = K - 1 - k, after forwarding batch t."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.delay = worker.count - 1 - worker.index
        self.inputs: dict[int, np.ndarray] = {}  # batch -> the stage's input, kept for its backward pass

    def step(self, t: int) -> None:
        w = self.worker
        x, y = w.take_input(t)
        h = forward(w, w.layers, x)
        if w.is_top:
            backward_and_update(w, w.top_gradient(h, y), t)
            return
        w.send_up(t, h, y)
        self.inputs[t] = x
        if t - self.delay in self.inputs:
            self.backward(t - self.delay)

    def backward(self, u: int) -> None:
        """Batch u's delayed gradient, through the stage's current weights."""
        w = self.worker
        delta = w.take_target(u)
        with running_averages_kept(*w.layers):
            forward(w, w.layers, self.inputs.pop(u))  # re-materialise batch u's caches
        backward_and_update(w, delta, u)

    def flush(self, t: int) -> None:
        for u in sorted(self.inputs):
            self.backward(u)


class Decoupled:
    """DNI and cDNI: every block descends on its generator's ĝ at once; generators regress when targets come."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        blocks = len(worker.blocks)
        self.kept: list[dict[int, tuple]] = [{} for _ in range(blocks)]  # batch u -> (h_j, c) until M_j regresses
        self.targets: list[dict[int, np.ndarray]] = [{} for _ in range(blocks)]  # δ_j made inside this worker
        self.newest = [0] * blocks  # the last batch M_j predicted for
        self.cached: list[int | None] = [None] * blocks  # the batch M_j's forward caches are for (None: used up)

    def step(self, t: int) -> None:
        w = self.worker
        x, y = w.take_input(t)
        condition = y if w.plan.schedule == "cdni" else None
        hs = [x]
        with w.timeline.record("forward"):
            for block in w.blocks:
                hs.append(block.forward(hs[-1]))
        if w.is_top:  # the true gradient at the top: the last block's target, at once
            g = w.top_gradient(forward(w, [w.top], hs[-1]), y)
            with w.timeline.record("backward"):
                self.targets[-1][t] = w.top.backward(g)
            with w.timeline.record("update"):
                w.top.update(w.plan.alpha)
        else:
            w.send_up(t, hs[-1], y)  # forward unlocked: the output goes up before anything else
        for j, block in enumerate(w.blocks):
            self.regress(j, through=t - 1 - w.plan.staleness)
            with w.timeline.record("forward"):
                g_hat = block.generator.forward(hs[j + 1], condition)  # ĝ_j = M_j(h_j, c)
            self.kept[j][t] = (hs[j + 1], condition)
            self.newest[j] = self.cached[j] = t
            with w.timeline.record("backward"):
                delta = block.backward(g_hat, input_delta=not (w.is_bottom and j == 0))  # δ_{j-1}
            if j > 0:
                self.targets[j - 1][t] = delta
            else:
                w.send_down(t, delta)
            with w.timeline.record("update"):
                block.update(block.alpha)  # update unlocked: ĝ_j now, not dL/dh_j later

    def regress(self, j: int, through: int) -> None:
        """M_j regresses onto the targets that have come, oldest first, waiting for those of batches up to ``through``."""
        w = self.worker
        generator = w.blocks[j].generator
        for u in sorted(self.kept[j]):
            target = self.target(j, u, wait=u <= through)
            if target is None:
                return
            h, condition = self.kept[j].pop(u)
            if self.cached[j] != u:  # M_j has predicted for a later batch since: its forward pass for u, again
                with running_averages_kept(generator), w.timeline.record("forward"):
                    generator.forward(h, condition)
            with w.timeline.record("update"):
                generator.update(target, w.blocks[j].generator_alpha)
            self.cached[j] = None
            lateness = self.newest[j] - u
            w.stale_targets[lateness] = w.stale_targets.get(lateness, 0) + 1

    def target(self, j: int, u: int, *, wait: bool) -> np.ndarray | None:
        """δ_j for batch u: from the worker above for the stage's last block (below the top), else made here."""
        w = self.worker
        if j == len(w.blocks) - 1 and not w.is_top:
            return w.take_target(u, block=wait)
        return self.targets[j].pop(u)

    def flush(self, t: int) -> None:
        for j in range(len(self.worker.blocks)):
            self.regress(j, through=t)


SCHEDULES: dict[str, Any] = {"backprop": Backprop, "pipelined-backprop": PipelinedBackprop, "dni": Decoupled,
                             "cdni": Decoupled}
