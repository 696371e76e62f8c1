"""The course site: Sphinx with MyST-NB (the engine of Jupyter Book 1), built offline from pip alone.

Build it from the checkout's root, warnings as errors:

    .venv/bin/python -m pip install -e '.[docs]'
    .venv/bin/sphinx-build -W --keep-going -c docs . docs/_build/html

The source folder is the checkout's root, so that the chapters are the notebooks in ``notebooks/`` as they
are committed (without outputs); ``include_patterns`` keeps everything else out. The notebooks are executed
at build time with ``SGRAD_SMOKE=1`` (small sizes: the whole build took 112 s in CI) unless the environment already
sets ``SGRAD_SMOKE`` (``SGRAD_SMOKE=0`` gives the full-size outputs).
"""

import os
import re

os.environ.setdefault("SGRAD_SMOKE", "1")
SMOKE = os.environ["SGRAD_SMOKE"] == "1"
OUTPUTS = (
    "The outputs on these pages come from executing each notebook when the site was built, with the smoke flag"
    " `SGRAD_SMOKE=1` (every size shrunk, so the whole course runs in a minute or two): the curves are short and"
    " the numbers small-sample. Run a notebook yourself, or build the site with `SGRAD_SMOKE=0`, for the full"
    " size." if SMOKE else
    "The outputs on these pages come from executing each notebook at full size (`SGRAD_SMOKE=0`) when the site"
    " was built."
)

project = "sgrad"
author = "the sgrad authors"
copyright = "the sgrad authors"

root_doc = "docs/index"
include_patterns = ["docs/*.md", "docs/results/*.md", "notebooks/*.ipynb"]
exclude_patterns = [".venv", ".git", "docs/_build", "results", "**/.ipynb_checkpoints"]

# Equations: MathJax 3 from the sphinx-mathjax-offline package, which copies it into the site and points
# the pages at that copy, so that no page loads anything from outside.
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax", "sphinx-mathjax-offline"]

# Notebooks: run at build time in a fresh kernel each, a failing cell fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True
myst_enable_extensions = ["dollarmath", "amsmath", "substitution"]
myst_substitutions = {"outputs": OUTPUTS}
myst_heading_anchors = 3

# The API reference: the docstrings, in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True  # "Attributes" sections as fields, so a property is not described twice


# sgrad's docstrings list arguments as "name : what it is", continued on lines indented below it (as CS231n's
# do). reStructuredText would read such a list as paragraphs and stray indents; this turns each entry into an
# item of a definition list, its names as code.
ENTRY = re.compile(r"^(?P<names>[A-Za-z_]\w*(?:, [A-Za-z_]\w*)*) : (?P<what>\S.*)$")


def argument_lists_as_definitions(app, what, name, obj, options, lines):
    out: list[str] = []
    i = 0
    while i < len(lines):
        entry = ENTRY.match(lines[i])
        if not entry:
            out.append(lines[i])
            i += 1
            continue
        names = ", ".join(f"``{n.strip()}``" for n in entry["names"].split(","))
        body = [entry["what"]]
        i += 1
        while i < len(lines) and lines[i][:1].isspace() and lines[i].strip():
            body.append(lines[i].strip())
            i += 1
        out += ["", names] + ["   " + line for line in body] + [""]
    lines[:] = out

html_theme = "sphinx_book_theme"
html_title = "sgrad: synthetic gradients in NumPy"
html_theme_options = {"show_toc_level": 2, "use_download_button": False, "use_fullscreen_button": False}
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"
html_extra_path = ["_root"]
html_context = {"default_mode": "light"}  # the theme reads it; without it a fresh browser logs an error



def setup(app):
    app.connect("autodoc-process-docstring", argument_lists_as_definitions)
