#!/usr/bin/env python3
"""Write the hand-built CANN 8.3-format two-rank profile in this folder (run once; output is committed).

The task lists below are the whole design; README.md derives every step_trace_time.csv value from
them by hand. The expected answers are typed in as literals (EXPECTED), not computed here.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

KERNEL_HEADER = (
    "Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,"
    "Start Time(us),Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,"
    "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID"
)
STEP_HEADER = (
    "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
    "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing"
)

# (step, name, type, core, start offset us, duration us) -- offsets are exact decimals
RANK0 = [
    (3, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "0.000", "100.250"),
    (3, "aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "100.500", "20.125"),
    (3, "hcom_send__097_0_1", "hcom_send_", "COMMUNICATION", "121.000", "50.000"),
    (3, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "MIX_AIC", "130.000", "30.000"),
    (3, "hcom_allReduce__170_0_1", "hcom_allReduce_", "COMMUNICATION", "165.000", "40.500"),
    (3, "aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", "200.000", "10.001"),
    (4, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "300.000", "100.250"),
    (4, "hcom_send__097_1_1", "hcom_send_", "COMMUNICATION", "400.500", "49.500"),
    (4, "aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "410.000", "20.000"),
    (4, "hcom_allReduce__170_1_1", "hcom_allReduce_", "COMMUNICATION", "455.000", "40.000"),
    (4, "aclnnMul_MulAiCore_Mul", "Mul", "AI_VECTOR_CORE", "460.000", "10.000"),
    (4, "aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", "470.000", "5.000"),
    (4, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "MIX_AIV", "500.000", "12.345"),
]
RANK2 = [
    (3, "hcom_receive__097_0_1", "hcom_receive_", "COMMUNICATION", "0.000", "125.000"),
    (3, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "125.250", "80.000"),
    (3, "hcom_allReduce__170_0_1", "hcom_allReduce_", "COMMUNICATION", "206.000", "30.000"),
    (3, "aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "210.000", "10.500"),
    (3, "aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", "236.000", "4.000"),
    (4, "hcom_receive__097_1_1", "hcom_receive_", "COMMUNICATION", "300.000", "150.125"),
    (4, "aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "450.500", "80.000"),
    (4, "hcom_allReduce__170_1_1", "hcom_allReduce_", "COMMUNICATION", "531.000", "29.000"),
    (4, "aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "540.000", "10.000"),
    (4, "aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", "560.000", "4.000"),
]

#: hand-derived answers (README.md): Computing, Comm(Not Overlapped), Overlapped, Communication,
#: Free, Stage, Bubble, Comm(Not Overlapped and Exclude Receive), Preparing
EXPECTED = {
    0: {3: ("160.376", "49.000", "35.500", "84.500", "0.625", "210.001", "0", "49.000", "20.000"),
        4: ("147.595", "54.500", "35.000", "89.500", "10.250", "212.345", "0", "54.500", "170.000")},
    2: {3: ("94.500", "144.500", "10.500", "155.000", "1.000", "115.000", "125.000", "19.500", "15.000"),
        4: ("94.000", "169.125", "10.000", "179.125", "0.875", "113.875", "150.125", "19.000", "160.000")},
}

RANKS = {
    # rank: (folder, device, T0 as (integer us, fraction digits), host step spans (start, dur) offsets)
    0: ("node0_23101_20251127201437501_ascend_pt", 0, (1764246877073569, 640),
        {3: ("-20.000", "150.000"), 4: ("130.000", "170.000")}),
    2: ("node0_23103_20251127201437507_ascend_pt", 2, (1764246877073574, 640),
        {3: ("-15.000", "155.000"), 4: ("140.000", "160.000")}),
}

PARALLEL_GROUPS = {
    0: {"group_name_5": {"group_name": "pp", "group_rank": 0, "global_ranks": [0, 2]},
        "group_name_13": {"group_name": "tp", "group_rank": 0, "global_ranks": [0]},
        "group_name_20": {"group_name": "dp", "group_rank": 0, "global_ranks": [0, 1]}},
    2: {"group_name_5": {"group_name": "pp", "group_rank": 1, "global_ranks": [0, 2]},
        "group_name_13": {"group_name": "tp", "group_rank": 0, "global_ranks": [2]},
        "group_name_20": {"group_name": "dp", "group_rank": 0, "global_ranks": [2, 3]}},
}
GROUP_OF = {"097": "group_name_5", "170": "group_name_20"}
FULL_HASH = {"group_name_5": "5862276114690318097", "group_name_20": "3985310491373102170"}
#: element count and HCCL data type of each comm op (message size = count x 2 bytes for FP16)
COUNTS = {"send": 262144, "receive": 262144, "allReduce": 1048576}


def ns(text: str) -> int:
    whole, _, frac = text.lstrip("-").partition(".")
    value = int(whole) * 1000 + int((frac + "000")[:3])
    return -value if text.startswith("-") else value


def stamp(t0: tuple[int, int], offset: str) -> str:
    total = t0[0] * 1000 + t0[1] + ns(offset)
    return f"{total // 1000}.{total % 1000:03d}"


def kernel_rows(rank: int) -> list[str]:
    _, device, t0, _ = RANKS[rank]
    tasks = RANK0 if rank == 0 else RANK2
    rows = []
    prev_end = None
    task_id = 100
    for step, name, type_, core, start, dur in tasks:
        s = ns(start)
        wait = 0 if prev_end is None else max(0, s - prev_end)
        prev_end = max(prev_end or 0, s + ns(dur))
        comm = core == "COMMUNICATION"
        task_id += 1
        block = "0" if comm else ("24" if core in ("AI_CORE", "MIX_AIC") else "48")
        rows.append(",".join([
            str(step), str(device), "4294967295", "N/A" if comm else str(task_id), "N/A" if comm else "2",
            name, type_, "N/A" if comm else "dynamic", core, stamp(t0, start) + "\t", dur,
            f"{wait // 1000}.{wait % 1000:03d}", block, "0", "N/A" if comm else "NO",
            "N/A" if comm else '"4096,4096"', "N/A" if comm else "FLOAT16", "N/A" if comm else "ND",
            "N/A" if comm else '"4096,4096"', "N/A" if comm else "FLOAT16", "N/A" if comm else "ND", "N/A",
        ]))
    return rows


def trace_view(rank: int) -> list[dict]:
    _, device, t0, host = RANKS[rank]
    tasks = RANK0 if rank == 0 else RANK2
    comm_pid, hw_pid, py_pid = 2000 + device * 100, 1000 + device * 100, 300 + rank
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": py_pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": py_pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_name", "pid": hw_pid, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_labels", "pid": hw_pid, "tid": 0, "args": {"labels": f"NPU {device}"}},
        {"ph": "M", "name": "thread_name", "pid": hw_pid, "tid": 2, "args": {"name": "Stream 2"}},
        {"ph": "M", "name": "process_name", "pid": comm_pid, "tid": 0, "args": {"name": "Communication"}},
        {"ph": "M", "name": "process_labels", "pid": comm_pid, "tid": 0, "args": {"labels": f"NPU {device}"}},
        {"ph": "M", "name": "thread_name", "pid": comm_pid, "tid": 0,
         "args": {"name": "Group group_name_5 Communication"}},
        {"ph": "M", "name": "thread_name", "pid": comm_pid, "tid": 1,
         "args": {"name": "Group group_name_20 Communication"}},
        {"ph": "M", "name": "thread_name", "pid": comm_pid, "tid": 2, "args": {"name": "Plane 0"}},
    ]
    for step, (start, dur) in host.items():
        events.append({"ph": "X", "name": f"ProfilerStep#{step}", "pid": py_pid, "tid": py_pid,
                       "ts": stamp(t0, start), "dur": float(dur), "cat": "cpu_op", "args": {}})
    for _, name, _, core, start, dur in tasks:
        if core != "COMMUNICATION":
            events.append({"ph": "X", "name": name, "pid": hw_pid, "tid": 2, "ts": stamp(t0, start),
                           "dur": float(dur), "args": {"Task Type": "AI_CORE", "Physic Stream Id": 2}})
            continue
        op = name.split("_")[1]
        tid = 0 if "_097_" in name else 1
        events.append({"ph": "X", "name": name, "pid": comm_pid, "tid": tid, "ts": stamp(t0, start),
                       "dur": float(dur), "args": {"connection_id": 1, "model id": 4294967295,
                                                   "data_type": "FP16", "alg_type": "MESH",
                                                   "count": COUNTS[op]}})
        events.append({"ph": "X", "name": "Memcpy", "pid": comm_pid, "tid": 2, "ts": stamp(t0, start),
                       "dur": 1.5, "args": {"task type": "Memcpy", "size(Byte)": COUNTS[op] * 2}})
    return events


def communication(rank: int) -> dict:
    _, _, t0, _ = RANKS[rank]
    tasks = RANK0 if rank == 0 else RANK2
    out: dict = {}
    for step, name, _, core, start, dur in tasks:
        if core != "COMMUNICATION":
            continue
        kind = "p2p" if name.startswith(("hcom_send", "hcom_receive")) else "collective"
        group = GROUP_OF[name.split("__")[1][:3]]
        elapse_ms = ns(dur) / 1e6
        transit_ms = 0.010
        wait_ms = round(elapse_ms - transit_ms - 0.001, 6)
        size_mb = COUNTS[name.split("_")[1]] * 2 / 1e6
        op = {
            "Communication Time Info": {
                "Start Timestamp(us)": float(stamp(t0, start)),
                "Elapse Time(ms)": elapse_ms, "Transit Time(ms)": transit_ms, "Wait Time(ms)": wait_ms,
                "Synchronization Time(ms)": wait_ms, "Idle Time(ms)": 0.001,
                "Wait Time Ratio": round(wait_ms / (wait_ms + transit_ms), 4),
                "Synchronization Time Ratio": round(wait_ms / (wait_ms + transit_ms), 4),
            },
            "Communication Bandwidth Info": {
                "RDMA": {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0,
                         "Large Packet Ratio": 0, "Size Distribution": {}},
                "HCCS": {"Transit Size(MB)": size_mb, "Transit Time(ms)": transit_ms,
                         "Bandwidth(GB/s)": round(size_mb / transit_ms, 4), "Large Packet Ratio": 0.0,
                         "Size Distribution": {str(size_mb): [1, transit_ms]}},
                "SDMA": {"Transit Size(MB)": size_mb, "Transit Time(ms)": transit_ms,
                         "Bandwidth(GB/s)": round(size_mb / transit_ms, 4), "Large Packet Ratio": 0,
                         "Size Distribution": {}},
            },
        }
        out.setdefault(f"step{step}", {"p2p": {}, "collective": {}})[kind][f"{name}@{FULL_HASH[group]}"] = op
    return out


def main() -> None:
    for rank, (folder, device, _, _) in RANKS.items():
        root = HERE / folder
        out = root / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernel_details.csv").write_text("\r\n".join([KERNEL_HEADER, *kernel_rows(rank)]) + "\r\n",
                                                encoding="utf-8", newline="")
        lines = [STEP_HEADER]
        for step, values in EXPECTED[rank].items():
            lines.append(",".join([str(device), str(step), *values]))
        (out / "step_trace_time.csv").write_text("\r\n".join(lines) + "\r\n", encoding="utf-8", newline="")
        (out / "trace_view.json").write_text(json.dumps(trace_view(rank), indent=1) + "\n", encoding="utf-8")
        (out / "communication.json").write_text(json.dumps(communication(rank), indent=1) + "\n",
                                                encoding="utf-8")
        info = {"config": {"experimental_config": {"_profiler_level": "Level1", "_export_type": "text"}},
                "torch_npu_version": "2.7.1", "cann_version": "8.3.RC1", "rank_id": rank}
        (root / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4) + "\n", encoding="utf-8")
        meta = {"ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": ""},
                "distributed_args": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                                     "data_parallel_size": 2, "world_size": 4, "rank": rank},
                "parallel_group_info": PARALLEL_GROUPS[rank]}
        (root / "profiler_metadata.json").write_text(json.dumps(meta, indent=4) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
