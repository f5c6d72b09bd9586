"""The documentation's examples run as written.

The ```python blocks of README.md and of each page of docs/ run in order, each page in a fresh
interpreter (a new user's session), all in one empty folder, on the CPU (``NUMBA_DISABLE_CUDA=1``),
with an empty autospmv data folder (``AUTOSPMV_HOME``) so that the shipped models decide.
README.md runs first: it writes the ``poisson.npz`` that the commands read. A ```text block whose
first line starts with ``>>> `` is sample output: the page's session runs that line too, and the
sample must read as the real output does (every line but the notes exactly, the notes up to their
first figure, since timings vary). Then the commands of the ```sh blocks of README.md, docs/ and
models/README.md are taken one by one: the cheap ones (``explain``, ``info``, ``models``: they
decide or list, they time nothing) run in that folder and must succeed; the others (installs, the
test suite, the documentation build, ``demo``, ``bench``, ``retrain``, the training steps) are
parsed by the command line's own parser, so that a renamed command or option fails here too, and
a script named by its path must exist.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import autospmv
from autospmv import __main__ as cli
from autospmv.training.__main__ import _parser as training_parser

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MODEL_CARD = REPO / "models" / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
"""The pages whose Python blocks run, README.md first."""
LANGUAGES = ("python", "sh", "text")
RUN = ("explain", "info", "models")
"""``python -m autospmv`` commands cheap enough to run here."""
NOT_RUN = ("pip install ", "python -m pytest", "AUTOSPMV_UPDATE_GOLDEN=1 python -m pytest",
           "python -m sphinx ")
"""Commands that CI itself runs (``.ci/run``; tests/test_docs.py builds the documentation) or
that rewrite files of the repository."""
README_MAX_LINES = 200


def name(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks(path: Path, language: str) -> list[str]:
    """The code blocks of ``path`` fenced as ```language."""
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def samples(path: Path) -> list[list[str]]:
    """The ```text blocks of ``path`` that show a ``>>> `` line and its output, as lines."""
    return [block.splitlines() for block in blocks(path, "text") if block.startswith(">>> ")]


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


def sample_marker(k: int) -> str:
    return f"--- sample {k} ---"


@pytest.mark.parametrize("path", [*PAGES, MODEL_CARD], ids=name)
def test_every_code_block_says_what_it_is(path):
    """Each fence names python (run), sh (commands) or text (output), so none is left out;
    ```{name} fences are directives of the documentation build (MyST), not code."""
    fences = re.findall(r"^```(\S*)$", path.read_text(encoding="utf-8"), flags=re.M)
    openings = [fence for fence in fences[0::2] if not fence.startswith("{")]
    assert all(language in LANGUAGES for language in openings), openings


def test_readme_is_a_short_front_page():
    """Details belong in docs/; the README says what autospmv is, how to install and use it."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_links_lead_somewhere():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local and all((REPO / link).exists() for link in local), local


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """Run each page's Python blocks, and its samples' ``>>> `` lines, in a fresh interpreter;
    (folder, env, {page: finished process})."""
    folder = tmp_path_factory.mktemp("docs")
    env = environment(folder / "autospmv-home")
    done = {}
    for page in PAGES:
        script = "\n\n".join(blocks(page, "python"))
        if not script:
            continue
        for k, sample in enumerate(samples(page)):
            script += f"\n\nprint({sample_marker(k)!r})\n{sample[0][4:]}\n"
        (folder / "page.py").write_text(script, encoding="utf-8")
        done[page] = subprocess.run([sys.executable, "page.py"], cwd=folder, env=env,
                                    capture_output=True, text=True, timeout=600)
    return folder, env, done


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=name)
def test_python_blocks_run(page, sessions):
    _, _, done = sessions
    assert done[page].returncode == 0, done[page].stderr[-3000:]


@pytest.mark.slow
def test_readme_example_prints_the_kernel(sessions):
    _, _, done = sessions
    kernel, params = done[README].stdout.splitlines()[0].split(" ", 1)
    assert kernel in autospmv.KERNELS and params.startswith("{")


@pytest.mark.slow
@pytest.mark.parametrize("page, k", [(p, k) for p in PAGES for k in range(len(samples(p)))],
                         ids=lambda v: name(v) if isinstance(v, Path) else str(v))
def test_sample_output_matches_the_real_one(page, k, sessions):
    """A sample reads as the real output: every line but the notes exactly, the notes up to
    their first figure (timings vary)."""
    _, _, done = sessions
    assert page in done, f"{name(page)} shows output but runs no Python block"
    out = done[page].stdout
    real = out.split(sample_marker(k) + "\n", 1)[1].split("\n--- sample ", 1)[0].splitlines()
    sample = samples(page)[k][1:]

    def start(line: str) -> str:
        return re.split(r"\d", line, maxsplit=1)[0] if line.lstrip().startswith("note:") else line

    assert [start(line) for line in sample] == [start(line) for line in real]


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted({c for p in [*PAGES, MODEL_CARD] for c in commands(p)}))
def test_shell_commands(command, sessions):
    folder, env, _ = sessions
    if command.startswith(NOT_RUN):
        return
    words = shlex.split(command)
    if words[0] == "python" and words[1].endswith(".py"):
        assert (REPO / words[1]).is_file(), f"{command!r}: no such script"
        return
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
        assert program == "autospmv.training", f"add {command!r} to tests/test_readme.py"
        training_parser().parse_args(argv)
