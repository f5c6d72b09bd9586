"""What every method's iteration tells the driver (:mod:`.driver`) about itself."""

from __future__ import annotations

from .scalars import ITERATIONS


class Method:
    """A method's iteration on a machine. Subclasses set the class attributes and write
    :meth:`start` and :meth:`iteration` in the machine's calls (:mod:`.machines`)."""

    name = ""
    rows: tuple = ()
    """The workspace's vectors by name (each a row of the machine's workspace)."""
    scalars = 0
    """Length of the scalar array ``s``."""
    products_per_iteration = 1
    period = 1
    """Iterations after which the rows the iteration uses repeat (a captured graph holds a
    multiple of it)."""
    eager = 0
    """Iterations run eagerly before capturing (their rows differ from the periodic ones)."""

    def __init__(self, m):
        self.m = m
        for name in self.rows:
            setattr(self, name, m.row(name))

    @staticmethod
    def default_maxiter(n: int) -> int:
        """SciPy's default iteration limit."""
        return 10 * n

    @classmethod
    def configure(cls, n: int, options: dict) -> dict:
        """The method's options for a problem of size n, checked and completed."""
        return options

    @classmethod
    def scalar_count(cls, options: dict) -> int:
        return cls.scalars

    @classmethod
    def partial_sums(cls, options: dict) -> int:
        """The most sums one of the method's steps makes (two but for :class:`.steps.MultiStep`)."""
        return 2

    @classmethod
    def workspace_rows(cls, options: dict) -> int:
        return len(cls.rows)

    def initial_scalars(self, *, bnrm2: float, rtol: float, atol: float, maxiter: int) -> dict:
        """Slots of ``s`` to set before :meth:`start`, besides the tolerance."""
        return {}

    def callbacks_due(self, flags) -> int:
        """How many times SciPy would have called the callback by now."""
        return int(flags[ITERATIONS])

    def iterations_per_replay(self, wanted: int) -> int:
        return -(-wanted // self.period) * self.period

    def start(self, x0_given: bool) -> None:
        raise NotImplementedError

    def iteration(self, eager: bool = False) -> None:
        """Queue one iteration (``eager``: run now, the host may read the flags as it goes,
        as a method whose iteration has parts that end early does)."""
        raise NotImplementedError
