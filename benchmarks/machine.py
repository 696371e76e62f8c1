"""One line for a benchmark's report: the CPU, whether it has AVX-512, and any OpenBLAS kernel override.

The float32 ratios of ``lstm_step.py`` and ``cnn_step.py`` depend on which matrix-product kernels OpenBLAS
and PyTorch's oneDNN pick for the CPU, so a figure means little without this line.  OpenBLAS picks by the
CPU it detects unless ``OPENBLAS_CORETYPE`` names a kernel set; naming one the CPU cannot run (SkylakeX
on a CPU without AVX-512) stops the process with an illegal instruction.
"""

import datetime
import json
import os
import pathlib
import platform
import sys


def describe() -> str:
    """``'CPU: <model> (AVX-512: yes|no|unknown); OPENBLAS_CORETYPE=<value or unset>'``."""
    model, flags = platform.processor() or platform.machine(), None
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():  # Linux: the model name and the instruction-set flags of the first CPU
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in (platform.processor(), platform.machine()):
                model = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = set(value.split())
    avx512 = "unknown" if flags is None else ("yes" if "avx512f" in flags else "no")
    return f"CPU: {model} (AVX-512: {avx512}); OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}"


def write_record(path: str, load_before: float, **fields) -> None:
    """Write a benchmark's record, JSON at ``path``: its command, machine, date and load average, then ``fields``."""
    import numpy as np

    record = {"command": " ".join(["python", f"benchmarks/{pathlib.Path(sys.argv[0]).name}", *sys.argv[1:]]),
              "machine": describe(), "numpy": np.__version__, "date": datetime.date.today().isoformat(),
              "load": [round(load_before, 2), round(os.getloadavg()[0], 2)], **fields}
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    print(describe())
