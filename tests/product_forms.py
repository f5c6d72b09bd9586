"""Every form of a product a CUDA operator takes, with host and with device vectors: shared by
the dtype checks under numba-cuda's simulator (``dtype_simulator_worker.py``) and on a real GPU
(``test_dtypes.py``). Each form is ``call(op, x, X, z)`` with a 1-D ``x``, a 2-D ``X`` and a
1-D ``z`` of the transposed product, all on the host; the device forms copy them over first.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

DEVICE_FORMS = {
    "host x": lambda op, x, X, z: op @ x,
    "host out=": lambda op, x, X, z: op.matvec(x, out=np.empty(op.shape[0], x.dtype)),
    "host X": lambda op, x, X, z: op @ X,
    "host rmatvec": lambda op, x, X, z: op.rmatvec(z),
    "device x": lambda op, x, X, z: op @ cuda.to_device(x),
    "device out=": lambda op, x, X, z: op.matvec(
        cuda.to_device(x), out=cuda.device_array(op.shape[0], x.dtype)),
    "device X": lambda op, x, X, z: op @ cuda.to_device(X),
    "device rmatvec": lambda op, x, X, z: op.rmatvec(cuda.to_device(z)),
}


def expected_products(A, x, X, z) -> dict:
    """What each form of :data:`DEVICE_FORMS` gives for the host matrix ``A``."""
    return {form: A.T @ z if form.endswith("rmatvec") else A @ (X if form.endswith(" X") else x)
            for form in DEVICE_FORMS}


def to_host(y) -> np.ndarray:
    """A product's result on the host, whatever array kind it came back as."""
    return y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)
