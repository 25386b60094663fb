"""torch_npu profiles: text export (text), db export (db), ranks without kernels (partial), msprof-analyze
cluster output (cluster), communication.json pruned without a whole parse (comm_json)."""
