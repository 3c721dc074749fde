"""The comparison engine: named cells in; values, bootstrap intervals, paired differences,
one-sided lower bounds and update gains out.

* :mod:`~compat.compare.engine`    :func:`~compat.compare.engine.compare`: the one engine every
  report and the gate format (values, intervals, differences, lower bounds, gains; ``num``)
* :mod:`~compat.compare.bootstrap` seeded, paired bootstrap over queries
* :mod:`~compat.compare.matrix`    M[q][g] cells, update gain (BCT Eq. 9), AC / AA / BC / FC
"""
