"""The comparison engine: named cells in; values, bootstrap intervals, paired differences,
one-sided lower bounds and update gains out.

* :mod:`~compat.compare.bootstrap` seeded, paired bootstrap over queries
* :mod:`~compat.compare.matrix`    M[q][g] cells, update gain (BCT Eq. 9), AC / AA / BC / FC
"""
