"""The CPU a speed was measured on: its model name and the instruction sets INT8 and BF16 speed depend on."""

from __future__ import annotations

from pathlib import Path

# What moves the INT8/FP32 ratio: VNNI (INT8 dot products), AMX (tiles), BF16 (OpenVINO runs "FP32" in BF16)
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """`cpu_model` (as /proc/cpuinfo names it) and `cpu_isa` (the ISA_FLAGS it has, '+'-joined; 'unknown')."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {"cpu_model": "unknown", "cpu_isa": "unknown"}
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                 "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return {"cpu_model": model, "cpu_isa": "+".join(f for f in ISA_FLAGS if f in flags) or "unknown"}


def describe(info: dict) -> str:
    """'AMD EPYC (avx2+avx512f+avx512_vnni+avx512_bf16)'."""
    return f"{info.get('cpu_model', 'unknown')} ({info.get('cpu_isa', 'unknown')})"
