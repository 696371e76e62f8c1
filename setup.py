"""The build's one step beyond setup.cfg: the students' notebooks go into the wheel as package data.

``notebooks/`` stays their one source; the build copies its numbered notebooks (never ``notebooks/instructor/``)
into the built package as ``sgrad/notebooks/``, where ``sgrad notebooks DEST`` finds them (:mod:`sgrad.course.handout`).
An install from a clone reads ``notebooks/`` itself.  ``MANIFEST.in`` puts the same notebooks in the sdist, from
which ``python -m build`` makes the wheel.
"""

import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

NOTEBOOKS = "[0-9][0-9]_*.ipynb"  # as sgrad.course.handout.PATTERN: the students' notebooks, at the folder's top


class BuildWithNotebooks(build_py):
    """build_py, then the students' notebooks copied into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's notebooks/ itself
            return
        notebooks = sorted(pathlib.Path(__file__).resolve().parent.joinpath("notebooks").glob(NOTEBOOKS))
        if not notebooks:
            raise SystemExit("setup.py: no notebooks/NN_*.ipynb to put in the wheel; build from a clone or an sdist")
        target = pathlib.Path(self.build_lib, "sgrad", "notebooks")
        self.mkpath(str(target))
        for notebook in notebooks:
            self.copy_file(str(notebook), str(target / notebook.name))


setup(cmdclass={"build_py": BuildWithNotebooks})
