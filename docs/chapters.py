"""The chapters' outputs as the site publishes them: each notebook in ``notebooks/`` run once at full size.

The tests run the notebooks at ``SGRAD_SMOKE=1``, every size shrunk; a reader of the site must see the runs the text
describes. This script runs each notebook top to bottom in a fresh kernel with ``SGRAD_SMOKE=0`` and stores the
executed copy in ``docs/chapters/``, one notebook at a time. From the checkout's root:

    OPENBLAS_NUM_THREADS=1 SGRAD_DATA_DIR=/path/to/data .venv/bin/python docs/chapters.py          # the stale ones
    OPENBLAS_NUM_THREADS=1 SGRAD_DATA_DIR=/path/to/data .venv/bin/python docs/chapters.py 04 08    # these, again
    .venv/bin/python docs/chapters.py --check                                                      # which are stale

A stored copy is stale when it is missing or when a code cell of the notebook differs from the one that ran; a
notebook whose code is unchanged only gets its Markdown copied, without a run. A run whose outputs show a
smoke-size run, a "not found" message, a path on this machine or an error is not stored, and the script says why
(MNIST must be found: set ``SGRAD_DATA_DIR`` to the folder that holds ``mnist.npz``). The stored copy keeps its
outputs as the kernel gave them (figures as PNG), no widget state, and the seconds the run took in its metadata.

The site's build (``docs/conf.py``) renders each chapter from ``notebooks/``, its Markdown as it is now, with the
outputs of the stored copy, code cell by code cell; a chapter whose stored copy is stale fails the build.
"""

import argparse
import json
import os
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
STORE = ROOT / "docs" / "chapters"
FULL_SIZE = {"SGRAD_SMOKE": "0"}

# What a published output must never show: the notebooks' smoke-run banner, a loader that found nothing, a path on
# the machine that ran it.
FORBIDDEN = re.compile(r"SGRAD_SMOKE=1|not found|(?<![\w.])/(?:work|root|home|tmp)/")


def code_sources(notebook):
    """The source of every code cell, in order."""
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def stored_path(stem):
    return STORE / f"{stem}.ipynb"


def why_stale(notebook, stored):
    """None if ``stored`` (a notebook dict or None) holds the full-size outputs of ``notebook``'s code; else why not."""
    if stored is None:
        return "no stored run"
    if stored.get("metadata", {}).get("sgrad", {}).get("environment") != FULL_SIZE:
        return "the stored run is not a full-size run (SGRAD_SMOKE=0)"
    mine, theirs = code_sources(notebook), code_sources(stored)
    if len(mine) != len(theirs):
        return f"the notebook has {len(mine)} code cells, the stored run {len(theirs)}"
    changed = [i for i, (a, b) in enumerate(zip(mine, theirs), start=1) if a != b]
    if changed:
        return f"code cell {changed[0]} differs from the one that ran" + (f" (and {len(changed) - 1} more)"
                                                                        if len(changed) > 1 else "")
    return None


def output_text(output):
    """Everything an output shows as text: a stream, an error, or a display's text and Markdown."""
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return "\n".join(output["traceback"])
    data = output.get("data", {})
    return "".join("".join(data.get(kind, "")) for kind in ("text/plain", "text/markdown", "text/html"))


def problems(notebook):
    """What in ``notebook``'s outputs must not be published, as one line each."""
    found = []
    for number, cell in enumerate((c for c in notebook["cells"] if c["cell_type"] == "code"), start=1):
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                found.append(f"code cell {number} raised {output['ename']}")
            for match in FORBIDDEN.finditer(output_text(output)):
                found.append(f"code cell {number} shows {match.group(0)!r}")
    return found


def slim(notebook):
    """The notebook without widget state or kernel details: only what the pages show."""
    notebook["metadata"].pop("widgets", None)
    notebook["metadata"]["language_info"] = {"name": "python"}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    return notebook


def execute(path):
    """``path`` run top to bottom at full size in a fresh kernel; the executed notebook (a dict) and seconds taken."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    saved = {name: os.environ.get(name) for name in FULL_SIZE}
    os.environ.update(FULL_SIZE)
    start = time.perf_counter()
    try:
        NotebookClient(notebook, timeout=3600, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    return json.loads(nbformat.writes(notebook)), time.perf_counter() - start


def write(path, notebook):
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def merged(notebook, stored):
    """``notebook`` (a dict, changed in place) with the outputs of ``stored``, a run of the same code cells."""
    ran = (cell for cell in stored["cells"] if cell["cell_type"] == "code")
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            done = next(ran)
            cell["outputs"], cell["execution_count"] = done["outputs"], done["execution_count"]
    return notebook


def with_outputs(text, stored_file):
    """The notebook ``text`` (JSON) with the outputs of the stored run in ``stored_file``; ValueError if it is stale."""
    notebook = json.loads(text)
    stored = json.loads(stored_file.read_text()) if stored_file.exists() else None
    reason = why_stale(notebook, stored)
    if reason:
        raise ValueError(f"{reason}: run `python docs/chapters.py {stored_file.stem[:2]}` (see docs/chapters.py)")
    return json.dumps(merged(notebook, stored), ensure_ascii=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", metavar="NN", help="run these notebooks again (by number, e.g. 04)")
    parser.add_argument("--all", action="store_true", help="run every notebook again")
    parser.add_argument("--check", action="store_true", help="only say which stored runs are stale (exit 1 if any)")
    args = parser.parse_args(argv)

    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    unknown = [n for n in args.notebooks if not any(p.stem.startswith(n) for p in paths)]
    if unknown:
        parser.error(f"no notebook numbered {', '.join(unknown)} in notebooks/")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread a process: the README's minutes are so
    STORE.mkdir(exist_ok=True)
    failed = stale = 0
    for path in paths:
        notebook = json.loads(path.read_text())
        target = stored_path(path.stem)
        stored = json.loads(target.read_text()) if target.exists() else None
        reason = why_stale(notebook, stored)
        chosen = args.all or any(path.stem.startswith(n) for n in args.notebooks)
        if args.check:
            if reason:
                stale += 1
                print(f"{path.name}: {reason}")
            continue
        if not chosen and not reason:
            refreshed = dict(merged(notebook, stored), metadata=stored["metadata"])
            if refreshed != stored:
                write(target, refreshed)
                print(f"{path.name}: Markdown copied (code unchanged, no run)")
            continue
        print(f"{path.name}: running at full size ({reason or 'asked for'}) ...", flush=True)
        try:
            executed, seconds = execute(path)
        except Exception as error:  # a failing cell: say which, store nothing
            failed += 1
            print(f"{path.name}: not stored: {str(error).strip().splitlines()[-1]}")
            continue
        found = problems(executed)
        if found:
            failed += 1
            print(f"{path.name}: not stored: " + "; ".join(found[:5]))
            continue
        executed["metadata"]["sgrad"] = {"environment": FULL_SIZE, "seconds": round(seconds, 1)}
        write(target, slim(executed))
        print(f"{path.name}: stored in {target.relative_to(ROOT)} ({seconds / 60:.1f} minutes, "
              f"{target.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
