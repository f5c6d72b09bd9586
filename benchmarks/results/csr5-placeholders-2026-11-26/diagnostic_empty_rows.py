"""The diagnostic behind the placeholder entries (run with the kernel before them): csr5 on three
grown matrices with and without their empty rows, and dense_rows at several σ; writes
``$OUT/empty_rows.json`` (``diagnostic-empty-rows-h100.json`` here).

    PYTHONPATH=. python benchmarks/results/csr5-placeholders-2026-11-26/diagnostic_empty_rows.py
"""
import json, os, sys, time
import numpy as np, scipy.sparse as sp
sys.path.insert(0, '.')
import autospmv
from autospmv.timing import Bench, TimingOptions
from training import corpus
from benchmarks.gpu import large_matrices

out = os.environ.get('OUT', '/tmp')
opts = TimingOptions(repeats=20, max_seconds=0.5)
records = []

def without_empty(A):
    keep = np.diff(A.indptr) > 0
    return A[keep]

def run(name, A, sigmas, dtype):
    A = A.astype(dtype)
    x = np.random.default_rng(0).random(A.shape[1]).astype(dtype)
    bench = Bench('cuda', x, A.shape[0], opts)
    ops = {s: autospmv.prepare(A, kernel='csr5', device='cuda', params={'sigma': s})
           for s in sigmas}
    ref = A.astype(np.float64) @ x.astype(np.float64)
    for s, op in ops.items():
        y = bench.result(op)
        err = np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-300)
        assert err < (1e-4 if dtype == np.float32 else 1e-12), (name, s, err)
    t = bench.time_all(ops)
    nbytes = A.nnz * (A.dtype.itemsize + 4) + (A.shape[0] + 1) * 4 + \
        (A.shape[0] + A.shape[1]) * A.dtype.itemsize
    for s, tm in t.items():
        b2b = tm['b2b']['median']
        rec = dict(matrix=name, dtype=np.dtype(dtype).name, nnz=int(A.nnz), rows=A.shape[0],
                   sigma=s, b2b_us=b2b, eff_tbs=nbytes / b2b / 1e6,
                   empty_rows=int(np.sum(np.diff(A.indptr) == 0)))
        records.append(rec)
        print(json.dumps(rec), flush=True)
    del ops
    autospmv.timing.release_device_memory('cuda')

import cupy
print(cupy.cuda.runtime.getDeviceProperties(0)['name'])
for dtype in (np.float32, np.float64):
    for base, copies in (('polblogs', 598), ('netscience', 3647), ('80BAU3B', 952)):
        A = sp.load_npz(f'.matrices/{base}.npz').tocsr()
        run(f'{base}_x{copies}', corpus.grow(A, copies), (16, 24), dtype)
        B = without_empty(A)
        run(f'{base}-nonempty_x{copies}', corpus.grow(B, copies), (16, 24), dtype)
    for name, A in large_matrices(2e7):
        if name == 'dense_rows':
            run(name, A, (8, 16, 24), dtype)
json.dump(records, open(os.path.join(out, 'empty_rows.json'), 'w'), indent=1)
