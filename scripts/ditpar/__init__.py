"""dit-parallel-opt library: profile readers, interval algebra, analyses, cost model and tools.

Nothing heavy (torch, matplotlib) is imported at module load; each tool imports what it needs.
"""

__version__ = "0.1.0"
