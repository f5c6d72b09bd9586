"""The training pipeline of autospmv's kernel selector.

:mod:`training.corpus` builds the matrices (:mod:`training.generators` the synthetic ones),
:mod:`training.label` times every kernel on each of them on the local device
(:mod:`training.timing`, autospmv's timer :mod:`autospmv.timing` with the labeller's
tolerance and options, does one measurement; :mod:`training.records` reads and writes the
label records, :mod:`training.forecast` predicts how long labelling takes),
:mod:`training.train` fits and cross-validates the decision tree and exports it with
:mod:`autospmv.model` (its parts: :mod:`training.dataset`, :mod:`training.metrics`,
:mod:`training.fitting`, :mod:`training.crossval`, :mod:`training.report`).
``python -m training --help`` runs the steps from the command line; ``python -m training
retrain`` does all of them for the current machine and installs the result.
"""
