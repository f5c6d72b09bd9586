"""The trained model: a decision tree (:mod:`~autospmv._decide.model.tree`), the cost model and
the default policy it may carry, its file format and checks, and where model files are stored
and found (:mod:`~autospmv._decide.model.store`, :mod:`~autospmv._decide.model.lookup`)."""
