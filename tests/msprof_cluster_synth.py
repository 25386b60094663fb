"""Write msprof-analyze ``cluster_analysis_output`` files from torch_npu text rank folders (test input).

No real msprof-analyze output is in ../shared, so the tests build one from the real level-1 capture
in the formats msprof-analyze writes them (Ascend mstt @ 99c2e0f9, profiler/msprof_analyze/cluster_analyse/:
analysis/step_trace_time_analysis.py, analysis/communication_analysis.py, analysis/comm_matrix_analysis.py,
communication_group/communication_json_group.py, cluster_utils/data_transfer_adapter.py and
common_func/tables_config.py for the db). Links are already global there: this capture has no
parallel_group_info, so each rank's own "k-k" link gives its local rank, as msprof-analyze maps it.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

OUT = "ASCEND_PROFILER_OUTPUT"
STEP_COLUMNS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
                "Bubble", "Communication(Not Overlapped and Exclude Receive)")


def _rank_files(ranks: dict[int, Path]) -> tuple[dict, dict, dict]:
    steps, comm, matrix = {}, {}, {}
    for rank, folder in ranks.items():
        with open(folder / OUT / "step_trace_time.csv", newline="") as fh:
            steps[rank] = list(csv.DictReader(fh))
        comm[rank] = json.loads((folder / OUT / "communication.json").read_text())
        path = folder / OUT / "communication_matrix.json"
        matrix[rank] = json.loads(path.read_text()) if path.is_file() else {}
    return steps, comm, matrix


def build_cluster(ranks: dict[int, Path], target: Path, db: bool = False) -> Path:
    """cluster_analysis_output under target, from {global rank: *_ascend_pt folder}; text or db form."""
    out = target / "cluster_analysis_output"
    out.mkdir(parents=True)
    steps, comm, matrix = _rank_files(ranks)
    rank_set = str(tuple(sorted(ranks)))
    step_rows = [[r["Step"], "rank", str(rank), *[r.get(c, "0") for c in STEP_COLUMNS]]
                 for rank in sorted(ranks) for r in steps[rank]]
    cluster_comm: dict = {rank_set: {}}
    hashes = set()
    for rank, data in comm.items():
        for step, kinds in data.items():
            for ops in kinds.values():
                for op_key, op in ops.items():
                    if op_key == "Total Op Info":
                        continue
                    hashes.add(op_key.split("@")[1])
                    cluster_comm[rank_set].setdefault(step, {}).setdefault(op_key, {})[str(rank)] = op
    local: dict[tuple[str, str], int] = {}
    for rank, data in matrix.items():
        for kinds in data.values():
            for ops in kinds.values():
                for op_key, links in ops.items():
                    for link in links:
                        src, dst = link.split("-")
                        if src == dst:
                            local[(op_key.split("@")[1], src)] = rank
    cluster_matrix: dict = {rank_set: {}}
    for data in matrix.values():
        for step, kinds in data.items():
            for ops in kinds.values():
                for op_key, links in ops.items():
                    op, group = op_key.split("@")
                    if not op.endswith("-total"):
                        continue
                    total = cluster_matrix[rank_set].setdefault(step, {}).setdefault(f"Total Op Info@{group}", {})
                    for link, info in links.items():
                        src, dst = link.split("-")
                        if (group, src) in local and (group, dst) in local:
                            total[f"{local[(group, src)]}-{local[(group, dst)]}"] = info
    groups = [{"type": "collective", "rank_set": sorted(ranks), "group_name": h, "group_id": "", "pg_name": ""}
              for h in sorted(hashes)]
    if not db:
        with open(out / "cluster_step_trace_time.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["Step", "Type", "Index", *STEP_COLUMNS])
            w.writerows(step_rows)
            w.writerow([step_rows[0][0], "stage", rank_set, *step_rows[0][3:]])  # aggregate row: ignored
        (out / "cluster_communication.json").write_text(json.dumps(cluster_comm))
        (out / "cluster_communication_matrix.json").write_text(json.dumps(cluster_matrix))
        (out / "communication_group.json").write_text(json.dumps(
            {"collective": [sorted(ranks)], "p2p": [], "comm_group_parallel_info": groups}))
        return out
    con = sqlite3.connect(out / "cluster_analysis.db")
    con.execute("CREATE TABLE ClusterStepTraceTime (step TEXT, type TEXT, [index] TEXT, computing NUMERIC, "
                "communication_not_overlapped NUMERIC, overlapped NUMERIC, communication NUMERIC, free NUMERIC, "
                "stage NUMERIC, bubble NUMERIC, communication_not_overlapped_and_exclude_receive NUMERIC)")
    con.executemany("INSERT INTO ClusterStepTraceTime VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [[r[0], r[1], r[2], *[float(x) for x in r[3:]]] for r in step_rows])
    con.execute("CREATE TABLE ClusterCommAnalyzerTime (rank_set TEXT, step TEXT, rank_id INTEGER, hccl_op_name TEXT, "
                "group_name TEXT, start_timestamp NUMERIC, elapsed_time NUMERIC, transit_time NUMERIC, "
                "wait_time NUMERIC, synchronization_time NUMERIC, idle_time NUMERIC)")
    con.execute("CREATE TABLE ClusterCommAnalyzerBandwidth (rank_set TEXT, step TEXT, rank_id INTEGER, "
                "hccl_op_name TEXT, group_name TEXT, band_type TEXT, transit_size NUMERIC, transit_time NUMERIC, "
                "bandwidth NUMERIC, large_packet_ratio NUMERIC, package_size NUMERIC, count NUMERIC, "
                "total_duration NUMERIC)")
    keys = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")
    for step, ops in cluster_comm[rank_set].items():
        for op_key, per_rank in ops.items():
            op, group = op_key.split("@")
            for rank, entry in per_rank.items():
                info = entry["Communication Time Info"]
                con.execute("INSERT INTO ClusterCommAnalyzerTime VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (rank_set, step, int(rank), op, group, info["Start Timestamp(us)"],
                             *[info[k] for k in keys]))
                for band, bw in entry["Communication Bandwidth Info"].items():
                    for package, (count, duration) in (bw["Size Distribution"] or {"0": (0, 0)}).items():
                        con.execute("INSERT INTO ClusterCommAnalyzerBandwidth VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                    (rank_set, step, int(rank), op, group, band, bw["Transit Size(MB)"],
                                     bw["Transit Time(ms)"], bw["Bandwidth(GB/s)"], bw["Large Packet Ratio"],
                                     float(package), count, duration))
    con.execute("CREATE TABLE ClusterCommAnalyzerMatrix (rank_set TEXT, step TEXT, hccl_op_name TEXT, "
                "group_name TEXT, src_rank TEXT, dst_rank TEXT, transit_size NUMERIC, transit_time NUMERIC, "
                "bandwidth NUMERIC, transport_type TEXT, op_name TEXT)")
    for step, ops in cluster_matrix[rank_set].items():
        for op_key, links in ops.items():
            op, group = op_key.split("@")
            for link, info in links.items():
                src, dst = link.split("-")
                con.execute("INSERT INTO ClusterCommAnalyzerMatrix VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (rank_set, step, op, group, src, dst, info["Transit Size(MB)"], info["Transit Time(ms)"],
                             info["Bandwidth(GB/s)"], info["Transport Type"], ""))
    con.execute("CREATE TABLE CommunicationGroup (type TEXT, rank_set TEXT, group_name TEXT, group_id TEXT, "
                "pg_name TEXT)")
    con.executemany("INSERT INTO CommunicationGroup VALUES (?,?,?,?,?)",
                    [(g["type"], str(g["rank_set"]), g["group_name"], g["group_id"], g["pg_name"]) for g in groups])
    con.commit()
    con.close()
    return out
