"""The course site: Sphinx with MyST-NB (the engine of Jupyter Book 1), built offline from pip alone.

Build it from the checkout's root, warnings as errors:

    .venv/bin/python -m pip install -e '.[docs]'
    .venv/bin/sphinx-build -W --keep-going -c docs . docs/_build/html

The source folder is the checkout's root, so that the chapters are the notebooks in ``notebooks/`` as they
are committed (without outputs); ``include_patterns`` keeps everything else out. The build runs no notebook: each
chapter shows the outputs of one full-size run of its notebook, stored in ``docs/chapters/`` by
``docs/chapters.py`` (which says how to run it), merged in code cell by code cell as the chapter is read. A chapter
whose code changed since its stored run fails the build.
"""

import json
import os
import re
import sys

from numpy.typing import ArrayLike, DTypeLike
from sphinx.util import logging
from sphinx.util.typing import stringify_annotation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chapters  # docs/chapters.py

OUTPUTS = (
    "The outputs on these pages come from one run of each notebook at full size (`SGRAD_SMOKE=0`), stored in"
    " `docs/chapters/` by `docs/chapters.py`."
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

# Notebooks: never run here; their outputs come from docs/chapters/ (chapter_outputs, below). A Markdown output
# (a results table) is read as MyST, like the pages.
nb_execution_mode = "off"
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath", "amsmath", "substitution"]
myst_substitutions = {"outputs": OUTPUTS}
myst_heading_anchors = 3

# The API reference: the docstrings, in source order. A class lists its bases and every method it has, its
# bases' too (a student who subclasses Layer or DNI finds every method to call or override under it), except
# what every module shares (sgrad.nn.module.Module's, documented once there) and what Python's own types give
# (tuple's count, an exception's args). Types and defaults are in the signatures, as written in the source, one
# parameter a line once a signature is long; the docstrings describe.
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True,
                           "inherited-members": "Module,object,tuple,dict,Exception,BaseException"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
maximum_signature_line_length = 100
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
# No search button in a header bar above the page: the sidebar has the site's one search field.
html_theme_options = {"show_toc_level": 2, "use_download_button": False, "use_fullscreen_button": False,
                      "navbar_persistent": []}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_favicon = "_static/favicon.svg"
html_extra_path = ["_root"]
html_context = {"default_mode": "light"}  # the theme reads it; without it a fresh browser logs an error


# numpy.typing's ArrayLike and DTypeLike are unions of many types; a signature names them instead of spelling
# every member out.
TYPE_ALIASES = {stringify_annotation(alias, "smart"): f"~numpy.typing.{name}"
                for name, alias in (("ArrayLike", ArrayLike), ("DTypeLike", DTypeLike))}


def short_type_aliases(app, what, name, obj, options, signature, return_annotation):
    if not signature and not return_annotation:
        return None
    for spelled_out, alias in TYPE_ALIASES.items():
        signature = signature and signature.replace(spelled_out, alias)
        return_annotation = return_annotation and return_annotation.replace(spelled_out, alias)
    return signature, return_annotation


def no_docstring_of_a_builtin_type(app, what, name, obj, options, lines):
    """A module's constant (``__version__``) has no docstring of its own: autodoc must not show its type's (str's)."""
    own = type(obj).__doc__ if type(obj).__module__ == "builtins" else None
    if what in ("data", "attribute") and isinstance(own, str) and lines \
            and lines[0].strip() == own.strip().splitlines()[0].strip():
        lines.clear()


def chapter_outputs(app, docname, source):
    """A chapter (a notebook of notebooks/) as read: its cells as committed, with the outputs of its stored run."""
    if not docname.startswith("notebooks/"):
        return
    stored = chapters.stored_path(docname.split("/", 1)[1])
    app.env.note_dependency(str(stored))
    try:
        source[0] = chapters.with_outputs(source[0], stored)
    except ValueError as stale:
        logging.getLogger(__name__).warning(f"{docname}: {stale}", location=docname)


def outputs_stamp(app, pagename, templatename, context, doctree):
    """A chapter whose outputs are its notebook's full-size run says so in a meta tag (the site's tests look)."""
    if pagename.startswith("notebooks/"):
        stem = pagename.split("/", 1)[1]
        notebook = json.loads((chapters.NOTEBOOKS / f"{stem}.ipynb").read_text())
        stored = chapters.stored_path(stem)
        if stored.exists() and chapters.why_stale(notebook, json.loads(stored.read_text())) is None:
            context["metatags"] = context.get("metatags", "") + '\n<meta name="sgrad-outputs" content="full size">'


def setup(app):
    app.connect("source-read", chapter_outputs)
    app.connect("html-page-context", outputs_stamp)
    app.connect("autodoc-process-docstring", no_docstring_of_a_builtin_type)
    app.connect("autodoc-process-docstring", argument_lists_as_definitions)
    app.connect("autodoc-process-signature", short_type_aliases)
