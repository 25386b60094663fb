"""Weight-free plan benchmark: DiT blocks of a model's real shapes with random weights, each parallel
form's forward as it runs (Ulysses, ring, USP, AllGather-KV, TP, CFG, DP), checked against one device,
timed ABBA with repeats, with the bytes each rank sends. torch is imported inside functions only."""
