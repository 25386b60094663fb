"""The machine's own lines in an answer: its preset's notes and the collective library under its torch backend."""

from __future__ import annotations

from ditpar.plan.inputs.frameworks import COLLECTIVE_LIBRARY, NATIVE_BACKEND


def collectives(hw) -> tuple[str, str]:
    """(torch backend name, collective library) of the machine's vendor; ('', '') for a vendor not listed."""
    vendor = str(getattr(hw, "vendor", "")).lower()
    return NATIVE_BACKEND.get(vendor, ""), COLLECTIVE_LIBRARY.get(vendor, "")


def machine_record(hw) -> dict:
    """JSON `machine`: the preset's notes, the torch backend and the library it runs."""
    backend, library = collectives(hw)
    return {"notes": " ".join(str(hw.notes).split()), "torch_backend": backend, "collective_library": library}


def machine_lines(hw) -> list[str]:
    """The notes as one line, and the library where its name is not the backend's (RCCL under 'nccl' on ROCm)."""
    rec = machine_record(hw)
    lines = [f"machine: {rec['notes']}"] if rec["notes"] else []
    if rec["collective_library"] and rec["collective_library"].lower() != rec["torch_backend"]:
        lines.append(f"collectives: {rec['collective_library']} (torch backend '{rec['torch_backend']}': "
                     f"init_process_group('{rec['torch_backend']}'); comm_bench.py and plan_bench.py --backend auto "
                     f"pick it)")
    return lines
