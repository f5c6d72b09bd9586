"""What an install holds: the ``autospmv`` package alone, the training pipeline inside it.

The installed files come from setuptools' ``build_py`` step over a copy of the sources (the step
``pip wheel .`` runs, here without a build environment or network). A user's own
``training.py`` can then never shadow the pipeline, and ``python -m autospmv.training`` runs
from the install. Scripts in a source checkout (``PYTHONPATH=.``) import the same names without
installing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _env(pythonpath: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pythonpath)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder of files an install puts into site-packages."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("autospmv", "training", "models"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()",
                           "-q", "build_py", "--build-lib", str(out)],
                          cwd=source, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_an_install_holds_only_the_autospmv_package(installed):
    assert sorted(p.name for p in installed.iterdir()) == ["autospmv"]
    pipeline = sorted(p.name for p in (REPO / "training").glob("*.py"))
    assert sorted(p.name for p in (installed / "autospmv" / "training").glob("*.py")) == pipeline
    assert list((installed / "autospmv" / "models").glob("*.json"))


def test_an_install_ships_the_models_and_the_labels_summary_not_the_labels(installed):
    models = installed / "autospmv" / "models"
    shipped = sorted(str(p.relative_to(models)) for p in models.rglob("*") if p.is_file())
    assert shipped == sorted([*(p.name for pattern in ("*.json", "*.md")
                                for p in (REPO / "models").glob(pattern)),
                              "labels/labelling-times.json"])


def test_the_installed_forecast_reads_the_shipped_summary(installed, tmp_path):
    script = ("from autospmv.training.forecast import Forecast\n"
              "for device in ('cuda', 'cpu'):\n"
              "    forecast = Forecast.for_device(device)\n"
              "    print(len(forecast.reference), forecast.source)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(installed),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cuda, cpu = done.stdout.splitlines()
    assert int(cuda.split()[0]) > 1000
    assert cuda.endswith("(cuda-nvidia-h100-80gb-hbm3-float32.jsonl.gz)")
    assert int(cpu.split()[0]) > 100 and cpu.endswith("-float64.jsonl.gz)")


def test_the_installed_pipeline_runs_beside_a_users_training_module(installed, tmp_path):
    (tmp_path / "training.py").write_text("raise SystemExit('the user file ran')\n")
    done = subprocess.run([sys.executable, "-m", "autospmv.training", "--help"], cwd=tmp_path,
                          env=_env(installed), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: python -m autospmv.training")


def test_a_source_checkout_imports_the_pipeline_without_an_install(tmp_path):
    script = ("import sys\n"
              "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
              "import autospmv.training.label, autospmv.models\n"
              "print(autospmv.training.label.__file__)\n"
              "print(*autospmv.models.__path__)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(REPO),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(REPO / "training" / "label.py"), str(REPO / "models")]


@pytest.mark.parametrize("folder", ["autospmv", "tests", "benchmarks", "docs"])
def test_a_source_checkout_imports_no_other_folder_into_the_package(folder, tmp_path):
    """Only training/ and models/ import as ``autospmv.<folder>``; the checkout's other folders
    (the package's own among them) stay outside it."""
    script = ("import sys\n"
              "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
              "import importlib.util, autospmv\n"
              f"print(importlib.util.find_spec('autospmv.{folder}'))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(REPO),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "None"


def test_the_solver_benchmark_runs_from_an_install_on_generated_matrices(installed, tmp_path):
    import json

    out = tmp_path / "solvers.json"
    done = subprocess.run([sys.executable, "-m", "autospmv", "bench", "--solver", "--quick",
                           "--solvers", "cg", "--only", "2-D Poisson 300×300 grid",
                           "--rounds", "2", "--out", str(out)],
                          cwd=tmp_path, env=_env(installed), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [config] = json.loads(out.read_text())["configs"]
    [record] = config["records"]
    assert (record["matrix"], record["solver"]) == ("2-D Poisson 300×300 grid", "cg")
    assert record["same_products"] and record["solution_rel_diff"] < 1e-8
