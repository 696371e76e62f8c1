"""Benchmark: how long each course notebook takes at full size, for the README's minutes column.

Each notebook runs top to bottom in a fresh python3 Jupyter kernel with ``SGRAD_SMOKE=0``, one at a time,
and its wall time goes into a JSON record (``docs/notebook-times.json``), with the date, the machine and the
load average before and after, since the cores may be shared.  Notebooks not named keep their entry, so
the record can be refreshed one notebook at a time.  ``docs/tables.py`` writes the README's column from it.

Run:  OPENBLAS_NUM_THREADS=1 SGRAD_DATA_DIR=/folder/with/mnist.npz \\
          python benchmarks/notebook_times.py [--only 04 11] [--out docs/notebook-times.json]
Needs the ``notebooks`` extra (nbclient, nbformat and a python3 kernel).
"""

import argparse
import datetime
import json
import os
import pathlib
import time

from machine import describe  # beside this file, on the path of a script run as a file

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def run(path: pathlib.Path) -> float:
    """Execute the notebook at ``path`` at full size in a fresh kernel; returns its wall time in seconds."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    os.environ["SGRAD_SMOKE"] = "0"
    start = time.perf_counter()
    NotebookClient(notebook, timeout=3600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="NN",
                        help="the notebooks' numbers (default: every notebook in notebooks/)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/notebook-times.json"))
    args = parser.parse_args()
    paths = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if args.only is not None:
        paths = [p for p in paths if p.name[:2] in args.only]
        if not paths:
            parser.error(f"no notebook numbered {' '.join(args.only)} in {NOTEBOOK_DIR}")
    record = json.loads(args.out.read_text()) if args.out.exists() else {"notebooks": {}}
    for path in paths:
        load_before = os.getloadavg()[0]
        seconds = run(path)
        record["notebooks"][path.stem] = {
            "seconds": round(seconds, 1), "date": datetime.date.today().isoformat(), "machine": describe(),
            "cores": os.cpu_count(), "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
            "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}
        record["notebooks"] = dict(sorted(record["notebooks"].items()))
        args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"{path.stem}: {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
