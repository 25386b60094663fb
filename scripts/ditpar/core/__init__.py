"""Core data model: the event table, the ProfileSet every reader returns, the classifier of device
tasks (kind, collective family, communicator) and the exact interval algebra over int64 ns.

Owns the contract between readers and analyses. Imports only the shared plumbing at the top of
``ditpar`` (``errors``, ``timeparse``) and numpy/pandas.
"""
