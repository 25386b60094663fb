"""Analyses of a ProfileSet: per-step breakdown, collectives per family and communicator, compute-stream
bubbles, stage deltas between two profiles, step windows, and the timeline plot.

Owns every answer that comes from a measured profile rather than a model. May import ``core`` and the
top-level plumbing; never a reader's internals (it receives a ProfileSet) nor masking, plan or a script.
"""
