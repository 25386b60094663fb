"""Communication masking: the closed-form ceiling of a chunked pipeline (``bound``), the two-stream
schedule simulator (``simulator``), masking measured from profiles (``measured``) and the effectiveness
checklist (``verify``).

May import ``core``, ``readers`` and ``analysis``; ``plan`` imports ``bound`` for gate G5, never the
other way round.
"""
