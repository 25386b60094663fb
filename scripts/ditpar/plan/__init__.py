"""The plan chooser: model and hardware presets, topology parsing, the analytic cost model
(``cost/``), the seven gates, the ranking report and the evaluation against published tables.

The top of the stack: may import ``masking.bound`` (G5 uses the same ceiling as ``mask_bound.py calc``)
and the plumbing; nothing below imports it.
"""
