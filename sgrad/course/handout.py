"""``sgrad notebooks DEST``: the course's notebooks, copied into a folder for a student.

The notebooks' one source is the checkout's ``notebooks/`` folder.  A built wheel carries a copy of the
students' notebooks as package data, ``sgrad/notebooks/``, made by the build (``setup.py``); an install
from a clone (``pip install -e .``) reads the checkout's folder itself.  Only the course's numbered
notebooks (``01_...`` to ``12_...``) are handed out: nothing from ``notebooks/instructor/``, where the
solutions are kept.
"""

import argparse
import pathlib
import shutil
import sys

# The students' notebooks: numbered, at the top of the folder (never in a subfolder such as instructor/).
PATTERN = "[0-9][0-9]_*.ipynb"
PACKAGED = pathlib.Path(__file__).resolve().parents[1] / "notebooks"  # in a wheel: written there by the build
CHECKOUT = pathlib.Path(__file__).resolve().parents[2] / "notebooks"  # in a clone

__all__ = ["PATTERN", "add_notebooks_arguments", "copy_notebooks", "student_notebooks"]


def student_notebooks() -> list[pathlib.Path]:
    """The students' notebooks, in the course's order: the wheel's copy if there is one, else the checkout's."""
    for folder in (PACKAGED, CHECKOUT):
        found = sorted(folder.glob(PATTERN))
        if found:
            return found
    raise OSError(f"this installation of sgrad holds no notebooks (neither {PACKAGED} nor {CHECKOUT}); "
                  f"install sgrad from a clone or from a wheel built by 'python -m build'")


def add_notebooks_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` (``sgrad notebooks``'s) its arguments."""
    parser.add_argument("dest", type=pathlib.Path, metavar="DEST",
                        help="the folder to copy the notebooks into (made, with its parents, if it does not exist)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite notebooks of the same names already in DEST (a student's work is lost)")
    return parser


def copy_notebooks(dest: pathlib.Path, *, force: bool = False) -> int:
    """Copy the students' notebooks into ``dest``; returns the exit status, 0.

    Refuses, before copying anything, when ``dest`` already holds a notebook of the same name (unless
    ``force``) or is not a folder that can be made: ValueError or OSError, with the reason.
    """
    sources = student_notebooks()
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest} is a file, not a folder; choose a folder for the notebooks")
    there = [source.name for source in sources if (dest / source.name).exists()]
    if there and not force:
        raise ValueError(f"{dest} already holds {', '.join(there)}; a student's work may be in them, so nothing "
                         f"was copied: choose another folder, or add --force to overwrite them")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for source in sources:
            shutil.copyfile(source, dest / source.name)
    except OSError as error:
        raise OSError(f"cannot copy the notebooks into {dest}: {error.strerror or error}") from None
    print(f"copied {len(sources)} notebooks into {dest}: open them with 'jupyter lab {dest}' "
          f"(Jupyter is in sgrad's notebooks extra)", file=sys.stderr)
    return 0
