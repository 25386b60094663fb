"""How to get Flight Recorder dumps on NCCL, gloo and HCCL (printed by hang_doctor.py --how and kept word
for word in references/hangs-and-deadlocks.md; a test holds the two together)."""

HOW = """\
Flight Recorder: one dump per rank, then  python scripts/hang_doctor.py DUMP_DIR [--plan "U4 R2"]

Every backend: set the variables before init_process_group (they are read when the group is created).
  One line does it for all three backends (sets only variables not set yet):
    from ditpar.hang import record; record.enable("/tmp/fr")      # files: /tmp/fr/fr_rank_<rank>

NCCL (torch >= 2.8 names; before 2.8 TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE)
  export TORCH_FR_BUFFER_SIZE=20000               # ring-buffer entries; unset or 0 = recorder off
  export TORCH_NCCL_DUMP_ON_TIMEOUT=1             # the watchdog writes the dump when a collective times out
  export TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/fr_rank_ # where: /tmp/fr/fr_rank_<rank> (pickle)
  export TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr/pipe_   # on demand: echo 1 > /tmp/fr/pipe_<rank>.pipe
  sooner than the 10-minute default: init_process_group("nccl", timeout=datetime.timedelta(minutes=2))

gloo (CPU): torch records gloo collectives but writes no dump on timeout and no group names in pg_config,
  so dump from the script; record.dump() also writes each group's members into pg_config:
    export TORCH_FR_BUFFER_SIZE=20000
    with record.hang_watch("/tmp/fr", after_s=600):  # dumps on an exception, on SIGUSR1, or after 600 s
        run_pipeline()
  on demand from outside: kill -USR1 <pid of every rank>  (works while a rank is blocked in a collective)

HCCL (torch_npu; torch's pickle layout, read by a fork of torch's analyzer in Ascend/pytorch
      tools/flight_recorder)
  export TORCH_HCCL_TRACE_BUFFER_SIZE=20000
  export TORCH_HCCL_DUMP_ON_TIMEOUT=1
  export TORCH_HCCL_ENABLE_MONITORING=1            # heartbeat monitor: dumps when the watchdog is stuck
  export TORCH_HCCL_HEARTBEAT_TIMEOUT_SEC=300      # keep below HCCL_EXEC_TIMEOUT so the dump comes first
  export TORCH_HCCL_DEBUG_INFO_TEMP_FILE=/tmp/fr/fr_rank_  # default /tmp/hccl_trace_rank_<rank>
  export TORCH_HCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr/pipe_     # on demand: echo 1 > /tmp/fr/pipe_<rank>.pipe
  from Python: record.dump("/tmp/fr") (calls torch_npu._C._distributed_c10d._dump_hccl_trace)

A rank that died writes no dump: collect what is there and add --allow-missing-ranks.
"""
