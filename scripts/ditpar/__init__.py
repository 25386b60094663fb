"""dit-parallel-opt library. Layers, each importing only those before it:

plumbing (cli, errors, timeparse) <- core <- readers <- analysis <- masking <- plan;
fewstep, comm and scope are tool packages on the plumbing alone. See README.md in this folder.
Nothing heavy (torch, matplotlib) is imported at module load; each tool imports what it needs.
"""

__version__ = "0.1.0"
