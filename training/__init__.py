"""The training pipeline of autospmv's kernel selector, installed as ``autospmv.training``.

:mod:`.corpus` builds the matrices (:mod:`.generators` the synthetic ones), :mod:`.label` times
every kernel on each of them on the local device (:mod:`.timing`, autospmv's timer
:mod:`autospmv._support.timing` with the labeller's tolerance and options, does one measurement;
:mod:`.records` reads and writes the label records, :mod:`.forecast` predicts how long labelling
takes), :mod:`.train` fits and cross-validates the decision tree and exports it with
:mod:`autospmv._decide.model.tree` (its parts: :mod:`.dataset`, :mod:`.metrics`, :mod:`.fitting`,
:mod:`.crossval`, :mod:`.report`). ``python -m autospmv.training --help`` runs the steps from
the command line; ``python -m autospmv.training retrain`` does all of them for the current
machine and installs the result.
"""
