"""The one classifier: Ascend HCCL names/Type/core and Kineto NCCL kernels to kind, family, group."""

from __future__ import annotations

import pandas as pd
import pytest
from ditpar.core.classify import ascend_one, classify_ascend, classify_kineto, kineto_one, op_family
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("name", "type_", "core", "kind", "family", "group"),
    [
        ("hcom_allReduce__586_0_1", "hcom_allReduce_", "HCCL", "comm", "allreduce", "586"),
        ("hcom_allReduce__868_3_1", "N/A", "HCCL", "comm", "allreduce", "868"),  # level0: Type N/A
        ("hcom_allGather__346_12_1", "hcom_allGather_", "COMMUNICATION", "comm", "allgather", "346"),
        ("hcom_reduceScatter__097_0_1", "hcom_reduceScatter_", "COMMUNICATION", "comm", "reducescatter", "097"),
        ("hcom_alltoall__170_2_1", "hcom_alltoall_", "COMMUNICATION", "comm", "alltoall", "170"),
        ("hcom_alltoallv__170_2_1", "hcom_alltoallv_", "COMMUNICATION", "comm", "alltoallv", "170"),
        ("hcom_alltoallvc__170_2_1", "hcom_alltoallvc_", "COMMUNICATION", "comm", "alltoallv", "170"),
        ("hcom_broadcast__483_0", "hcom_broadcast_", "HCCL", "comm", "broadcast", "483"),  # 2023 two-part
        ("hcom_send__097_1_1", "hcom_send_", "COMMUNICATION", "comm", "send", "097"),
        ("hcom_receive__097_1_1", "hcom_receive_", "COMMUNICATION", "comm", "recv", "097"),
        ("hcom_batchSendRecv__128_4_1", "hcom_batchSendRecv_", "COMMUNICATION", "comm", "batchsendrecv", "128"),
        ("hcom_reduce__612_0_1", "hcom_reduce_", "COMMUNICATION", "comm", "other_comm", "612"),
        ("hcom_scatter__612_0_1", "hcom_scatter_", "COMMUNICATION", "comm", "other_comm", "612"),
        ("hcom_allReduce__586_-1_1", "hcom_allReduce_", "HCCL", "comm", "allreduce", "586"),  # started early
        ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "compute", "", ""),
        ("trans_TransData_0", "N/A", "N/A", "compute", "", ""),  # level0 compute rows
        ("aclnnNonzero_NonzeroAiCpu_Nonzero", "Nonzero", "AI_CPU", "compute", "", ""),
        ("MemcpyAsync", "MemcpyAsync", "DSA_SQE", "compute", "", ""),
        ("hcom_allGather_AicpuKernel", "hcom_allGather_AicpuKernel", "AI_CPU", "other", "allgather", ""),
    ],
)
def test_ascend_rows(name, type_, core, kind, family, group):
    assert ascend_one(name, type_, core)[:3] == (kind, family, group)
    assert ascend_one(name, type_, core)[3] is None


def test_ascend_unknown_comm_op_is_counted_not_guessed():
    out = classify_ascend(pd.Series(["hcom_fancyNewOp__586_0_1", "hcom_fancyNewOp__586_1_1", "Add"]),
                          pd.Series(["hcom_fancyNewOp_", "hcom_fancyNewOp_", "Add"]),
                          pd.Series(["COMMUNICATION", "COMMUNICATION", "AI_VECTOR_CORE"]))
    assert out.kind.tolist() == ["comm", "comm", "compute"]
    assert out.family.tolist() == ["other_comm", "other_comm", ""]
    assert out.unclassified == {"hcom_fancyNewOp_": 2}


@pytest.mark.parametrize(
    ("name", "cat", "coll", "kind", "family"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "allreduce",
         "comm", "allreduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "", "comm", "allgather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", "kernel", "", "comm", "reducescatter"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel", "all_to_all", "comm", "alltoall"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel", "all_to_allv", "comm", "alltoallv"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)", "kernel", "send", "comm", "send"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)", "kernel", "recv", "comm", "recv"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(x)", "kernel", "_allgather_base", "comm", "allgather"),
        ("ncclKernel_ReduceScatter_RING_LL_Sum_float(x)", "kernel", "_reduce_scatter_base", "comm",
         "reducescatter"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(x)", "kernel", "allgather_into_tensor_coalesced", "comm",
         "allgather"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(x)", "kernel", "broadcast", "comm", "broadcast"),
        ("void cudnn::bn_bw_1C11_kernel_new<float>(float)", "kernel", "", "compute", ""),
        ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", "", "other", ""),
        ("Memset (Device)", "gpu_memset", "", "other", ""),
    ],
)
def test_kineto_rows(name, cat, coll, kind, family):
    assert kineto_one(name, cat, coll)[:2] == (kind, family)


def test_sendrecv_without_args_is_counted():
    name = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    out = classify_kineto(pd.Series([name, name, "gemm"]), pd.Series(["kernel"] * 3), pd.Series(["", "", ""]),
                          pd.Series(["", "", ""]))
    assert out.kind.tolist() == ["comm", "comm", "compute"]
    assert out.family.tolist() == ["other_comm", "other_comm", ""]
    assert sum(out.unclassified.values()) == 2
    assert "all-to-all or send/recv" in next(iter(out.unclassified))


def test_kineto_group_only_on_comm_rows():
    out = classify_kineto(pd.Series(["ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "gemm"]),
                          pd.Series(["kernel", "kernel"]), pd.Series(["allreduce", ""]), pd.Series(["3", "3"]))
    assert out.group.tolist() == ["3", ""]


def test_op_family_tokens():
    assert op_family("allReduce") == "allreduce"
    assert op_family("all_to_allv") == "alltoallv"
    assert op_family("reduce_scatter_tensor_coalesced") == "reducescatter"
    assert op_family("somethingElse") is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20), st.text(max_size=12), st.sampled_from(["AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC",
                                                                    "HCCL", "COMMUNICATION", "", "N/A"]))
def test_an_hcom_task_is_never_compute(tail, type_, core):
    """step_breakdown looks for hcom_receive tasks among the non-compute rows only: this must hold."""
    assert ascend_one("hcom_" + tail, type_, core)[0] != "compute"
    assert ascend_one("hcom_receive" + tail, type_, core)[0] != "compute"


def test_a_kind_outside_the_contract_is_refused(monkeypatch):
    """The readers do not scan every row's kind again: the classifier checks its distinct decisions."""
    import ditpar.core.classify as classify_module

    monkeypatch.setattr(classify_module, "ascend_one", lambda n, t, c: ("bogus", "", "", None))
    with pytest.raises(ValueError, match="unknown kind"):
        classify_ascend(pd.Series(["k"]), pd.Series(["t"]), pd.Series(["AI_CORE"]))
    monkeypatch.undo()
    out = classify_ascend(pd.Series(["hcom_allReduce__586_0_1", "matmul"]), pd.Series(["", ""]),
                          pd.Series(["HCCL", "AI_CORE"]))
    assert out.comm.tolist() == [True, False] and out.kind.tolist() == ["comm", "compute"]
