"""Could a decision tree over the matrix's features choose the multi-vector program, instead of
the first product of k columns timing them all? Scored without a GPU on a committed SpMM run.

For k > 4 columns the first GPU product times the one-pass programs (the many-columns kernel,
the column pairs of four and of eight nonzeros a step, the column quads) on the caller's X and
keeps the fastest; each record of ``benchmarks/results/spmm-h200.json`` keeps those times in its
``choice`` note. This script rebuilds each grown matrix as ``benchmarks/spmm.py`` did, computes
the features the decision reads (:func:`autospmv._decide.features.extract.features`), and per
dtype fits a tree on the features and log2(k) to the fastest program, leaving one matrix out at
a time (all its column counts together). It scores, against the recorded times, q = t(fastest)
/ t(chosen) for the tree's pick, for timing only the tree's two likeliest programs, and for
always the column pairs; timing them all scores 1 by definition.

    python benchmarks/spmm_choice_model.py --shared ../shared/matrices --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autospmv._decide.features.extract import features  # noqa: E402
from spmm import grown  # noqa: E402
from training.spmm_labels import choice_note_times  # noqa: E402

RUNS = ("grown", "grown_few", "grown_ends", "corpus")
"""The runs of grown matrices (about 4·10⁶ nonzeros each) whose records time the programs."""
PROGRAMS = ("many_columns", "column_pairs", "column_pairs_wide_step", "column_quads")
"""The one-pass programs every k > 4 times (the passes and the eight-columns kernel only up to
8 columns, so they are left out here)."""
DEPTHS = (2, 3, 4)


def program_times(note: str) -> dict[str, float]:
    """{program: µs} of the untiled programs in a record's ``choice`` note
    (:func:`training.spmm_labels.choice_note_times`)."""
    _, _, times = choice_note_times(note)
    return {key: t for key, t in times.items() if "@" not in key}


def geomean(values) -> float:
    return math.exp(float(np.mean(np.log(values))))


def score(rows, matrix_features, depth: int) -> tuple[list[float], list[float]]:
    """Leave-one-matrix-out q of the tree's pick and of timing its two likeliest programs."""
    from sklearn.tree import DecisionTreeClassifier

    names = sorted(next(iter(matrix_features.values())))
    X = np.array([[matrix_features[m][f] for f in names] + [math.log2(k)] for m, k, _ in rows])
    y = np.array([min(PROGRAMS, key=t.get) for _, _, t in rows])
    picked, two = [], []
    for held in sorted({m for m, _, _ in rows}):
        train = [i for i, (m, _, _) in enumerate(rows) if m != held]
        test = [i for i, (m, _, _) in enumerate(rows) if m == held]
        tree = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X[train], y[train])
        for i, likelihood in zip(test, tree.predict_proba(X[test])):
            ranked = [tree.classes_[j] for j in np.argsort(-likelihood, kind="stable")]
            ranked += [p for p in PROGRAMS if p not in ranked]
            times = rows[i][2]
            best = min(times.values())
            picked.append(best / times[ranked[0]])
            two.append(best / min(times[p] for p in ranked[:2]))
    return picked, two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=REPO_ROOT / "benchmarks/results/spmm-h200.json")
    parser.add_argument("--shared", required=True, help="folder of the shared matrices (.npz)")
    parser.add_argument("--corpus", required=True, help="folder of the corpus matrices (.npz)")
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text(encoding="utf-8"))
    records = [r for run in RUNS for r in results["runs"][run]["records"] if r.get("choice")]
    matrix_features = {}
    for name in sorted({r["matrix"] for r in records}):
        base = name.rsplit("_x", 1)[0]
        path = Path(args.shared) / f"{base}.npz"
        if not path.exists():
            path = Path(args.corpus) / f"{base}.npz"
        A, _ = grown(sp.csr_matrix(sp.load_npz(path)), 4e6, 8e9)
        matrix_features[name] = features(A.astype(np.float64))
    for dtype in ("float32", "float64"):
        rows = [(r["matrix"], r["k"], program_times(r["choice"])) for r in records
                if r["dtype"] == dtype]
        rows = [row for row in rows if all(p in row[2] for p in PROGRAMS)]
        print(f"{dtype}: {len(rows)} products of {len({m for m, _, _ in rows})} matrices, "
              f"k = {sorted({k for _, k, _ in rows})}")
        for depth in DEPTHS:
            picked, two = score(rows, matrix_features, depth)
            print(f"  tree of depth {depth}: its pick q {geomean(picked):.3f} (lowest "
                  f"{min(picked):.2f}); timing its two likeliest q {geomean(two):.3f} (lowest "
                  f"{min(two):.2f})")
        pairs = [min(t.values()) / t["column_pairs"] for _, _, t in rows]
        print(f"  always the column pairs: q {geomean(pairs):.3f} (lowest {min(pairs):.2f})")


if __name__ == "__main__":
    main()
