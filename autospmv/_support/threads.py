"""How the CPU kernels use threads, chosen so that they never fight the BLAS or a loaded machine.

SciPy's solvers alternate ``A @ x`` with BLAS calls (``dot``, ``norm``, ``axpy``, ARPACK's
``gemv``) on OpenBLAS's own thread pool. Five rules keep the two pools from getting in each
other's way, and the products from waiting for cores other work holds:

1. **No spinning between calls.** numba's OpenMP layer, left at OpenMP's default wait policy,
   keeps its workers spinning after each product, and the BLAS call that follows shares the
   cores with them. Importing autospmv therefore sets ``OMP_WAIT_POLICY=PASSIVE`` (sleeping
   workers) unless the variable is already set, before numba starts its threads. OpenMP runtimes
   read the variable once, when they start, so this works only if numba's threading layer has
   not run yet (see :func:`wait_policy`); it also applies to other OpenMP libraries that start
   later in the process. Setting ``OMP_WAIT_POLICY=ACTIVE`` before importing autospmv keeps
   spinning workers. The threading layer itself is left to numba (``workqueue``, which never
   spins, wakes its threads more slowly and would be forced on every numba user of the process).
2. **No threading where it cannot pay.** Waking sleeping workers costs ~15-20 µs, so an operator
   uses one thread per :data:`NNZ_PER_THREAD` nonzeros, and the serial compilation of its
   kernel (no thread pool at all) when that comes to one thread.
3. **No threads beside a threaded BLAS, unless the product is long or the vectors short.**
   OpenBLAS's workers keep spinning on the cores for a while after each call, and a solver calls
   the BLAS between every two products, so a threaded product must take those cores back each
   time. OpenBLAS runs its vector calls on its pool only from :data:`BLAS_THREADED_MIN_LENGTH`
   entries. So when the BLAS runs more than one thread (threadpoolctl, which scikit-learn brings,
   tells; without it none is assumed), products below :data:`BLAS_SHARED_MIN_NNZ` nonzeros run
   serially when the operator's larger dimension (the longest vector a solver hands the BLAS
   beside it) is at least :data:`BLAS_THREADED_MIN_LENGTH`. From :data:`BLAS_SHARED_MIN_NNZ` on
   a serial product takes a millisecond or more, and what the threads save outweighs taking the
   cores back.
4. **No threads on two cores below 10⁶ nonzeros.** With at most :data:`FEW_CORES` usable
   cores, products below :data:`BLAS_SHARED_MIN_NNZ` nonzeros run serially: a second thread
   needs the other core free, and on a shared machine another process often holds it. On the
   shared 2-core development machine one thread was 1.07-1.25× as fast as two on matrices of
   122,713 to 502,504 nonzeros, and two threads ran at 0.50-0.87× SciPy's speed on two of them
   (measured with ``benchmarks/cpu_default.py`` before this rule); with it, one thread runs
   them at 1.00-2.1× SciPy's speed (``benchmarks/results/cpu-default-vs-scipy.json``). From 10⁶
   nonzeros the work per thread outweighs the wait (1.72× SciPy's speed with two threads on
   the demo's FEM-like matrix of 1,258,740 nonzeros, same file).
5. **Never more threads than cores.** The count is also capped by the cores this process may
   run on (``os.sched_getaffinity``: ``taskset`` and container CPU sets) and by numba's current
   thread count (``numba.get_num_threads()``, which the caller may lower with
   ``numba.set_num_threads``), read at every call.

The BLAS is left as the user configured it: autospmv never changes another library's pool.

Overrides, strongest first: ``prepare(A, threads=k)``; the environment variable
``AUTOSPMV_NUM_THREADS=k`` (read when an operator is built); otherwise the rules above.
An explicit count is still capped by numba's pool size (``NUMBA_NUM_THREADS``), and ``1`` always
means the serial kernel.

The passes over a matrix's structure (the feature scan, the choosers' row-length passes, the
range checks of a new matrix) follow a rule of their own, :func:`threaded_passes`.
"""

from __future__ import annotations

import operator
import os

ENV_THREADS = "AUTOSPMV_NUM_THREADS"
"""Environment variable giving the number of CPU threads per product (a positive integer)."""

BLAS_SHARED_MIN_NNZ = 1_000_000
"""Below this many nonzeros a product runs serially while the BLAS runs more than one thread on
vectors as long as the operator's (:data:`BLAS_THREADED_MIN_LENGTH`)."""

FEW_CORES = 2
"""At most this many usable cores: products below :data:`BLAS_SHARED_MIN_NNZ` nonzeros run
serially (rule 4 of the module docstring)."""

BLAS_THREADED_MIN_LENGTH = 10_000
"""Vectors of at least this many entries make OpenBLAS run its vector calls (``dot``, ``axpy``)
on its thread pool; shorter ones it runs on the calling thread (its level-1 threshold)."""

NNZ_PER_THREAD = 60_000
"""Nonzeros per thread: a product uses ``nnz // NNZ_PER_THREAD`` threads (at least one), so
threading starts at 120K nonzeros, where two threads beat the serial kernel even after waking."""

PASSES_PARALLEL_MIN_NNZ = 1 << 20
"""From this many nonzeros the passes over a matrix's structure (the feature scan, the row
lengths a parameter chooser reads, the checks of a new matrix) may run on numba's threads."""

PARALLEL_MIN_THREADS = 4
"""Those passes run on numba's threads only when there are at least this many: on two cores
they do not pay, since whenever another process keeps one core busy, waiting for the second
thread makes a pass 1.3–15× slower than on one thread."""


def threaded_passes(nnz: int) -> bool:
    """Whether the passes over a matrix of ``nnz`` nonzeros run on numba's threads."""
    import numba

    return nnz >= PASSES_PARALLEL_MIN_NNZ and numba.get_num_threads() >= PARALLEL_MIN_THREADS

_POLICY_VARIABLE = "OMP_WAIT_POLICY"
_policy_set_here = False


def _set_passive_wait_policy() -> None:
    """Ask OpenMP for sleeping (not spinning) workers, unless the user chose a policy."""
    global _policy_set_here
    if _POLICY_VARIABLE not in os.environ and not _numba_threads_started():
        os.environ[_POLICY_VARIABLE] = "PASSIVE"
        _policy_set_here = True


def _numba_threads_started() -> bool:
    try:
        from numba.np.ufunc import parallel
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return bool(getattr(parallel, "_is_initialized", False))


def wait_policy() -> str:
    """One line: the OpenMP wait policy in effect for numba's threads, and who chose it."""
    value = os.environ.get(_POLICY_VARIABLE)
    if _policy_set_here:
        return f"{_POLICY_VARIABLE}={value} (set by autospmv)"
    if value is not None:
        return f"{_POLICY_VARIABLE}={value} (set by the user)"
    return (f"{_POLICY_VARIABLE} unset: numba's threads started before autospmv was imported, "
            "so the OpenMP runtime's default (spinning) applies")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), else the machine's core count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def pool_size() -> int:
    """The most threads numba can run (``NUMBA_NUM_THREADS``, fixed when numba starts)."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


def blas_threads() -> int:
    """The most threads any loaded BLAS runs (threadpoolctl), 1 when it cannot be told."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return 1
    counts = [pool.get("num_threads") or 1 for pool in threadpool_info()
              if pool.get("user_api") == "blas"]
    return max(counts, default=1)


def check_threads(threads, source: str = "threads") -> int | None:
    """``threads`` as a positive Python int (None stays None): an integer of any kind (NumPy's
    too, anything with ``__index__`` but a bool) or a string of digits; anything else is a
    ValueError."""
    if threads is None:
        return None
    if isinstance(threads, str):
        text = threads.strip()
        if not text.isdigit():
            raise ValueError(f"{source} must be a positive integer; got {threads!r}")
        return check_threads(int(text), source)
    try:
        count = 0 if isinstance(threads, bool) else operator.index(threads)
    except TypeError:  # a float, NumPy's bool, anything else that is no integer
        count = 0
    if count < 1:
        raise ValueError(f"{source} must be a positive integer; got {threads!r}")
    return count


def requested_threads(threads=None) -> tuple[int | None, str]:
    """The explicit thread count (``threads=``, else ``AUTOSPMV_NUM_THREADS``) and its source;
    (None, "auto") when neither is given."""
    if threads is not None:
        return check_threads(threads), "threads="
    env = os.environ.get(ENV_THREADS)
    if env is not None and env.strip():
        return check_threads(env, ENV_THREADS), ENV_THREADS
    return None, "auto"


def choose_threads(nnz: int, threads=None, vector_length: int = BLAS_THREADED_MIN_LENGTH
                   ) -> tuple[int, str]:
    """Threads for one product over ``nnz`` nonzeros, and a sentence saying why.

    ``vector_length`` is the longest vector a solver hands the BLAS beside this operator, its
    larger dimension (rule 3 of the module docstring); left out, the BLAS is assumed to thread.

    The result is the most threads a call may use; each call further caps it by numba's current
    thread count. See the module docstring for the rule and the measurements behind it.
    """
    explicit, source = requested_threads(threads)
    pool = pool_size()
    if explicit is not None:
        count = min(explicit, pool)
        why = f"{explicit} requested by {source}"
        if count < explicit:
            why += f", capped at numba's pool of {pool} (NUMBA_NUM_THREADS)"
        return count, why
    cores = usable_cores()
    by_size = max(1, nnz // NNZ_PER_THREAD)
    count = min(pool, cores, by_size)
    why = (f"auto: min(one per {NNZ_PER_THREAD:,} nonzeros = {by_size}, usable cores = {cores}, "
           f"numba pool = {pool})")
    if count > 1 and nnz < BLAS_SHARED_MIN_NNZ and cores <= FEW_CORES:
        return 1, (f"auto: serial on {cores} usable cores below {BLAS_SHARED_MIN_NNZ:,} "
                   "nonzeros (a second thread waits for a core another process may hold)")
    if count > 1 and nnz < BLAS_SHARED_MIN_NNZ and vector_length >= BLAS_THREADED_MIN_LENGTH:
        blas = blas_threads()
        if blas > 1:
            count = 1
            why = (f"auto: serial beside a BLAS running {blas} threads on vectors of "
                   f"{vector_length:,} (≥ {BLAS_THREADED_MIN_LENGTH:,}) entries, below "
                   f"{BLAS_SHARED_MIN_NNZ:,} nonzeros")
    return count, why


_set_passive_wait_policy()
