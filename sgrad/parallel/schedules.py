"""The schedules: what worker k does with batch t, in which order, and what it waits for.

Every schedule runs on the same workers (:mod:`sgrad.parallel.worker`: worker k holds a stage of
consecutive blocks, the top one also the top layer) and the same batches.  Worker k's step t:

``backprop``, locked (as :func:`sgrad.dni.steps.backprop_step`, bit for bit)
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

``dni`` and ``cdni``, unlocked (the DNI step of :mod:`sgrad.dni.decoupled`, in its two halves)
    forward h_k = f_k(h_{k-1}) through the stage and send it up at once; then, block by block, the
    step's second half, :meth:`~sgrad.dni.decoupled.DNIBlock.update_from_synthetic_gradient`: predict ĝ_j = M_j(h_j, c)
    (cDNI: c = the labels), backpropagate it through the block (δ_{j-1}, with the weights before
    the step) and descend on it at once.  The bottom block's δ goes down as the target of the
    generator below; every other δ_{j-1} is the target of M_{j-1} in the same worker, which
    regresses onto it at once (``update_generator``), as M_n of the top stage's last block
    does onto dL/dh_n from the top layer.  The stage's last block below the top gets its targets
    from the worker above: it keeps (h_n, c) of each batch until its target comes, and before it
    predicts batch t its generator regresses onto the targets that have come, waiting only for
    those more than ``staleness`` batches old.  Staleness s of a target: how many later batches
    the generator has predicted for before regressing onto it, at most ``staleness`` (0 for every
    target made inside a worker).  A late target is regressed onto after the generator has run
    once more on the kept (h_n, c) (another forward pass, batch norm's running averages put back).
    With ``staleness=0`` every M_j has regressed onto batch t-1's target before it predicts batch
    t's ĝ, as in :func:`sgrad.dni.steps.dni_step`, and the run is that step's, bit for bit; it is
    unlocked all the same, since h goes up before any of it and the worker above sends δ back
    while this one forwards the next batch.  With ``staleness >= 1`` which targets come late
    depends on the machine's timing, so such runs differ from one another.

``complete`` and ``ccomplete``, completely unlocked (:func:`sgrad.dni.steps.complete_unlock_step`, its numbered lines
taken apart)
    every worker draws batch t itself (the same :class:`~sgrad.training.batches.BatchOrder` as the
    others), so it has x and c (ccomplete: the labels) at once.  Each of its layers above the network's
    bottom takes a synthetic input ĥ = I(x, c) from an input generator the worker holds (line 1):
    the worker above an interface owns that interface's I_k.  So it starts the step at once, waiting for
    no forward pass below it (forward unlocked), and each block descends its ĝ at once (line 2: its
    forward pass, then :meth:`~sgrad.dni.decoupled.DNIBlock.update_from_synthetic_gradient`); the top
    worker runs the top on ĥ_m (lines 3 and 4).  The stage's last block sends its real h_k up, the
    target of I_k above (line 6 there); the stage's bottom block sends δ at ĥ down with ĥ itself, where
    M of the block below regresses its prediction at ĥ onto δ (line 5 there).  Inside a stage both
    targets are the worker's own and are regressed onto at once.  The two that cross workers wait as
    DNI's targets do: a generator regresses onto those that have come before it predicts batch t,
    waiting only for those more than ``staleness`` batches old; a late one is regressed onto after the
    generator has run once more on what was kept for its batch.  With ``staleness=0`` the run is
    ``complete_unlock_step``'s, bit for bit: the worker above waits for h_k of batch t - 1, not of
    batch t, so the two workers still run a step at the same time.

``flush(t)`` lets what is in flight land (delayed gradients, late targets) before a checkpoint
and at the end, so that the state a worker reports is whole.
"""

from typing import Any

import numpy as np

from ..nn.module import running_averages_kept


def forward(worker: Any, layers: list[Any], x: np.ndarray) -> list[np.ndarray]:
    """Every layer's output for x, in order, each remembering what its backward pass needs."""
    hs: list[np.ndarray] = []
    with worker.timeline.record("forward"):
        for layer in layers:
            hs.append(layer.forward(hs[-1] if hs else x))
    return hs


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
        h = forward(w, w.layers, x)[-1]
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
        h = forward(w, w.layers, x)[-1]
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
    """DNI and cDNI: every block descends on its generator's ĝ at once; a generator regresses when its target comes."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.kept: dict[int, tuple] = {}  # batch u -> (h_n, c) of the stage's last block, until its target comes

    def step(self, t: int) -> None:
        w = self.worker
        x, y = w.take_input(t)
        condition = y if w.plan.schedule == "cdni" else None
        hs = forward(w, w.blocks, x)
        if w.is_top:  # the true gradient dL/dh_n at the top: the last block's target
            g = w.top_gradient(forward(w, [w.top], hs[-1])[0], y)
            with w.timeline.record("backward"):
                top_delta = w.top.backward(g)
            with w.timeline.record("update"):
                w.top.update(w.plan.alpha)
        else:
            w.send_up(t, hs[-1], y)  # forward unlocked: h goes up before anything else
        for j, block in enumerate(w.blocks):
            if j == len(w.blocks) - 1 and not w.is_top:
                self.regress_late(through=t - 1 - w.plan.staleness, newest=t - 1)
            with w.timeline.record("dni"):  # update unlocked: ĝ_j now, not dL/dh_j later
                delta, _ = block.update_from_synthetic_gradient(hs[j], condition, input_delta=not (w.is_bottom and j == 0))
            if j == 0:
                w.send_down(t, delta)
            else:
                self.regress(j - 1, delta)
        if w.is_top:
            self.regress(len(w.blocks) - 1, top_delta)
        else:
            self.kept[t] = (hs[-1], condition)

    def regress(self, j: int, target: np.ndarray, *, late: int = 0, again: tuple | None = None) -> None:
        """M_j regresses onto ``target``, ``late`` batches after it predicted for it; ``again``: its (h, c), run again."""
        w = self.worker
        h, condition = again or (None, None)
        with w.timeline.record("update"):
            w.blocks[j].update_generator(target, h=h, condition=condition)
        w.stale_targets[late] = w.stale_targets.get(late, 0) + 1

    def regress_late(self, through: int, newest: int) -> None:
        """The stage's last block's generator regresses onto the targets that have come from above, oldest first.

        It waits for those of batches up to ``through``.  ``newest`` is the last batch it predicted for: its
        forward caches are for that batch until a regression has used them; another batch is run forward again.
        """
        last = len(self.worker.blocks) - 1
        cached: int | None = newest
        for u in sorted(self.kept):
            target = self.worker.take_target(u, block=u <= through)
            if target is None:
                return
            kept = self.kept.pop(u)
            self.regress(last, target, late=newest - u, again=None if u == cached else kept)
            cached = None

    def flush(self, t: int) -> None:
        if not self.worker.is_top:
            self.regress_late(through=t, newest=t)


def synthetic_input(worker: Any, I_k: Any, x: np.ndarray, condition: np.ndarray | None) -> np.ndarray:
    """Line 1 of the complete unlock: a layer's synthetic input ĥ_k = I_k(x, c), (batch, width)."""
    with worker.timeline.record("synthetic input"):
        return I_k.forward(x, condition)


class CompleteUnlock:
    """The complete unlock: every layer above the bottom steps on its synthetic input ĥ = I(x, c), every block on ĝ.

    The calls are :func:`sgrad.dni.steps.complete_unlock_step` 's, numbered as its lines are.
    """

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.kept: dict[int, Any] = {}  # batch u -> c, until δ and ĥ of the stage's last block come from above
        self.batches: dict[int, tuple] = {}  # batch u -> (x, c), until the real h of the stage's input comes from below

    def step(self, t: int) -> None:
        w = self.worker
        x, y = w.take_input(t)  # every worker draws the batch itself: it waits for nothing from below
        condition = y if w.plan.schedule == "ccomplete" else None
        if not w.is_bottom:
            self.regress_inputs_late(through=t - 1 - w.plan.staleness, newest=t - 1)
            self.batches[t] = (x, condition)
        inputs = [x if I_k is None else synthetic_input(w, I_k, x, condition) for I_k in w.input_generators]
        with w.timeline.record("forward"):
            hs = [block.forward(h_in) for block, h_in in zip(w.blocks, inputs)]  # 2. h_k = f_k(ĥ_{k-1}), ...
        if w.is_top:
            g = w.top_gradient(forward(w, [w.top], inputs[-1])[0], y)  # 3. the top on ĥ_m
            with w.timeline.record("backward"):
                top_delta = w.top.backward(g)  # 4. δ_m at ĥ_m
            with w.timeline.record("update"):
                w.top.update(w.plan.alpha)
        else:
            w.send_up(t, hs[-1], y)  # the real h_k: the target of I_k above
        for j, block in enumerate(w.blocks):
            if j == len(w.blocks) - 1 and not w.is_top:
                self.regress_gradients_late(through=t - 1 - w.plan.staleness, newest=t - 1)
            with w.timeline.record("dni"):  # 2. ... ĝ_k = M_k(h_k, c); θ_k steps on ĝ_k
                delta, _ = block.update_from_synthetic_gradient(hs[j], condition,
                                                                input_delta=not (w.is_bottom and j == 0))
            if j == 0:
                w.send_down(t, delta, synthetic_input=None if w.is_bottom else inputs[0])
            else:
                self.regress(w.blocks[j - 1], delta, inputs[j], condition)  # 5. M_k(ĥ_k, c) onto δ_k
        if w.is_top:
            self.regress(w.blocks[-1], top_delta, inputs[-1], condition)
        else:
            self.kept[t] = condition
        for j in range(1, len(w.input_generators)):
            self.regress_input(j, hs[j - 1])  # 6. I_k(x, c) onto h_k

    def regress(self, block: Any, target: np.ndarray, at: np.ndarray, condition: Any, *, late: int = 0) -> None:
        """Line 5: M of ``block`` regresses its prediction at the synthetic input ``at`` onto ``target``."""
        with self.worker.timeline.record("update"):
            block.update_generator(target, h=at, condition=condition)
        self.worker.stale_targets[late] = self.worker.stale_targets.get(late, 0) + 1

    def regress_input(self, j: int, h: np.ndarray, *, late: int = 0, again: tuple | None = None) -> None:
        """Line 6: the input generator of the stage's layer j regresses onto the real h; ``again``: its batch's (x, c)."""
        w = self.worker
        x, condition = again or (None, None)
        with w.timeline.record("update"):
            w.input_generators[j].update(h, w.plan.input_alpha, x=x, condition=condition)
        w.stale_targets[late] = w.stale_targets.get(late, 0) + 1

    def regress_gradients_late(self, through: int, newest: int) -> None:
        """The stage's last block's M regresses onto the δ (and ĥ) that have come from above, oldest first.

        It waits for those of batches up to ``through``; ``newest`` is the last batch it predicted for.  It
        predicts once more, at ĥ, for every target, as line 5 does.
        """
        w = self.worker
        for u in sorted(self.kept):
            target = w.take_target(u, block=u <= through)
            if target is None:
                return
            self.regress(w.blocks[-1], target, w.take_synthetic_input(u), self.kept.pop(u), late=newest - u)

    def regress_inputs_late(self, through: int, newest: int) -> None:
        """The stage's bottom input generator regresses onto the real h that have come from below, oldest first.

        It waits for those of batches up to ``through``.  ``newest`` is the last batch it predicted for: its
        forward caches are for that batch until a regression has used them; another batch is run forward again.
        """
        cached: int | None = newest
        for u in sorted(self.batches):
            h = self.worker.take_activation(u, block=u <= through)
            if h is None:
                return
            kept = self.batches.pop(u)
            self.regress_input(0, h, late=newest - u, again=None if u == cached else kept)
            cached = None

    def flush(self, t: int) -> None:
        if not self.worker.is_top:
            self.regress_gradients_late(through=t, newest=t)
        if not self.worker.is_bottom:
            self.regress_inputs_late(through=t, newest=t)


SCHEDULES: dict[str, Any] = {"backprop": Backprop, "pipelined-backprop": PipelinedBackprop, "dni": Decoupled,
                             "cdni": Decoupled, "complete": CompleteUnlock, "ccomplete": CompleteUnlock}
