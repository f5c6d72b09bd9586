"""Deciding in the background: ``prepare(A, background=True)``.

The operator runs at once on a kernel that converts nothing, the start kernel of
:data:`START_KERNEL` (on the GPU the uploaded CSR is csr_vector's format; on the CPU the
canonical CSR is csr_scalar's), while a thread decides as :func:`autospmv.prepare` decides and
converts A for the chosen kernel. The product that follows the thread's end switches the
operator to the chosen kernel, in the caller's thread and between two products, so no product
runs half on one format and half on the other; ``op.wait()`` waits for the thread and switches.
The switch is one hand-over (:func:`adopt`): any number of threads may make products, wait,
pickle or explain through it. A model that ``model=`` or ``AUTOSPMV_MODEL`` names is loaded
before the thread starts, so that a broken one raises in ``prepare``; a decision that fails on
the thread warns at the switch, and the operator keeps the start kernel.
On the GPU the switch first waits for the products in flight (a device synchronisation), since
they read the format it releases. Each product is exact to the rounding of the kernel that ran
it. The thread's GPU work queues on a stream of its own (:func:`on_own_stream`), so it runs
beside the products instead of behind them. A matrix decided in a fraction of a millisecond
(at most :data:`~autospmv._decide.features.sampling.SAMPLE_THRESHOLD` nonzeros on the GPU), and one
with a row longer than :data:`START_MAX_ROW`, which the start kernel runs slowly, are decided
before ``prepare`` returns, as without ``background``, with a note saying why for the latter.

The thread reads a snapshot of A: on the CPU the start operator's own CSR (a copy when the
caller's arrays were canonical already, as for every CSR kernel), on the GPU the uploaded copy
and a copy of the row pointer. Changing A after ``prepare`` returns changes nothing.

What it saves is the decision and the conversion before the first product; what it costs is
the products that run on the start kernel until the switch, and, on the GPU, the thread's
kernels sharing the device with them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings

import scipy.sparse as sp

from ..formats.base import DeviceCSR

START_KERNEL = {"cuda": "csr_vector", "cpu": "csr_scalar"}
"""The kernel an operator runs until its decision is ready: the one whose format is the CSR
itself."""
START_MAX_ROW = 4096
"""The longest row the start kernel is given: a row is one warp's (one thread's on the CPU)
work in the CSR kernels, so a longer row makes every product wait for it while the decision
runs (a power-law matrix's row of 10⁶ entries costs csr_vector milliseconds per product). A
matrix with a longer row is decided before ``prepare`` returns."""


def start_refused(longest_row: int) -> str | None:
    """Why the start kernel cannot run a matrix whose longest row is ``longest_row`` (a
    decision note), or None."""
    if longest_row <= START_MAX_ROW:
        return None
    return (f"background: not used, as the longest row ({longest_row:,} entries, above "
            f"{START_MAX_ROW:,}) would hold back every product of the start kernel; decided "
            "before prepare returned")


def on_own_stream(build):
    """``build`` run with a new non-blocking CuPy stream as the thread's current stream (the
    decision's passes and the conversion queue there, beside the products rather than behind
    them), synchronised before it returns, so that the built format is complete when a product
    first reads it."""

    def run():
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            built = build()
        stream.synchronize()
        return built

    return run


class BackgroundSwitch:
    """A thread building the operator of the decision, and what it built: ``result`` (the new
    operator, or None when the start kernel is the decision) or ``error``."""

    def __init__(self, build, started: float):
        self.lock = threading.Lock()
        self.result = self.error = None
        self.started = started
        self.finished = None
        self._thread = threading.Thread(target=self._run, args=(build,), daemon=True,
                                        name="autospmv-decision")
        self._thread.start()

    def _run(self, build) -> None:
        try:
            self.result = build()
        except BaseException as error:  # noqa: BLE001 - reported when the operator switches
            self.error = error
        self.finished = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.finished is not None

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done


def snapshot_for_gpu(uploaded: DeviceCSR) -> tuple[DeviceCSR, object]:
    """What the thread decides and converts from on the GPU: the uploaded copy with a copy of
    the host row pointer (the caller's may change), and the row structure that stands for the
    host matrix when the operator is built (:meth:`SpMVOperator._build` reads its shape,
    dtype, nonzeros and row pointer)."""
    snapshot = dataclasses.replace(uploaded, host_indptr=uploaded.host_indptr.copy())
    return snapshot, snapshot.structure()


def snapshot_for_cpu(op) -> sp.csr_matrix:
    """The start operator's own CSR (its csr_scalar format's arrays), as a SciPy matrix."""
    fmt = op.format
    return sp.csr_matrix((fmt.data, fmt.indices, fmt.indptr), shape=fmt.shape)


def switch_note(kind: str, start: str, switch: BackgroundSwitch, now: float) -> str:
    """The decision note of a finished background decision: ``kind`` is what became of it."""
    took = (switch.finished - switch.started) * 1e3
    waited = (now - switch.started) * 1e3
    return (f"background: started on {start}, which converts nothing; the decision and its "
            f"conversion took {took:.2f} ms on a thread; {kind} {waited:.2f} ms after prepare "
            "began")


def warn_failed(error: BaseException, kernel: str) -> str:
    """Warn that the background decision failed, and say so in a note."""
    note = (f"background: the decision or its conversion failed ({type(error).__name__}: "
            f"{error}); the operator stays on {kernel}")
    warnings.warn(note, RuntimeWarning, stacklevel=5)
    return note


def adopt(op, switch: BackgroundSwitch) -> None:
    """Switch ``op`` to the operator that its background thread ``switch`` built (or keep it,
    with a note, when the start kernel is the decision or the thread failed).

    One hand-over, under the switch's lock, so that one of several calling threads switches
    and the others return once it has (``switch`` is the one the caller read: ``op._switch``
    is None once switched). The new operator's state is copied in before its runner, which
    products read once per call (:attr:`SpMVOperator._backend`), and ``op._switch`` is cleared
    last, so a thread that finds no switch finds the whole new state. On the GPU the hand-over
    follows a device synchronisation, since the products in flight read the format released
    here."""
    with switch.lock:
        if op._switch is not switch:  # another thread switched
            return
        start = op.decision.kernel
        now = time.perf_counter()
        if switch.error is not None:
            op.decision.notes.append(warn_failed(switch.error, start))
        elif switch.result is None:
            op.decision.notes.append(switch_note(f"{start} is the decision; kept", start,
                                                 switch, now))
        else:
            if op.device == "cuda":
                from numba import cuda

                cuda.synchronize()
            new = switch.result
            new.decision.notes.append(switch_note(f"switched to {new.decision.kernel}", start,
                                                  switch, now))
            state = dict(new.__dict__)
            runner = state.pop("_runner")
            op.__dict__.update(state)
            op._runner = runner
        op._switch = None
