"""Few-step x multi-rank validation: the timing matrix (``matrix``), its gates (``analyze``), the
resumable runner (``run``), the log parser it relies on (``logs``) and the plot; the quality gate of plans'
outputs against one device's (``frames`` reads them, ``quality`` judges them).

Self-contained tool layer: imports only the top-level plumbing (``cli``, ``errors``).
"""
