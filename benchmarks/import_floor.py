"""What a new process pays before autospmv does any work: the libraries it must import and,
for the GPU, the CUDA context and CuPy's first operation.

Each step is timed in its own fresh interpreter (``python -c``), in the order a first product
needs them, so that a step's time excludes the steps before it; every interpreter is run
``--repeats`` times after an untimed run and the median reported. The sum is the floor of a
warm start (import, first ``prepare()``, first product) with the project's stack, whatever
autospmv itself does.

    python benchmarks/import_floor.py [--device cpu|cuda] [--repeats 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

STEP = """
import time, sys
{before}
started = time.perf_counter()
{step}
print(time.perf_counter() - started)
"""

CPU_STEPS = [
    ("numpy", "", "import numpy"),
    ("scipy.sparse", "import numpy", "import scipy.sparse"),
    ("numba", "import numpy, scipy.sparse", "import numba"),
    ("numba's CPU target (built at the first call of any compiled function, cached or not)",
     "import numpy, scipy.sparse, numba",
     "from numba.core.registry import cpu_target\n"
     "cpu_target.typing_context.refresh()\ncpu_target.target_context.refresh()"),
]
GPU_STEPS = [
    ("numba.cuda", "import numpy, scipy.sparse, numba", "from numba import cuda"),
    ("CUDA context", "import numpy, scipy.sparse, numba\nfrom numba import cuda",
     "cuda.current_context()"),
    ("cupy", "import numpy, scipy.sparse, numba\nfrom numba import cuda\ncuda.current_context()",
     "import cupy"),
    ("CuPy's first operation", "import numpy, scipy.sparse, numba\nfrom numba import cuda\n"
     "cuda.current_context()\nimport cupy", "cupy.arange(10).sum().item()"),
]


def time_step(before: str, step: str, repeats: int) -> float:
    """Median seconds of ``step`` in a fresh interpreter that has run ``before``, after one
    untimed run. Python's bytecode is written as an installed package has it (pip compiles it
    at install), so that no run compiles the libraries' sources."""
    code = STEP.format(before=before, step=step)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times = []
    for _ in range(repeats + 1):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env=env)
        times.append(float(done.stdout.split()[-1]))
    return statistics.median(times[1:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    steps = CPU_STEPS + (GPU_STEPS if args.device == "cuda" else [])
    result = {"benchmark": "import_floor", "device": args.device, "python": sys.version.split()[0],
              "cpu": platform.processor() or platform.machine(), "repeats": args.repeats,
              "steps": {}}
    for name, before, step in steps:
        seconds = time_step(before, step, args.repeats)
        result["steps"][name] = seconds
        print(f"{name}: {seconds * 1e3:.0f} ms", flush=True)
    result["total_s"] = sum(result["steps"].values())
    print(f"total: {result['total_s'] * 1e3:.0f} ms")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
