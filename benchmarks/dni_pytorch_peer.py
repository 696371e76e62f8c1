"""The peer koz4k/dni-pytorch's MNIST examples, run as its authors wrote them, beside ``sgrad paper``.

The peer's code is never part of sgrad: fetch it yourself (https://github.com/koz4k/dni-pytorch) and make it a
Python environment of its own with PyTorch and NumPy (``python3 -m venv venv-torch; venv-torch/bin/pip install
torch numpy``; torchvision is not needed).  Then::

    python benchmarks/dni_pytorch_peer.py accuracy --peer PATH --peer-python VENV/bin/python [--example mlp] \\
        --methods backprop,dni,cdni --seeds 0,1,2 [--iterations 5000 | --epochs 10] [--data mnist.npz] [--out folder]
    python benchmarks/dni_pytorch_peer.py time --peer PATH --peer-python VENV/bin/python [--example mlp] \\
        --methods dni,cdni [--sgrad-setting peer --sgrad-setting "peer, every block"] [--out record.json]

``--peer`` (or ``$DNI_PYTORCH``) is the peer's folder (the one holding ``dni.py``); ``--peer-python`` (or
``$DNI_PYTORCH_PYTHON``) the interpreter of its environment.  MNIST comes from ``--data``, else
``$SGRAD_DATA_DIR/mnist.npz``.

The examples (``--example``) and their methods (``--methods``), each method the example's own flags:

- ``mlp``, ``examples/mnist-mlp/main.py``: 784-256-256-10 with batch norm, one ``BackwardInterface`` after the
  second hidden layer's batch norm.  ``backprop`` (no flag), ``dni`` (``--dni``), ``cdni`` (``--dni --context``).
  Its budget here is the MLP page's: batch 256, 5,000 iterations.
- ``cnn``, ``examples/mnist-cnn/main.py``: two 5×5 convolutions with batch norm, a ``BackwardInterface`` with a
  convolutional synthesizer after the second, then 320-50-10.  ``backprop``, ``dni`` (``--dni``), ``cdni``
  (``--dni --context``).  The example's own budget: batch 64, 10 epochs.
- ``full-unlock``, ``examples/mnist-full-unlock/main.py``: the MLP with a ``BidirectionalInterface`` after the
  second hidden layer's batch norm: a forward synthesizer predicts that activation from the input x, and the
  layers above train on its prediction.  ``backprop`` (no flag), ``complete`` (the complete unlock, ``--dni``),
  ``ccomplete`` (the same conditioned on the label, ``--dni --context``).  The example's own budget: batch 64,
  10 epochs.

Every example keeps its own settings: Adam at ``--lr`` (1e-3) for every parameter, its own MNIST normalisation,
its own initial weights, dropout and batch norm.  Every run uses one thread (``torch.set_num_threads(1)``).

What the adapter changes in an example's ``main.py``, and nothing else (the same in all three):

1. **Data loading.** The examples read MNIST through torchvision.  A stand-in ``torchvision`` module (below) gives
   them ``datasets.MNIST``, which reads the local ``mnist.npz`` instead of downloading, and ``transforms.ToTensor``
   and ``transforms.Normalize``, which do what torchvision's do (pixel / 255 as a (1, 28, 28) float32 tensor, then
   ``(x - mean) / std`` with the example's own constants 0.1307 and 0.3081), applied to a whole split at once.
   The example's ``DataLoader`` calls (batch size, shuffling, the last short batch of each epoch) are its own.
2. **Budget.** ``--seed`` is the example's own option (it seeds ``torch.manual_seed``, hence the initial weights,
   the dropout masks and the batch order).  The example's last three lines, its epoch loop, are left out and the
   adapter calls the example's own ``train(epoch)`` and ``test()`` instead: with ``--epochs``, as that loop does
   (``train(epoch)`` then ``test()`` for each epoch, so the test loader's shuffle draws from the random state
   between epochs as in the example); with ``--iterations``, ``train(epoch)`` until that many batches are done
   (the last epoch stops part-way), then ``test()`` once.  ``--log-interval`` (the example's option) is set high,
   so it logs only each epoch's first batch.
3. **Current PyTorch.** ``loss.data[0]`` (twice, in the example's log and test lines) becomes ``loss.item()``:
   a 0-dim tensor can no longer be indexed.  It changes no number.  Left as they are, because current PyTorch
   still runs them and they change no number: ``volatile=True`` (now ignored, with a warning),
   ``size_average=False`` (still a summed loss), ``F.log_softmax`` without ``dim`` (a warning; it takes dim 1 of
   the (batch, 10) logits), ``nn.init.constant`` in the CNN's synthesizer and in ``dni.py`` (a deprecation
   warning), and ``ctx.saved_variables`` in ``dni.py`` (a deprecation warning).  ``dni.py`` is not edited.

``accuracy`` trains one run at a time, each in a process of the peer's environment, and prints a table of the
final test accuracies; with ``--out`` it writes each run's record, ``METHOD-seedSEED.json``, as the run ends: the
example, method, seed, batch size, rate, budget, the test accuracy after each test (each epoch's with
``--epochs``), the final one, the seconds in the example's ``train()`` and the wall seconds of the whole run (from
loading the example and its data to the last test), and PyTorch's version.

``time`` measures step compute against step compute: the peer's own ``train()`` on one fixed batch, repeated,
in a process of the peer's environment, against sgrad's step on the same batch in this process, the two
processes alternating round by round; it prints the median over rounds of the ratio within a round.  sgrad's
step comes from ``SGRAD_SETTINGS`` (by default the settings that stand beside ``--example``); with
``--sgrad-setting`` given more than once, each setting takes its turn in every round, and the table also gives
each setting's time against the first's.  Beside the ``cnn`` example stands ``peer-cnn`` (``sgrad paper --arch
peer-cnn``), beside ``full-unlock`` the setting ``full-unlock`` (the peer's MLP network with the generators of two
hidden layers of 256, batch 64; ``complete`` and ``ccomplete`` step through ``complete_unlock_step``).  Both
processes keep the memory their steps free (``sgrad.training.memory``; the peer's through glibc's environment
variables with the same thresholds).  ``--processes N`` runs the rounds in N pairs of fresh processes.  ``--out``
writes the record: the command, the machine, the date, the load average before and after, and each round's wall
and processor seconds per step on each side.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: one thread, as the peer has
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import pathlib
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Example:
    """One of the peer's MNIST examples: its file, its methods (each its flags) and the budget it runs at here."""

    path: pathlib.Path
    methods: dict
    batch_size: int
    iterations: int | None = None
    epochs: int | None = None


UPDATE_UNLOCK = {"backprop": [], "dni": ["--dni"], "cdni": ["--dni", "--context"]}
EXAMPLES = {
    "mlp": Example(pathlib.Path("examples", "mnist-mlp", "main.py"), UPDATE_UNLOCK, batch_size=256,
                   iterations=5000),
    "cnn": Example(pathlib.Path("examples", "mnist-cnn", "main.py"), UPDATE_UNLOCK, batch_size=64, epochs=10),
    "full-unlock": Example(pathlib.Path("examples", "mnist-full-unlock", "main.py"),
                           {"backprop": [], "complete": ["--dni"], "ccomplete": ["--dni", "--context"]},
                           batch_size=64, epochs=10),
}
ALL_METHODS = list(dict.fromkeys(method for example in EXAMPLES.values() for method in example.methods))
# (what the example says, what the adapter runs instead, how many times it must occur): item 3 of the docstring,
# and the epoch loop that item 2 replaces.  The three examples share these lines word for word.
SUBSTITUTIONS = [
    ("loss.data[0]))", "loss.item()))", 1),
    ("size_average=False).data[0]", "size_average=False).item()", 1),
    ("for epoch in range(1, args.epochs + 1):\n    train(epoch)\n    test()\n", "", 1),
]
ACCURACY = re.compile(r"Accuracy: (\d+)/(\d+)")


def adapted_source(source, where="the example"):
    """The example's text with ``SUBSTITUTIONS`` made, or exit in one line if it is not the text they expect."""
    for old, new, count in SUBSTITUTIONS:
        found = source.count(old)
        if found != count:
            raise SystemExit(f"dni_pytorch_peer: {where} is not the version this adapter knows: "
                             f"{old!r} occurs {found} times, expected {count}")
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- inside the peer's environment

def stand_in_torchvision(npz_path):
    """A module that answers the example's ``from torchvision import datasets, transforms`` from ``npz_path``."""
    import torch

    class Compose:
        def __init__(self, parts):
            self.parts = parts

        def __call__(self, x):
            for part in self.parts:
                x = part(x)
            return x

    class ToTensor:
        """uint8 images (n, 28, 28) -> float32 tensor (n, 1, 28, 28) in [0, 1], as torchvision's per image."""

        def __call__(self, images):
            return torch.from_numpy(images).to(torch.float32).div(255).unsqueeze(1)

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = mean, std

        def __call__(self, x):
            mean = torch.tensor(self.mean, dtype=x.dtype).view(1, -1, 1, 1)
            std = torch.tensor(self.std, dtype=x.dtype).view(1, -1, 1, 1)
            return x.sub(mean).div(std)

    class MNIST(torch.utils.data.Dataset):
        def __init__(self, root, train=True, download=False, transform=None):
            with np.load(npz_path) as archive:
                split = "train" if train else "test"
                images, labels = archive[f"x_{split}"], archive[f"y_{split}"]
            self.data = transform(images) if transform is not None else torch.from_numpy(images)
            self.targets = torch.from_numpy(labels.astype(np.int64))

        def __len__(self):
            return len(self.targets)

        def __getitem__(self, index):
            return self.data[index], int(self.targets[index])

    module = types.ModuleType("torchvision")
    module.datasets = types.SimpleNamespace(MNIST=MNIST)
    module.transforms = types.SimpleNamespace(Compose=Compose, ToTensor=ToTensor, Normalize=Normalize)
    return module


class Budget:
    """The example's train_loader, ending after ``iterations`` batches in all, over as many epochs as that takes."""

    def __init__(self, loader, iterations):
        self.loader, self.left = loader, iterations
        self.dataset = loader.dataset

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            if self.left == 0:
                return
            self.left -= 1
            yield batch


class Repeat:
    """A loader of one batch, ``calls`` times, with the ``dataset`` that the example's log line reads."""

    def __init__(self, dataset, batch, calls):
        self.dataset, self.batch, self.calls = dataset, batch, calls

    def __len__(self):
        return self.calls

    def __iter__(self):
        for _ in range(self.calls):
            yield self.batch


def load_example(peer, example, npz_path, argv):
    """Execute ``example``'s module-level code (data, model, optimizer; not its epoch loop); returns its namespace."""
    import torch

    torch.set_num_threads(1)
    path = peer / EXAMPLES[example].path
    source = adapted_source(path.read_text(), str(path))
    sys.modules["torchvision"] = stand_in_torchvision(npz_path)
    sys.path.insert(0, str(peer))  # the example's `import dni`
    sys.argv = [str(path), *argv]
    namespace = {"__name__": "peer_example", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def example_argv(example, method, seed, batch_size, lr):
    return ["--batch-size", str(batch_size), "--lr", str(lr), "--seed", str(seed), "--log-interval", "1000000",
            *EXAMPLES[example].methods[method]]


def peer_train(peer, example, npz_path, method, seed, batch_size, lr, iterations=None, epochs=None):
    """Train as the example does, for ``epochs`` (testing after each) or ``iterations`` batches (testing once at
    the end); print the run's record as one JSON line."""
    import contextlib
    import io

    import torch

    began = time.perf_counter()
    namespace = load_example(peer, example, npz_path, example_argv(example, method, seed, batch_size, lr))
    loader = namespace["train_loader"]
    if iterations is not None:
        budget = namespace["train_loader"] = Budget(loader, iterations)
    log = io.StringIO()
    tests, train_seconds, epoch, done = [], 0.0, 0, 0

    def test():
        with contextlib.redirect_stdout(log):
            namespace["test"]()
        correct, total = map(int, ACCURACY.findall(log.getvalue())[-1])
        tests.append({"epoch": epoch, "iterations": done, "test_accuracy": correct / total})

    while (budget.left > 0) if iterations is not None else (epoch < epochs):
        epoch += 1
        start = time.perf_counter()
        with contextlib.redirect_stdout(log):
            namespace["train"](epoch)
        train_seconds += time.perf_counter() - start
        done = iterations - budget.left if iterations is not None else epoch * len(loader)
        if iterations is None:
            test()
    if iterations is not None:
        test()
    print(json.dumps({"example": example, "method": method, "seed": seed, "batch_size": batch_size, "lr": lr,
                      "iterations": done, "epochs": epoch, "tests": tests,
                      "test_accuracy": tests[-1]["test_accuracy"], "train_seconds": train_seconds,
                      "seconds": time.perf_counter() - began, "torch": torch.__version__}))


def peer_serve(peer, example, npz_path, method, batch_size, lr):
    """Answer each line ``n`` on stdin with the seconds of ``n`` of the example's own training steps on one batch."""
    namespace = load_example(peer, example, npz_path, example_argv(example, method, 0, batch_size, lr))
    loader = namespace["train_loader"]
    data, target = next(iter(loader))
    print(json.dumps({"ready": True, "batch": list(data.shape)}), flush=True)
    with open(os.devnull, "w") as quiet:
        for line in sys.stdin:
            calls = int(line)
            namespace["train_loader"] = Repeat(loader.dataset, (data, target), calls)
            saved, sys.stdout = sys.stdout, quiet  # the example logs its first batch
            start, start_cpu = time.perf_counter(), time.process_time()
            namespace["train"](1)
            seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
            sys.stdout = saved
            print(json.dumps({"seconds": seconds, "processor_seconds": cpu}), flush=True)


# ----------------------------------------------------------------------------- in sgrad's environment

def peer_paths(args):
    """``(peer folder, peer interpreter)``, or exit with one line saying what is missing."""
    peer = args.peer or os.environ.get("DNI_PYTORCH")
    python = args.peer_python or os.environ.get("DNI_PYTORCH_PYTHON")
    example = EXAMPLES[args.example].path
    if not peer or not (pathlib.Path(peer) / example).is_file():
        raise SystemExit(f"dni_pytorch_peer: no peer at {peer!r}: give --peer (or $DNI_PYTORCH), the folder of a "
                         f"checkout of koz4k/dni-pytorch holding {example}")
    if not python or not pathlib.Path(python).is_file():
        raise SystemExit(f"dni_pytorch_peer: no interpreter at {python!r}: give --peer-python (or "
                         "$DNI_PYTORCH_PYTHON), the python of an environment with torch and numpy")
    return pathlib.Path(peer).resolve(), python


def mnist_path(args):
    path = args.data or os.environ.get("SGRAD_DATA_DIR")
    path = pathlib.Path(path) if path else None
    if path is not None and path.is_dir():
        path = path / "mnist.npz"
    if path is None or not path.is_file():
        raise SystemExit("dni_pytorch_peer: no mnist.npz: give --data (the archive or its folder) or set "
                         "$SGRAD_DATA_DIR")
    return path.resolve()


def example_defaults(args):
    """Fill what the command line left out from ``--example``'s own: methods, batch size and budget."""
    example = EXAMPLES[args.example]
    if args.methods is None:
        args.methods = list(example.methods)
    unknown = [method for method in args.methods if method not in example.methods]
    if unknown:
        raise SystemExit(f"dni_pytorch_peer: the {args.example} example has no method {', '.join(unknown)}: "
                         f"give --methods from {','.join(example.methods)}")
    if args.batch_size is None:
        args.batch_size = example.batch_size
    if getattr(args, "iterations", None) is not None and getattr(args, "epochs", None) is not None:
        raise SystemExit("dni_pytorch_peer: give --iterations or --epochs, not both")
    if hasattr(args, "iterations") and args.iterations is None and args.epochs is None:
        args.iterations, args.epochs = example.iterations, example.epochs
    return args


def run_peer(args, method, seed):
    peer, python = peer_paths(args)
    budget = ["--iterations", str(args.iterations)] if args.iterations is not None else ["--epochs", str(args.epochs)]
    command = [python, str(pathlib.Path(__file__).resolve()), "_peer-train", "--peer", str(peer),
               "--example", args.example, "--data", str(mnist_path(args)), "--method", method, "--seed", str(seed),
               *budget, "--batch-size", str(args.batch_size), "--lr", str(args.lr)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"dni_pytorch_peer: the peer's {method} run (seed {seed}) failed: "
                         + (result.stderr.strip().splitlines() or ["no message"])[-1])
    return json.loads(result.stdout.strip().splitlines()[-1])


def accuracy(args):
    """Train the peer for each method and seed, one run at a time; write each run's record as it ends."""
    peer_paths(args)  # before any work
    mnist_path(args)
    out = pathlib.Path(args.out) if args.out else None
    runs = []
    for method in args.methods:
        for seed in args.seeds:
            run = run_peer(args, method, seed)
            runs.append(run)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"{method}-seed{seed}.json").write_text(json.dumps(run, indent=1) + "\n")
            print(f"{args.example} {method} seed {seed}: {100 * run['test_accuracy']:.2f}% "
                  f"({run['train_seconds']:.0f} s training, {run['seconds']:.0f} s in all)", file=sys.stderr,
                  flush=True)
    print("| method | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean |")
    print("|---|" + "---:|" * (len(args.seeds) + 1))
    for method in args.methods:
        scores = [100 * r["test_accuracy"] for r in runs if r["method"] == method]
        print(f"| {method} | " + " | ".join(f"{s:.2f}%" for s in scores) + f" | {np.mean(scores):.2f}% |")


# ----------------------------------------------------------------------------- step time

@dataclasses.dataclass(frozen=True)
class SgradSetting:
    """sgrad's side of a timing: the peer's example it stands beside, and how to build its step.

    ``build(method, x, labels)`` returns ``step()``, one sgrad training step of the peer's ``method`` on the batch
    ``x`` (batch, 784), float32 pixels / 255 (reshape and normalise them as the setting needs), with ``labels``
    (batch,) integers; the timing calls ``step()`` over and over and ignores what it returns.
    """

    example: str
    build: Callable


def paper_step(config, method, x, labels):
    """``step()``: one step of ``method`` as ``train_paper`` takes it, on the network ``PaperConfig(**config)`` builds.

    The same calls as ``sgrad.experiments.mnist.train_paper``'s step: ``take_step`` for the methods without
    synthetic inputs, ``complete_unlock_step`` with the input generators of ``build_input_generators`` for
    ``complete`` and ``ccomplete``; the CNNs take the rows of pixels as (batch, 1, 28, 28) images, as there.
    """
    from sgrad.dni.steps import complete_unlock_step
    from sgrad.experiments.mnist import (COMPLETE, CONDITIONED, PaperConfig, build_input_generators, build_network,
                                         mean_cross_entropy, summed_cross_entropy)
    from sgrad.experiments.mnist_cnn import image_side
    from sgrad.training.loop import take_step

    config = PaperConfig(**config)
    layers = build_network(method, x.shape[1], config)
    input_generators = build_input_generators(method, x.shape[1], config)
    y = np.eye(10, dtype=x.dtype)[labels]
    if config.arch != "mlp":
        side = image_side(x.shape[1])
        x = x.reshape(-1, 1, side, side)
    loss_fn = summed_cross_entropy if config.loss == "sum" else mean_cross_entropy
    if method in COMPLETE:
        input_alpha = config.alpha if config.generator_alpha is None else config.generator_alpha
        condition = y if method in CONDITIONED else None
        return lambda: complete_unlock_step(layers, input_generators, x, y, loss_fn, config.alpha, input_alpha,
                                            condition=condition)
    return lambda: take_step(method, layers, x, y, loss_fn, config.alpha)


def paper_setting(example, **config):
    return SgradSetting(example, lambda method, x, labels: paper_step(config, method, x, labels))


# `sgrad paper`'s settings at the MLP example's setting (784-256-256-10, Adam at 1e-3 everywhere, batch 256,
# generators of one hidden layer of 256 without batch norm): "default" is `sgrad paper`'s method (an interface
# after every block's ReLU, the summed loss), "peer" adds the options that build the peer's network (one interface,
# at block 2 before its ReLU; the batch-mean loss; batch norm on the logits; PyTorch's initial weights).
MLP_PAPER = dict(depth=3, hidden=256, batch_size=256, alpha=1e-3, generator="mlp", generator_hidden=(256,),
                 generator_batchnorm=False, dtype="float32")
MLP_PEER = dict(MLP_PAPER, interfaces=(2,), interface_position="before", loss="mean", logit_batchnorm=True,
                init="pytorch")
# The CNN example: `sgrad paper --arch peer-cnn`, which builds the peer's whole network (PaperConfig's docstring);
# the rest of its setting is the batch-mean loss, batch 64 and Adam at 1e-3.  The full-unlock example: the MLP
# example's peer network with the generators of two hidden layers of 256 and batch 64 (the methods complete and
# ccomplete add the input generators).
CNN_PEER = dict(arch="peer-cnn", batch_size=64, alpha=1e-3, loss="mean", dtype="float32")
FULL_UNLOCK_PEER = dict(MLP_PEER, batch_size=64, generator_hidden=(256, 256))
SGRAD_SETTINGS = {
    "default": paper_setting("mlp", **MLP_PAPER),
    "peer": paper_setting("mlp", **MLP_PEER),
    "peer, every block": paper_setting("mlp", **dict(MLP_PEER, interfaces="every")),
    "peer-cnn": paper_setting("cnn", **CNN_PEER),
    "full-unlock": paper_setting("full-unlock", **FULL_UNLOCK_PEER),
}
DEFAULT_SETTINGS = {"mlp": ["peer"]}


def sgrad_step(method, x, labels, setting):
    """``step()``: one sgrad training step of the peer's ``method`` at ``SGRAD_SETTINGS[setting]`` on (x, labels)."""
    return SGRAD_SETTINGS[setting].build(method, x, labels)


def settings_to_time(args):
    """The sgrad settings ``time`` runs: ``--sgrad-setting``'s, else those beside ``--example``; exit if none."""
    if args.sgrad_setting:
        return args.sgrad_setting
    settings = DEFAULT_SETTINGS.get(args.example) or [name for name, setting in SGRAD_SETTINGS.items()
                                                      if setting.example == args.example]
    if not settings:
        raise SystemExit(f"dni_pytorch_peer: no sgrad setting stands beside the {args.example} example yet: give "
                         f"--sgrad-setting (one of {', '.join(SGRAD_SETTINGS)}) or add one to SGRAD_SETTINGS")
    return settings


def same_allocator():
    """glibc's environment variables that give a process the thresholds :func:`sgrad.training.memory.keep_freed_memory`
    sets in sgrad's: the peer's process keeps the memory its steps free, as sgrad's training loop does, so that
    neither side pays page faults the other does not."""
    from sgrad.training import memory

    return {"MALLOC_MMAP_THRESHOLD_": str(memory.MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(memory.TRIM_THRESHOLD)}


class PeerSteps:
    """The peer's training step in a process of its own environment, timed there on the example's first batch."""

    def __init__(self, args, method):
        peer, python = peer_paths(args)
        command = [python, str(pathlib.Path(__file__).resolve()), "_peer-serve", "--peer", str(peer),
                   "--example", args.example, "--data", str(mnist_path(args)), "--method", method,
                   "--batch-size", str(args.batch_size), "--lr", str(args.lr)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, **same_allocator()))
        self.answer()

    def answer(self):
        line = self.process.stdout.readline()
        if not line:
            self.close()
            raise SystemExit("dni_pytorch_peer: the peer's timing process ended early")
        return json.loads(line)

    def __call__(self, calls):
        """``(wall seconds, processor seconds)`` per step, over ``calls`` steps."""
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        answer = self.answer()
        return answer["seconds"] / calls, answer["processor_seconds"] / calls

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def step_time(args):
    """Alternate sgrad's steps and the peer's, round by round; print the median ratios per method and setting.

    In each round every sgrad setting takes its turn, then the peer: the ratio of a setting to the first one (one
    interface against every block, say) is measured in the same rounds.  With ``--processes N`` (N > 1) the
    rounds run in N pairs of fresh processes, one pair after the other, each pair's sgrad side a new run of this
    command: the same code runs a few percent faster or slower from one process to the next, and one pair alone
    would measure that as well.  With ``--out``, write the record: the
    command, machine, date, load average before and after, and each round's wall and processor seconds per
    step, with the pair each round ran in.
    """
    if args.processes < 1:
        raise SystemExit(f"dni_pytorch_peer: --processes must be at least 1 (pairs of fresh processes, one after the "
                         f"other); got {args.processes}")
    peer_paths(args)  # before any work
    settings = settings_to_time(args)
    load_before = os.getloadavg()
    previous = signal.signal(signal.SIGTERM, _stop)  # so that a pair's processes are ended on the way out
    try:
        measured = _rounds_in_fresh_processes(args) if args.processes > 1 else _rounds(args, settings)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("| method | sgrad's setting | sgrad, ms per step | peer, ms per step | sgrad ÷ peer (median of rounds) |"
          + (f" ÷ '{settings[0]}' |" if len(settings) > 1 else ""))
    print("|---|---|---:|---:|---:|" + ("---:|" if len(settings) > 1 else ""))
    for method in measured:
        theirs = np.array(method["peer_seconds"])
        mine = [np.array(setting["seconds"]) for setting in method["sgrad"]]
        for setting, times in zip(settings, mine):
            row = (f"| {method['method']} | {setting} | {1e3 * np.median(times):.2f} | {1e3 * np.median(theirs):.2f} | "
                   f"{np.median(times / theirs):.2f}× |")
            if len(settings) > 1:
                row += f" {np.median(times / mine[0]):.2f}× |"
            print(row, flush=True)
    if args.out:
        from machine import describe

        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "command": "benchmarks/dni_pytorch_peer.py " + " ".join(sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": describe(),
            "numpy": np.__version__, "torch": peer_version(args), "example": args.example,
            "batch_size": args.batch_size, "rounds": args.rounds, "processes": args.processes,
            "seconds_per_side": args.seconds,
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "methods": measured}, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out}", file=sys.stderr)


def _stop(signum, _frame):
    """SIGTERM as SystemExit: a pair's process (subprocess.run) or the peer's (PeerSteps.close) is ended on the way."""
    raise SystemExit(f"dni_pytorch_peer: stopped by signal {signum}")


def _rounds(args, settings):
    """``args.rounds`` rounds of each method in this process and one peer process: the record's ``methods``.

    This process keeps the memory its steps free, as ``sgrad paper``'s training loop makes it do; the peer's, with
    the same thresholds (:func:`same_allocator`).
    """
    from sgrad.training.memory import keep_freed_memory

    keep_freed_memory()
    with np.load(mnist_path(args)) as archive:
        x = (archive["x_train"][:args.batch_size].reshape(args.batch_size, -1) / np.float32(255)).astype(np.float32)
        labels = archive["y_train"][:args.batch_size].astype(np.int64)
    measured = []
    for method in args.methods:
        steps = [sgrad_step(method, x, labels, setting) for setting in settings]
        peer = PeerSteps(args, method)
        try:
            for step in steps:
                for _ in range(args.warmup):
                    step()
            peer(args.warmup)
            start = time.perf_counter()
            steps[0]()
            calls = max(1, round(args.seconds / (time.perf_counter() - start)))
            mine, mine_cpu, theirs, theirs_cpu = [[] for _ in steps], [[] for _ in steps], [], []
            for _ in range(args.rounds):
                for step, times, cpu in zip(steps, mine, mine_cpu):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    for _ in range(calls):
                        step()
                    times.append((time.perf_counter() - start) / calls)
                    cpu.append((time.process_time() - start_cpu) / calls)
                wall, cpu = peer(calls)
                theirs.append(wall)
                theirs_cpu.append(cpu)
        finally:
            peer.close()
        measured.append({"method": method, "steps_per_round": calls, "pair": [0] * args.rounds,
                         "peer_seconds": theirs, "peer_processor_seconds": theirs_cpu,
                         "sgrad": [{"setting": setting, "seconds": times, "processor_seconds": cpu}
                                   for setting, times, cpu in zip(settings, mine, mine_cpu)]})
    return measured


def _rounds_in_fresh_processes(args):
    """The record's ``methods`` from ``args.processes`` runs of this command with one pair each, one after the
    other; each round keeps the number of its pair, and each method its steps per round in every pair."""
    import tempfile

    merged: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        for pair in range(args.processes):
            out = pathlib.Path(folder) / f"pair{pair}.json"
            command = [sys.executable, str(pathlib.Path(__file__).resolve()), *_argv_with(sys.argv[1:], out)]
            run = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or ["no message"])[-1]
                raise SystemExit(f"dni_pytorch_peer: pair {pair + 1} of {args.processes} failed: {last}")
            for method in json.loads(out.read_text())["methods"]:
                into = merged.setdefault(method["method"], {
                    "method": method["method"], "steps_per_round": [], "pair": [], "peer_seconds": [],
                    "peer_processor_seconds": [],
                    "sgrad": [{"setting": s["setting"], "seconds": [], "processor_seconds": []} for s in method["sgrad"]]})
                into["steps_per_round"].append(method["steps_per_round"])
                into["pair"] += [pair] * len(method["peer_seconds"])
                for key in ("peer_seconds", "peer_processor_seconds"):
                    into[key] += method[key]
                for ours, theirs in zip(into["sgrad"], method["sgrad"]):
                    ours["seconds"] += theirs["seconds"]
                    ours["processor_seconds"] += theirs["processor_seconds"]
    return list(merged.values())


def _argv_with(argv, out):
    """This command's arguments for one pair: ``--processes 1`` and ``--out`` the pair's file, the rest kept."""
    kept, skip = [], False
    for argument in argv:
        if skip:
            skip = False
        elif argument in ("--processes", "--out"):
            skip = True
        elif not argument.startswith(("--processes=", "--out=")):
            kept.append(argument)
    return [*kept, "--processes", "1", "--out", str(out)]


def peer_version(args):
    """The version of PyTorch in the peer's environment."""
    _, python = peer_paths(args)
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                          check=True).stdout.strip()


# ----------------------------------------------------------------------------- the figure

def figure(args):
    """Draw the ablation (``--table``, JSON) as one panel per method: each row's mean, its seeds, the peer's mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = json.loads(pathlib.Path(args.table).read_text())
    methods = [m for m in ALL_METHODS if any(row["method"] == m for row in table["rows"])]
    rows = {m: [row for row in table["rows"] if row["method"] == m] for m in methods}
    fig, axes = plt.subplots(len(methods), 1, figsize=(8, 1.0 + 0.42 * sum(len(r) + 1 for r in rows.values())),
                             gridspec_kw={"height_ratios": [len(rows[m]) + 1 for m in methods]}, squeeze=False)
    for ax, method in zip(axes[:, 0], methods):
        labels = [row["change"] for row in rows[method]]
        positions = np.arange(len(labels))[::-1]
        peer = 100 * np.mean(table["peer"][method])
        scores = [100 * np.array(row["accuracy"]) for row in rows[method]]
        low = min(s.min() for s in scores) - 0.6
        high = max(max(s.max() for s in scores), peer) + 0.4
        for y, score in zip(positions, scores):
            ax.barh(y, score.mean() - low, left=low, color="#4c72b0", height=0.6)
            ax.text(low + 0.03 * (high - low), y, f"{score.mean():.2f}%", va="center", color="white", fontsize=8)
            ax.plot(score, [y] * len(score), "o", color="black", markersize=3)
        ax.axvline(peer, color="#dd8452", linestyle="--")
        ax.text(peer, positions[0] + 0.55, f"the peer: {peer:.2f}%  ", ha="right", va="bottom", color="#dd8452",
                fontsize=8)
        ax.set_yticks(positions, labels, fontsize=8)
        ax.set_xlim(low, high)
        ax.set_ylim(-0.6, positions[0] + 1.1)
        ax.set_title(method, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("test accuracy after 5,000 iterations (bars: mean of seeds 0-2; dots: each seed)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out}")


def curves(args):
    """Draw each method's test accuracy after each epoch, every seed, the peer's records (``--records``, from
    ``accuracy --out``) beside ``sgrad paper``'s runs (``--sgrad``, a folder of ``seed<s>`` results folders), and
    beside the runs of ``--also`` (another such folder, named ``--also-label`` in the legend) if given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def paper_runs(folder):
        runs = {}
        for path in sorted(pathlib.Path(folder).glob("seed*/cells/*.json")):
            cell = json.loads(path.read_text())
            runs.setdefault(cell["settings"]["method"], {})[cell["settings"]["config"]["seed"]] = (
                cell["history"]["iteration"], cell["history"]["test_accuracy"])
        return runs

    peer = {}
    for path in sorted(pathlib.Path(args.records).glob("*-seed*.json")):
        run = json.loads(path.read_text())
        peer.setdefault(run["method"], {})[run["seed"]] = ([t["iterations"] for t in run["tests"]],
                                                          [t["test_accuracy"] for t in run["tests"]])
    sides = [(peer, "#dd8452", "the peer"), (paper_runs(args.sgrad), "#4c72b0", "sgrad paper")]
    if args.also:
        sides.append((paper_runs(args.also), "#55a868", f"sgrad paper, {args.also_label}"))
    methods = [m for m in EXAMPLES[args.example].methods if any(m in runs for runs, _, _ in sides)]
    fig, axes = plt.subplots(1, len(methods), figsize=(4 * len(methods), 4.0), squeeze=False)
    for ax, method in zip(axes[0], methods):
        for runs, colour, name in sides:
            for n, (_, (steps, scores)) in enumerate(sorted(runs.get(method, {}).items())):
                ax.plot(steps, 100 * np.array(scores), "o-", color=colour, markersize=3, linewidth=1,
                        alpha=0.5 + 0.25 * (n % 3), label=f"{name}, a line per seed")
        ax.set_title(method, fontsize=10, loc="left")
        ax.set_xlabel("steps (batches of 64)")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("test accuracy (%)")
    labelled = {}  # every line's label once, in the order drawn, for one legend under the panels
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(label, handle)
    fig.legend(labelled.values(), labelled.keys(), fontsize=7, loc="lower center", ncol=len(sides), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out}")


def parse_list(kind, choices=None):
    def parse(text):
        items = [part.strip() for part in text.split(",") if part.strip()]
        try:
            values = [kind(item) for item in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list; got {text!r}") from None
        if not values or (choices is not None and any(v not in choices for v in values)):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(choices or [])}; "
                                             f"got {text!r}")
        return values
    return parse


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def shared(sub):
        sub.add_argument("--peer", help="the peer's folder (default $DNI_PYTORCH)")
        sub.add_argument("--peer-python", help="its environment's python (default $DNI_PYTORCH_PYTHON)")
        sub.add_argument("--data", help="mnist.npz or its folder (default $SGRAD_DATA_DIR)")
        sub.add_argument("--example", choices=EXAMPLES, default="mlp",
                         help="the peer's example: mlp (default), cnn or full-unlock")
        sub.add_argument("--methods", type=parse_list(str, ALL_METHODS),
                         help="the example's methods to run (default all of them)")
        sub.add_argument("--batch-size", type=int, help="default: the example's (mlp 256, cnn and full-unlock 64)")
        sub.add_argument("--lr", type=float, default=1e-3)

    acc = commands.add_parser("accuracy", help="train the peer for each method and seed, one run at a time")
    shared(acc)
    acc.add_argument("--seeds", type=parse_list(int), default=[0, 1, 2])
    acc.add_argument("--iterations", type=int, help="batches in all, then one test (the mlp example's default: "
                                                    "5000)")
    acc.add_argument("--epochs", type=int, help="epochs, each followed by a test (the cnn and full-unlock "
                                                "examples' default: 10)")
    acc.add_argument("--out", help="write each run's record, METHOD-seedSEED.json, in this folder")

    tim = commands.add_parser("time", help="sgrad's step against the peer's, in alternating rounds")
    shared(tim)
    tim.add_argument("--sgrad-setting", choices=SGRAD_SETTINGS, action="append",
                     help="sgrad's side, from SGRAD_SETTINGS (default: those beside --example; for mlp 'peer', "
                          "the options that build the peer's network; 'peer, every block' is the same with an "
                          "interface at every block, 'default' sgrad paper's method: an interface after every "
                          "block's ReLU); give it more than once to time several settings in the same rounds")
    tim.add_argument("--rounds", type=int, default=15)
    tim.add_argument("--seconds", type=float, default=0.5, help="each side's time in a round (default 0.5)")
    tim.add_argument("--warmup", type=int, default=20, help="steps each side takes before the rounds")
    tim.add_argument("--processes", type=int, default=1,
                     help="pairs of fresh processes (sgrad's and the peer's) that run --rounds each, one pair after "
                          "the other (default 1: this process and one peer process)")
    tim.add_argument("--out", help="write the record (JSON): command, machine, date, load average, each round")

    fig = commands.add_parser("figure", help="draw an ablation table (JSON) as a PNG")
    fig.add_argument("--table", required=True, help="JSON: {'peer': {method: [accuracy per seed]}, 'rows': "
                                                    "[{'method', 'change', 'accuracy': [per seed]}]}")
    fig.add_argument("--out", required=True, help="the PNG to write")

    cur = commands.add_parser("curves", help="draw the peer's and sgrad's test accuracy after each epoch as a PNG")
    cur.add_argument("--example", choices=EXAMPLES, required=True)
    cur.add_argument("--records", required=True, help="the peer's records, METHOD-seedS.json (accuracy --out)")
    cur.add_argument("--sgrad", required=True, help="a folder of sgrad paper's results folders, seed0, seed1, ...")
    cur.add_argument("--also", help="another folder of sgrad paper's results folders, drawn in a third colour")
    cur.add_argument("--also-label", default="a variant", help="what --also changed, for the legend")
    cur.add_argument("--out", required=True, help="the PNG to write")

    for name in ("_peer-train", "_peer-serve"):  # run by the commands above, in the peer's environment
        inner = commands.add_parser(name)
        inner.add_argument("--peer", required=True)
        inner.add_argument("--example", choices=EXAMPLES, default="mlp")
        inner.add_argument("--data", required=True)
        inner.add_argument("--method", choices=ALL_METHODS, required=True)
        inner.add_argument("--seed", type=int, default=0)
        inner.add_argument("--iterations", type=int)
        inner.add_argument("--epochs", type=int)
        inner.add_argument("--batch-size", type=int, required=True)
        inner.add_argument("--lr", type=float, default=1e-3)
    return parser, shared, commands


def main():
    parser, _, _ = build_parser()
    args = parser.parse_args()
    if args.command == "_peer-train":
        peer_train(pathlib.Path(args.peer), args.example, args.data, args.method, args.seed, args.batch_size,
                   args.lr, iterations=args.iterations, epochs=args.epochs)
    elif args.command == "_peer-serve":
        peer_serve(pathlib.Path(args.peer), args.example, args.data, args.method, args.batch_size, args.lr)
    elif args.command == "accuracy":
        accuracy(example_defaults(args))
    elif args.command == "time":
        step_time(example_defaults(args))
    elif args.command == "figure":
        figure(args)
    elif args.command == "curves":
        curves(args)


if __name__ == "__main__":
    main()
