"""Preparing a product: :func:`autospmv.prepare` and :func:`autospmv.select`, the operator
they build, matrices that arrive on the GPU, measured tuning and the background switch."""
