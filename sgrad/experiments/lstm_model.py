"""The model both recurrent experiments train (``sgrad rnn``, the character-level model), and the settings they share.

An LSTM core reads the sequence, a linear readout maps each step's output h_t to the logits of
that step's targets, and for DNI a linear generator ĝ = M(s) of the core's state s = [h, c],
zero-initialised, gives the synthetic gradient at every window boundary.
"""

from typing import Any

import numpy as np

from ..argument_checks import check_integer, check_number
from ..dni.generators import LinearGenerator
from ..nn.layers import Layer
from ..recurrent.layers import LSTM


def lstm_model(input_dim: int, output_dim: int, config: Any, *, generator: bool) -> list[Any]:
    """``[core, readout]``, plus the boundary generator if ``generator``; the weights depend on the seed, not the method.

    core : an LSTM of ``config.hidden`` units over (batch, time, input_dim); readout : (hidden,) → (output_dim,).
    ``config`` gives hidden, update_rule, dtype and seed (a :class:`~sgrad.experiments.rnn.RnnConfig` or
    :class:`~sgrad.experiments.char_lm.CharLMConfig`).
    """
    core_seed, readout_seed = np.random.SeedSequence(config.seed).spawn(2)
    core = LSTM(input_dim, config.hidden, update_rule=config.update_rule, seed=core_seed, dtype=config.dtype)
    model: list[Any] = [core, Layer(config.hidden, output_dim, "identity", update_rule=config.update_rule,
                                    seed=readout_seed, dtype=config.dtype)]
    if generator:
        model.append(LinearGenerator(core.state_dim, update_rule=config.update_rule, dtype=config.dtype))
    return model


def check_recurrent_settings(config: Any, scale_example: str) -> dict[str, Any]:
    """The checked settings both recurrent configs have beside every experiment's: steps, hidden, eval_every and λ.

    synthetic_scale is λ in (0, 1], the weight of ĝ where it enters a window's backward;
    ``scale_example`` is a good value, shown in its message.
    """
    return {
        "synthetic_scale": check_number(config.synthetic_scale, "synthetic_scale", above=0, at_most=1,
                                        example=scale_example),
        "steps": check_integer(config.steps, "steps"),
        "hidden": check_integer(config.hidden, "hidden"),
        "eval_every": check_integer(config.eval_every, "eval_every"),
    }
