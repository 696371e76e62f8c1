"""What a training run raises when a number turns non-finite: :class:`TrainingDiverged`, with the history so far."""

from typing import Any


class TrainingDiverged(FloatingPointError):
    """Training produced a non-finite number; the message names the run, the step and the likely cause.

    ``history`` holds what was recorded up to the step that diverged.
    """

    def __init__(self, message: str, history: dict[str, Any]) -> None:
        super().__init__(message)
        self.history = history

    @classmethod
    def at(cls, run: str, unit: str, step: int, cause: object, learning_rates: dict[str, float],
           history: dict[str, Any], *, where: str = "") -> "TrainingDiverged":
        """The divergence of ``run`` (e.g. 'dni (depth 3)') at ``unit`` (e.g. 'iteration') ``step``, from ``cause``.

        learning_rates : named as the likely cause, e.g. ``{'alpha': 0.01}``.  where : e.g. ' in worker 1'.
        """
        rates = ", ".join(f"{rate}={value}" for rate, value in learning_rates.items())
        return cls(f"{run} diverged at {unit} {step}{where}: {cause}. The learning rate ({rates}) is the likely "
                   "cause; try a smaller one.", history)
