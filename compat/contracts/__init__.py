"""Contracts: what a version declares, and the gate's verdict on it.

* :mod:`~compat.contracts.schema` the contract of ``contracts/<version>.yaml`` (pydantic,
  ``extra="forbid"``): criteria, terms, served configuration, rollback; validation and digest
* :mod:`~compat.contracts.gate`   the verdict: which cells a contract needs and whether each
  criterion holds (BCT Eq. 2 with a bootstrap lower bound), formatted from :mod:`compat.compare`
"""
