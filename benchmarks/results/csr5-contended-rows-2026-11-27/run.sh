#!/bin/bash
# The runs behind csr5-contended-rows-2026-11-27.md, from the repository root on the GPU machine,
# with the shared matrices in .matrices and BASE/csr5.py the kernel module of the previous commit:
#   git show 7c7828e:autospmv/kernels/cuda/csr5.py > BASE/csr5.py
# (kernel_profile labels a --compare module by its file name: "csr5" in the ab-* files is that
# previous kernel, "registered" the kept one).
R=benchmarks/results/csr5-contended-rows-2026-11-27
mkdir -p $OUT/r
PYTHONPATH=. python $R/copy_samples.py $OUT/r/copy.json
for dt in float32 float64; do
  PYTHONPATH=. python benchmarks/kernel_profile.py --matrices .matrices --kernels csr5 \
    --no-baselines --compare csr5=BASE/csr5.py --repeats 10 --dtypes $dt --out $OUT/r/ab-$dt.json
done
for dt in float32 float64; do
  PYTHONPATH=. python benchmarks/kernel_profile.py --matrices .matrices --dtypes $dt \
    --repeats 20 --out $OUT/r/kernels-$dt.json
done
AUTOSPMV_TEST_MATRICES=.matrices python -m pytest -m gpu -n 8 -q tests/ -k csr5
