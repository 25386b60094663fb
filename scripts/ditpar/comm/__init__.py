"""torch.distributed tools: process-group set-up (``dist``), the collective microbenchmark (``bench``),
the padded equal-split all-to-all that replaces an uneven one (``padded_alltoall``) with its byte-identity
proof (``byte_identity``), and the all-to-all audit (``audit``) with its negative control.

torch is imported inside functions only, so the package imports without it. Imports only the plumbing
and modules of this package.
"""
