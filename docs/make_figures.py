"""Draw the documentation's benchmark figures from the committed results.

Reads JSON files of ``benchmarks/results`` and writes SVG files to ``docs/figures``. The
figures are committed, so building the documentation needs neither matplotlib nor this script.
Run it again after a reference result changes:

    pip install matplotlib
    python docs/make_figures.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = Path(__file__).resolve().parent / "figures"
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
"""Relative error against SciPy in float64 above which a run does not count (as the benchmarks)."""

GPU_RUNS = {"H100": "kernels-h100-2026-11-27-ballot-{}.json",
            "H200": "kernels-h200-2026-11-27-ballot-{}.json"}
CPU_RUN = "cpu-float64-2026-11-22.json"
SOLVER_RUNS = {"2-core AMD EPYC": "solvers-amd-epyc-2c-2026-11-23-vector-rule.json",
               "16-core host of an H200": "solvers-h200-host-16c-2026-11-23-vector-rule.json"}
HELDOUT_RUN = "selection-heldout-gpu.json"

plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "autospmv", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False})


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def save(figure, name: str) -> None:
    figure.tight_layout()
    figure.savefig(FIGURES / name, metadata={"Date": None})
    plt.close(figure)
    print(f"wrote docs/figures/{name}")


def geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def gpu_speedups(record: dict) -> tuple[float, float | None]:
    """cuSPARSE's back-to-back time over the fastest correct kernel's, and over the
    automatically selected kernel's (None when that one was not timed)."""
    runs = [r for r in record["runs"] if r.get("feasible") and r["implementation"] == "registered"
            and r["error"] <= TOLERANCE[record["dtype"]] and "b2b_us" in r]
    best = min(r["b2b_us"] for r in runs)
    chosen = [r for r in runs if r["kernel"] == record["selected"]["kernel"]
              and r["params"] == record["selected"]["params"]]
    cusparse = record["cusparse"]["b2b_us"]
    return cusparse / best, (cusparse / chosen[0]["b2b_us"] if chosen else None)


def gpu_figure() -> None:
    figure, axes = plt.subplots(1, 2, figsize=(8.5, 5.6), sharey=True)
    for ax, (gpu, pattern) in zip(axes, GPU_RUNS.items()):
        names = None
        for offset, dtype, color in ((-0.2, "float32", "#4c72b0"), (0.2, "float64", "#dd8452")):
            records = load(pattern.format(dtype))["records"]
            names = names or [r["matrix"] for r in records]
            by_name = {r["matrix"]: gpu_speedups(r) for r in records}
            best = [by_name[n][0] for n in names]
            chosen = [by_name[n][1] for n in names]
            rows = [i + offset for i in range(len(names))]
            ax.barh(rows, best, height=0.4, color=color,
                    label=f"{dtype}: fastest kernel (geomean {geomean(best):.2f})")
            ax.plot([c for c in chosen if c], [r for r, c in zip(rows, chosen) if c], "k|",
                    markersize=5)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(names)), [n.replace("_x", " ×") for n in names])
        ax.invert_yaxis()
        ax.set_title(f"NVIDIA {gpu}")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), fontsize=7, frameon=False)
    figure.suptitle("19 matrices of about 2·10⁷ nonzeros, back-to-back; "
                    "| marks the automatic choice")
    figure.supxlabel("speed against cuSPARSE (cuSPARSE time / kernel time)", fontsize=9)
    save(figure, "gpu-kernels-vs-cusparse.svg")


def cpu_figure() -> None:
    records = load(CPU_RUN)["records"]
    figure, ax = plt.subplots(figsize=(6, 3.4))
    nnz = [r["nnz"] for r in records]
    scalar = [r["scipy_us"] / r["kernels"]["csr_scalar"]["us"] for r in records]
    best = [r["scipy_us"] / r["kernels"][r["best"]]["us"] for r in records]
    ax.scatter(nnz, best, s=40, facecolors="none", edgecolors="#dd8452", label="fastest kernel")
    ax.scatter(nnz, scalar, s=10, color="#4c72b0", marker="s", label="csr_scalar (the CPU rule)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("nonzeros")
    ax.set_ylabel("speed against SciPy\n(SciPy time / kernel time)")
    ax.set_title("31 shared matrices, float64, 2-core Intel Xeon, both cores")
    ax.legend(fontsize=7)
    save(figure, "cpu-kernels-vs-scipy.svg")


def solver_figure() -> None:
    figure, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.38
    for i, (machine, name) in enumerate(SOLVER_RUNS.items()):
        rows = [s for s in load(name)["summary"] if "large_geomean_ratio_min" in s]
        rows.sort(key=lambda s: s["solver"])
        x = [j + (i - 0.5) * width for j in range(len(rows))]
        ax.bar(x, [s["large_geomean_ratio_min"] for s in rows], width=width, label=machine)
        ax.set_xticks(range(len(rows)), [s["solver"] for s in rows])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("solve time with the operator\n/ solve time with SciPy")
    ax.set_title("SciPy solvers on the matrices of ≥ 10⁵ nonzeros (geometric mean)")
    ax.legend(fontsize=7, loc="lower right")
    save(figure, "solvers.svg")


def heldout_figure() -> None:
    results = load(HELDOUT_RUN)["results"]
    figure, ax = plt.subplots(figsize=(8, 3.4))
    labels, model, fixed, fixed_name = [], [], [], []
    for result in results:
        gpu = "H100" if "h100" in result["model"] else "H200"
        dtype = result["model"].removesuffix(".json").rsplit("-", 1)[-1]
        for cell, metrics in result["cells"].items():
            if cell == "as given":
                continue
            metrics = metrics["metrics"]
            labels.append(f"{gpu} {dtype}\n{cell.split()[0]}")
            model.append(metrics["model"]["geomean"])
            name, best = max(((k, v["geomean"]) for k, v in metrics.items()
                              if k.startswith("always ")), key=lambda kv: kv[1])
            fixed.append(best)
            fixed_name.append(name.removeprefix("always "))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], model, width=0.4, label="the shipped model")
    ax.bar([i + 0.2 for i in x], fixed, width=0.4, label="the best fixed kernel")
    for i, name in zip(x, fixed_name):
        ax.text(i + 0.2, fixed[i] + 0.01, name, ha="center", fontsize=7)
    ax.set_xticks(list(x), labels, fontsize=6)
    ax.set_ylim(0.6, 1.05)
    ax.set_ylabel("time of the fastest kernel\n/ time of the one used")
    ax.set_title("Held-out bases grown to ≥ 10⁷ nonzeros (16 each), geometric mean")
    ax.legend(fontsize=7, loc="lower right")
    save(figure, "selection-heldout.svg")


if __name__ == "__main__":
    FIGURES.mkdir(exist_ok=True)
    gpu_figure()
    cpu_figure()
    solver_figure()
    heldout_figure()
