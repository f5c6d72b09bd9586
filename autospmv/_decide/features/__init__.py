"""Feature extraction: the structural features of a matrix that the kernel selector reads.

:func:`~autospmv._decide.features.extract.features` is the one entry; it reads the row lengths
(:mod:`~autospmv._decide.features.row_lengths`), samples rows
(:mod:`~autospmv._decide.features.sampling`), scans them on the CPU
(:mod:`~autospmv._decide.features.scan`) or on the GPU
(:mod:`~autospmv._decide.features.device_scan`), and adds every kernel's cost quantities.
"""
