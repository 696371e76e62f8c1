"""The training plumbing that every experiment shares, each piece written once.

- :mod:`.loop`: the one resumable training loop (batches, divergence, checkpoints, progress, wall time);
- :mod:`.resume`: a training run saved with its batch order and history, and carried on;
- :mod:`.settings`: the settings every experiment has, and the checks made before any work;
- :mod:`.batches`: the order of the batches, a new permutation per pass;
- :mod:`.evaluation`: what a run measures (accuracy in evaluation mode, the cosine of ĝ and g);
- :mod:`.diverged`: ``TrainingDiverged``, what a run raises when a number turns non-finite;
- :mod:`.memory`: the memory a step frees, kept in the process for the next step;
- :mod:`.results_folder`: the results folder, one writer at a time, and where checkpoints go;
- :mod:`.cell_cache`: the cache of finished cells, so that an interrupted grid resumes.
"""
