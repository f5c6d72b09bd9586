"""The package's public face: ``dir(autospmv)`` shows the API and the submodules, nothing else."""

from __future__ import annotations

import types

import autospmv


def test_every_public_name_is_the_api_or_a_submodule():
    stray = [name for name in dir(autospmv) if not name.startswith("_")
             and name not in autospmv.__all__
             and not isinstance(getattr(autospmv, name), types.ModuleType)]
    assert stray == []
    assert "annotations" not in dir(autospmv)
    assert set(autospmv.__all__) <= set(dir(autospmv))
