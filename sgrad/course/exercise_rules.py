"""What every exercise of notebook 07 asks besides the right numbers, and how its judge refuses the rest.

The exercises are homework on writing a step with arrays: a method written outside sgrad fails if it runs
sgrad's own (it inherits the method instead of writing it) or calls what would do the step for it
(``self.backward``, ``self.update``, ``self.generator.update``).  The exercise runner sees the calls by
wrapping those methods on the checked object while it runs; a call through ``super().backward`` alone is not
seen.  sgrad's own classes take the one public path, and pass.  The checked class must also build the
parameters of sgrad's class built with the same arguments, since each check chooses the starting weights by
its seed.
"""

from typing import Any

import numpy as np

from .check_reports import Failure, Hint, one_line

BATCH = 8  # rows of every input that the exercises' checks draw

# A watched call made by another one (self.update() steps through the update rule): named only alone.
REACHED_THROUGH = {"the parent class's update()": "self.update()",
                   "self.generator.net.update()": "self.generator.update()"}


def refuse_calls(what: str, calls: list[str], hint: Hint) -> None:
    """Fail, naming the forbidden methods that ``what`` called (in the order of their first call)."""
    named = [one_line(label) for label in dict.fromkeys(calls) if REACHED_THROUGH.get(label) not in calls]
    if named:
        raise Failure(f"{what} called {' and '.join(named)}, which this exercise forbids.\n"
                      f"Hint ({hint[0]}): {hint[1]}")


def refuse_sgrads_own(out: dict[str, Any], method: str, sgrads: str) -> None:
    """Fail if the checked class, written outside sgrad, runs sgrad's ``method`` instead of its own."""
    if out.get("defined_by") == "inherited":
        name = one_line(out["class_name"])
        raise Failure(f"{name} does not define {method}: it runs sgrad's {sgrads}, which it inherits. "
                      f"Write {method} in the body of class {name}.")


def refuse_another_start(received: dict[str, Any], expected: dict[str, np.ndarray], built: str, sgrads: str) -> None:
    """Fail unless the parameters the checked class was built with are those of sgrad's ``sgrads`` built so."""
    if set(received) != set(expected) or not all(same_array(received[name], value)
                                                 for name, value in expected.items()):
        raise Failure(f"{one_line(built)} built parameters that differ from sgrad's {sgrads} built with the same "
                      f"arguments: keep {sgrads}'s constructor (the check chooses the starting weights by the seed).")


def same_array(received: Any, expected: np.ndarray) -> bool:
    """Whether ``received`` is an array of ``expected``'s shape and values (to rounding)."""
    return (isinstance(received, np.ndarray) and received.shape == np.shape(expected)
            and bool(np.all(np.abs(received - expected) <= 1e-12 * (1 + np.abs(expected)))))
