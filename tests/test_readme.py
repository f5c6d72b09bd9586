"""The documentation's examples run as written.

Every ```python block of README.md runs, in order, in one fresh interpreter (a new user's
session) in an empty folder, on the CPU (``NUMBA_DISABLE_CUDA=1``), with an empty autospmv data
folder (``AUTOSPMV_HOME``) so that the shipped models decide. Then the commands of the ```sh
blocks of README.md and models/README.md are taken one by one: the cheap ones (``explain``,
``info``, ``models``: they decide or list, they time nothing) run in that folder and must succeed;
the others (installs, the test suite, ``demo``, ``bench``, ``retrain``, ``training``: slow or
machine-changing) are parsed by the command line's own parser, so that a renamed command or
option fails here too. ```text blocks are output; the README's sample ``explain()`` output must
start as the real one does.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autospmv import __main__ as cli
from training.__main__ import _parser as training_parser

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MODEL_CARD = REPO / "models" / "README.md"
LANGUAGES = ("python", "sh", "text")
RUN = ("explain", "info", "models")
"""``python -m autospmv`` commands cheap enough to run here."""
NOT_RUN = ("pip install ", "python -m pytest", "AUTOSPMV_UPDATE_GOLDEN=1 python -m pytest")
"""Commands that CI itself runs (``.ci/run``) or that rewrite files of the repository."""


def blocks(path: Path, language: str) -> list[str]:
    """The code blocks of ``path`` fenced as ```language."""
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def commands(path: Path) -> list[str]:
    """The commands of the ```sh blocks: continuation lines joined, comments dropped, ``&&``
    chains split."""
    out = []
    for block in blocks(path, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            out += [part.strip() for part in line.split("&&") if part.strip()]
    return out


def environment(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOSPMV_MODEL", "NUMBA_ENABLE_CUDASIM")}
    env.update(NUMBA_DISABLE_CUDA="1", AUTOSPMV_HOME=str(home), TQDM_DISABLE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    return env


@pytest.mark.parametrize("path", [README, MODEL_CARD], ids=["README", "models-README"])
def test_every_code_block_says_what_it_is(path):
    """Each fence names python (run), sh (commands) or text (output), so none is left out."""
    fences = re.findall(r"^```(\S*)$", path.read_text(encoding="utf-8"), flags=re.M)
    openings = fences[0::2]
    assert all(language in LANGUAGES for language in openings), openings


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Run the README's Python blocks in a fresh interpreter; (folder, env, its output)."""
    folder = tmp_path_factory.mktemp("readme")
    env = environment(folder / "autospmv-home")
    script = "\n\n".join(blocks(README, "python"))
    script += '\n\nprint("--- explain ---")\nprint(autospmv.select(P, device="cuda").explain())\n'
    (folder / "readme_blocks.py").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "readme_blocks.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, env, done.stdout


def test_python_blocks_run(session):
    _, _, out = session
    kernel, params = out.splitlines()[0].split(" ", 1)
    assert kernel in cli.KERNELS and params.startswith("{")


def test_sample_explain_output_matches_the_real_one(session):
    """The README's sample ``explain()`` output is what it prints for its matrix: the decision
    lines exactly, the notes up to their first figure (timings vary)."""
    _, _, out = session
    real = out.split("--- explain ---\n", 1)[1].splitlines()
    command = '>>> print(autospmv.select(P, device="cuda").explain())'
    sample = next(b for b in blocks(README, "text") if command in b).splitlines()
    assert sample[0] == command and sample[1:3] == real[:2]

    def start(line: str) -> str:
        return re.split(r"\d", line, maxsplit=1)[0]

    assert [start(line) for line in sample[3:]] == [start(line) for line in real[2:]]


@pytest.mark.parametrize("command", commands(README) + commands(MODEL_CARD))
def test_shell_commands(command, session):
    folder, env, _ = session
    if command.startswith(NOT_RUN):
        return
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], f"add {command!r} to tests/test_readme.py"
    program, argv = words[2], words[3:]
    if program == "autospmv" and argv[0] in RUN:
        done = subprocess.run([sys.executable, "-m", "autospmv", *argv], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout and "Traceback" not in done.stderr
    elif program == "autospmv" and argv[0] == "retrain":
        training_parser("autospmv").parse_args(argv)
    elif program == "autospmv":
        cli.build_parser().parse_args(argv)
    else:
        assert program == "training", f"add {command!r} to tests/test_readme.py"
        training_parser().parse_args(argv)
