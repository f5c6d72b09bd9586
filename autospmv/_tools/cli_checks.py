"""Checks that the command lines share (``autospmv``, ``autospmv bench --solver`` and
``python -m autospmv.training``), so that every user mistake ends the same way: one line
``<prog>: error: <what is wrong and what is allowed>`` on stderr and exit status 2, before any
work starts.

* :class:`OneLineParser`: an ``argparse`` parser whose errors are that one line (argparse's own
  print the usage too);
* :func:`bounded`: an option type that range-checks a number;
* :func:`output_path`: an output file's path checked before any work (its folder must exist; an
  existing entry must be a regular file);
* :func:`ending_with_parent`: child processes that end when the command ends.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import stat
import sys
from pathlib import Path


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose usage errors are one line on stderr, exit status 2.

    Examples
    --------
    >>> parser = OneLineParser(prog="autospmv demo")
    >>> parser.error("no such option")  # doctest: +SKIP
    autospmv demo: error: no such option
    """

    def error(self, message: str):
        """Print ``<prog>: error: <message>`` (one line) and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def bounded(kind, low=None, high=None, *, above=None):
    """An argparse ``type`` reading a number of ``kind`` (int or float) within [low, high].

    Parameters
    ----------
    kind : type
        ``int`` or ``float``.
    low, high : number, optional
        The smallest and largest allowed values (None: unbounded on that side).
    above : number, optional
        A bound the value must exceed (for "any positive number": ``above=0``).

    Returns
    -------
    callable
        ``parse(text) -> number``, raising ``argparse.ArgumentTypeError`` (reported by the
        parser in one line) for text that is no such number or one out of range.

    Examples
    --------
    >>> bounded(int, 1, 100)("5")
    5
    >>> bounded(int, 1, 100)("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 0 is out of range: an integer from 1 to 100 is allowed
    """
    words = "an integer" if kind is int else "a number"
    if above is not None:
        allowed = f"{words} above {above:g}" + (f" and at most {high:g}" if high is not None
                                                else "")
    elif low is not None and high is not None:
        allowed = f"{words} from {low:g} to {high:g}"
    elif low is not None:
        allowed = f"{words} of at least {low:g}"
    else:
        allowed = f"{words} of at most {high:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {words}: {allowed} is "
                                             "allowed") from None
        if (isinstance(value, float) and not math.isfinite(value)) or \
                (low is not None and value < low) or (high is not None and value > high) or \
                (above is not None and value <= above):
            raise argparse.ArgumentTypeError(f"{text} is out of range: {allowed} is allowed")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def output_path(path, what: str = "output file") -> Path:
    """``path`` as a Path, checked before any work writes to it.

    Parameters
    ----------
    path : str or PathLike
        Where a command will write a file.
    what : str
        What the file is, for the message.

    Returns
    -------
    Path
        The path, unchanged.

    Raises
    ------
    ValueError
        When its folder does not exist (it is not created), is no folder, or the path names
        something other than a regular file (a folder, a device such as ``/dev/null``, a pipe),
        or a name the file system refuses (too long).

    Examples
    --------
    >>> output_path("/nonexistent/folder/out.json")
    Traceback (most recent call last):
    ValueError: output file /nonexistent/folder/out.json: the folder /nonexistent/folder does not exist (it is not created); name an existing folder
    """
    path = Path(path)
    folder = path.parent
    try:
        if not folder.is_dir():
            problem = ("is not a folder" if folder.exists() else
                       "does not exist (it is not created); name an existing folder")
            raise ValueError(f"{what} {path}: the folder {folder} {problem}")
        mode = os.stat(path).st_mode if os.path.lexists(path) else None
    except OSError as error:  # a name too long, a folder that cannot be read
        raise ValueError(f"{what} {str(path)[:200]}: {error.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ValueError(f"{what} {path} exists and is not a regular file; name a file")
    return path


def ending_with_parent(then=None):
    """A ``preexec_fn`` for ``subprocess`` that makes the child end with the process that
    starts it (this one): on Linux the child asks for SIGTERM when its parent ends, so that a
    command stopped or killed leaves no child running; elsewhere only ``then`` runs.

    Parameters
    ----------
    then : callable, optional
        Run in the child afterwards (such as pinning it to some cores).

    Returns
    -------
    callable
        The function to pass as ``preexec_fn``.
    """
    parent = os.getpid()

    def setup() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the parent ended before the request took effect
                os._exit(1)
        if then is not None:
            then()

    return setup
