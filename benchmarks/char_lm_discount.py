"""Benchmark: the character-level language model by truncated BPTT and by DNI, with and without the discount γ.

The text's lines read ``a....a``: a random letter of ``abcd``, four dots, the same letter 5 characters later,
so a model must carry the letter past the window (0.29 bits per character at best, 0.57 for a model that
forgets it).  An LSTM of 32 units, 16 streams, T = 2, one window per step and no horizon (M's targets
bootstrap without end), Adam 3e-3 (the generator 3e-4); truncated BPTT, DNI with γ = 1 and DNI with
γ = 0.5 (``synthetic_scale``), seeds 0, 1, 2, 3,000 steps, bits per character on the held-out end of the
text every 1,000 steps, and M's mean regression loss over each span.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/char_lm_discount.py [--out docs/rnn-char-lm/results.json]
"""

import argparse
import dataclasses
import datetime
import json
import os
import pathlib

import numpy as np

from sgrad.experiments.char_lm import CharLMConfig, train_char_lm

RUNS = (("bptt", 1.0), ("dni", 1.0), ("dni", 0.5))  # (method, γ)


def text(lines: int = 3000, seed: int = 0) -> str:
    """``lines`` lines of ``x....x``, each x drawn from ``abcd``."""
    letters = np.random.default_rng(seed).choice(list("abcd"), size=lines)
    return "".join(f"{c}....{c}\n" for c in letters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=pathlib.Path, help="write every run's history here (JSON)")
    args = parser.parse_args()
    corpus, runs = text(), []
    for seed in args.seeds:
        config = CharLMConfig(steps=3000, window=2, horizon=None, batch_size=16, hidden=32, eval_every=1000,
                              seed=seed)
        for method, gamma in RUNS:
            history = train_char_lm(method, corpus, dataclasses.replace(config, synthetic_scale=gamma))
            runs.append({"seed": seed, "method": method, "synthetic_scale": gamma, "step": history["step"],
                         "valid_bpc": history["valid_bpc"], "generator_loss": history["generator_loss"],
                         "wall_time": history["wall_time"]})
            print(seed, method, gamma, [round(b, 3) for b in history["valid_bpc"]], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "benchmarks/char_lm_discount.py",
                                        "date": datetime.date.today().isoformat(),
                                        "load_average": round(os.getloadavg()[0], 2), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
