"""Profile readers: profiler files in, one ProfileSet of exact int64 nanoseconds out.

Rooms: ``load`` finds the profiles under the given paths and reads every rank (in a pool of processes
when the files are large); ``ascend/`` reads torch_npu text and db exports, ranks without kernels and
msprof-analyze cluster output; ``kineto/`` reads PyTorch Kineto traces; ``jsonstream`` and ``common`` are
shared by both. Nothing here knows about analyses, masking or plans.
"""

from ditpar.readers.load import discover, load_profiles

__all__ = ["discover", "load_profiles"]
