"""Proof that sequence or head sharding happened: the shape recorder users call inside their model
(``recorder``; ``ScopeRecorder`` and ``record`` are re-exported here) and the judge of its records (``check``).

torch is never imported. Imports only the plumbing and modules of this package.
"""

from ditpar.scope.recorder import ScopeRecorder, record

__all__ = ["ScopeRecorder", "record"]
