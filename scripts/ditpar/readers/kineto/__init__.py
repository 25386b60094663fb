"""PyTorch Kineto traces: the events of one rank (trace) and the argument names read from them (events)."""
