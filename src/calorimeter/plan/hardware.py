"""Hardware profiles: devices per node, device memory, dense peak and how to detect the local machine."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass

from calorimeter.plan.config_errors import short, suggest
from calorimeter.plan.json_types import JsonObject


@dataclass(frozen=True)
class HardwareProfile:
    """One kind of node.

    Attributes:
        name: profile key (``h200``, ``h100``, ``mi250``, ``cpu``).
        accelerator: ``cuda``, ``rocm`` or ``cpu``; selects the communication backend (NCCL/RCCL or gloo).
        gpus_per_node: devices (ranks) per node; for ``cpu`` the number of CPU ranks per node.
        memory_gb: memory per device in GB (10^9 bytes).
        peak_bf16_tflops: dense bf16 peak per device in TFLOP/s, the MFU denominator; None where no honest
            number exists (CPU), in which case MFU is not reported.
        interconnect: intra-node link, for records and captions.
        slurm_constraint: value for ``--constraint`` on clusters that tag nodes by GPU model.
        link_gbyte_s: intra-node link bandwidth per device and direction in GB/s (vendor spec), the projection's
            fallback where no collective was measured on such a node.
        nic_gbit_s_per_gpu: inter-node network bandwidth per device and direction in Gbit/s (the NIC line rate
            divided by the devices sharing it), used by projections of multi-node cells until a multi-node
            measurement exists.
        nic_latency_us: one inter-node message's latency in microseconds (same use).
        match: a substring of the GPU's name (as ``nvidia-smi`` prints it, case-insensitive) that makes
            ``hardware: auto`` pick this profile; None for profiles never detected.
    """

    name: str
    accelerator: str
    gpus_per_node: int
    memory_gb: float
    peak_bf16_tflops: float | None
    interconnect: str
    slurm_constraint: str | None = None
    link_gbyte_s: float | None = None
    nic_gbit_s_per_gpu: float | None = None
    nic_latency_us: float | None = None
    match: str | None = None

    def to_dict(self) -> JsonObject:
        """Plain dict for records."""
        return asdict(self)


PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in [
        # NVLink 4: 900 GB/s per GPU both directions; one 400 Gbit/s NDR NIC per GPU (HGX reference design; the
        # study's clusters had 100 Gbit/s InfiniBand: set it per projection, see docs/projection.md).
        HardwareProfile("h200", "cuda", 8, 141.0, 989.0, "NVLink 4 / NVSwitch (NV18)", "H200", 450.0, 400.0, 5.0,
                        "H200"),
        HardwareProfile("h100", "cuda", 8, 80.0, 989.0, "NVLink 4 / NVSwitch (NV18)", "H100", 450.0, 400.0, 5.0,
                        "H100"),
        # MI250: 4 packages x 2 GCDs per node; each GCD is one device with 64 GB and half the package's
        # 362.1 TFLOP/s dense bf16.
        HardwareProfile("mi250", "rocm", 8, 64.0, 181.0, "Infinity Fabric", "MI250"),
        HardwareProfile("cpu", "cpu", 2, 4.0, None, "shared memory (gloo)"),
    ]
}


#: names of the built-in profiles (a sweep may not redefine them)
BUILTIN_PROFILES = frozenset(PROFILES)


def get_profile(name: str) -> HardwareProfile:
    """Look a profile up by name (built-in or registered by the sweep), with a message listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown hardware {short(name)}{suggest(name, ['auto', *PROFILES])}: neither built in nor "
                       "defined under `hardware_profiles:` of the sweep file (docs/models.md); known: auto, "
                       f"{', '.join(sorted(PROFILES))}") from None


def register_profile(profile: HardwareProfile) -> HardwareProfile:
    """Add a profile defined by a sweep to this process's profiles (the same definition again is a no-op).

    Raises:
        ValueError: the name is a built-in profile's.
    """
    if profile.name in BUILTIN_PROFILES and PROFILES[profile.name] != profile:
        raise ValueError(f"hardware {profile.name!r} is a built-in profile; give the definition another name")
    PROFILES[profile.name] = profile
    return profile


def accelerator_of(hardware: str) -> str:
    """``cuda``, ``rocm`` or ``cpu`` for a profile name; profiles detected on another machine (``cuda-<gpu>``) are
    CUDA."""
    profile = PROFILES.get(hardware)
    if profile is not None:
        return profile.accelerator
    return "cuda" if hardware.startswith("cuda") else "cpu"


def device_mismatch(hardware: str, device_name: str) -> str | None:
    """Why a rank's device is not the GPU type its cell was planned for, or None when it is (or when the profile
    names no ``match``: CPU and detected profiles). A cell planned for ``h100`` that lands on an H200 would train
    normally and be recorded, tabled and calibrated as an H100 cell (it happened: a request for two H100s was served
    by two H200s); the rank refuses it before the model is built instead."""
    profile = PROFILES.get(hardware)
    if profile is None or not profile.match or profile.match.upper() in device_name.upper():
        return None
    where = f" (SLURM: --constraint={profile.slurm_constraint})" if profile.slurm_constraint else ""
    return (f"hardware: {hardware} was planned (its GPUs' names contain {profile.match!r}), but this rank's device "
            f"is {device_name!r}: run the cell on a node of that type{where}, or plan it for this GPU (hardware: "
            "auto, or the profile whose match is in this name)")


def detect_local_gpus() -> list[tuple[str, float]]:
    """(name, memory GB) of each NVIDIA GPU on this machine (empty without a driver); uses nvidia-smi, not CUDA."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.splitlines():
        if "," in line:
            name, mem_mib = line.rsplit(",", 1)
            gpus.append((name.strip(), float(mem_mib) * 2**20 / 1e9))
    return gpus


def detect_profile() -> tuple[HardwareProfile, int]:
    """Profile and device count of the local machine: the profile whose ``match`` is in the GPU's name (H100, H200,
    or one the sweep defines under ``hardware_profiles:``) when there is one."""
    gpus = detect_local_gpus()
    if not gpus:
        return PROFILES["cpu"], PROFILES["cpu"].gpus_per_node
    name, mem_gb = gpus[0]
    # sweep-defined profiles first (a sweep may describe its H100 variant better), then the longest match
    candidates = sorted((p for p in PROFILES.values() if p.match and p.match.upper() in name.upper()),
                        key=lambda p: (p.name in BUILTIN_PROFILES, -len(p.match or "")))
    if candidates:
        return candidates[0], len(gpus)
    # An unknown CUDA GPU: usable, but no peak to compute MFU against (define it under `hardware_profiles:` with a
    # `match` and a peak for MFU). Registered so later lookups find it.
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    profile = HardwareProfile(f"cuda-{slug}", "cuda", len(gpus), round(mem_gb, 1), None, "unknown")
    PROFILES[profile.name] = profile
    return profile, len(gpus)
