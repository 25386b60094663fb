"""dit-parallel-opt library. Layers, each importing only those before it:

plumbing (cli, errors, timeparse) <- core <- readers <- analysis <- masking <- plan;
fewstep, comm and scope are tool packages on the plumbing alone. See README.md in this folder.
Nothing heavy (torch, matplotlib) is imported at module load; each tool imports what it needs.
"""

import os

__version__ = "0.1.0"

# pyarrow's allocator (mimalloc) keeps freed pages resident for a while and commits its arenas eagerly.
# Arenas commit lazily here; freed pages go back after 200 ms, not 1 s: a 1M-row CSV read then reuses its
# own pages (with 0 ms it faulted ~600 MB of fresh pages a rank, ~0.3 s of system time) and the readers
# hand the rest back between ranks (readers.load releases Arrow's unused memory after each rank).
# Read when pyarrow loads, hence here, before anything imports it; a user's own values win.
# Measured: benchmarks/bench_readers.py.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "200")
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")
