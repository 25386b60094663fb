"""dit-parallel-opt library. Layers, each importing only those before it:

plumbing (cli, errors, timeparse) <- core <- readers <- analysis <- masking <- plan;
fewstep, comm and scope are tool packages on the plumbing alone. See README.md in this folder.
Nothing heavy (torch, matplotlib) is imported at module load; each tool imports what it needs.
"""

import os

__version__ = "0.1.0"

# pyarrow's allocator (mimalloc) keeps freed pages resident for a while and commits its arenas eagerly:
# after a 1M-row CSV read about 40 MB stays resident in each reader process. These two settings (read
# when pyarrow loads, hence here, before anything imports it; a user's own values win) hand freed
# pages back at once. Measured: benchmarks/bench_readers.py (issue 25).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")
