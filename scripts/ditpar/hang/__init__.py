"""Hangs and deadlocks: read PyTorch Flight Recorder dumps of every rank and name the first collective
where the ranks disagree (`dumps` reads, `diverge` compares, `layout` names groups, `record` makes dumps).

torch is imported inside `record`'s functions only, so the package imports without it.
"""
