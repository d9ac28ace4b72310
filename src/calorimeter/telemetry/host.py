"""Host metrics from procfs/sysfs: CPU utilization, CPU temperature, RAPL energy, InfiniBand counters."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.metadata import UnavailableRegistry

HOST_DEVICE = "host"

#: InfiniBand ``port_xmit_data`` / ``port_rcv_data`` count 4-byte words (IBTA PortCounters).
IB_WORD_BYTES = 4


def parse_proc_stat_cpu(text: str) -> tuple[int, int, int]:
    """Parse the aggregate ``cpu`` line of /proc/stat.

    Args:
        text: Content of /proc/stat.

    Returns:
        ``(busy_jiffies, total_jiffies, steal_jiffies)``, where idle and iowait count as not busy and guest time
        (already inside user/nice) is not counted twice; steal (time a virtual machine's CPUs were ready but the
        hypervisor ran something else) counts as busy and is also given alone.
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            vals = [int(x) for x in line.split()[1:]]
            vals += [0] * (10 - len(vals))
            user, nice, system, idle, iowait, irq, softirq, steal = vals[:8]
            total = user + nice + system + idle + iowait + irq + softirq + steal
            return total - idle - iowait, total, steal
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def cpu_util_pct(prev: tuple[int, ...], cur: tuple[int, ...]) -> float | None:
    """Busy share of all CPUs between two /proc/stat readings, in percent (None if no time passed)."""
    d_busy = cur[0] - prev[0]
    d_total = cur[1] - prev[1]
    if d_total <= 0:
        return None
    return 100.0 * d_busy / d_total


def cpu_steal_pct(prev: tuple[int, int, int], cur: tuple[int, int, int]) -> float | None:
    """Stolen share of all CPUs between two /proc/stat readings, in percent (None if no time passed): on a virtual
    machine, the time its CPUs were runnable while the hypervisor ran another guest. A host-bound cell waits on its
    host, so a host that lost CPU time to other guests runs it slower (docs/projection.md, host speed)."""
    d_total = cur[1] - prev[1]
    if d_total <= 0:
        return None
    return 100.0 * (cur[2] - prev[2]) / d_total


def _read_text(path: Path) -> str:
    return path.read_text().strip()


@dataclass
class _Sensor:
    metric: str
    source: str
    path: Path
    scale: float


@dataclass
class HostReader:
    """Reads the host metrics of one node.

    Args:
        proc_root: procfs mount (``/proc``); changeable for tests.
        sys_root: sysfs mount (``/sys``); changeable for tests.
    """

    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    sensors: list[_Sensor] = field(default_factory=list)
    info: JsonObject = field(default_factory=dict)
    _prev_stat: tuple[int, int, int] | None = None
    _stat_ok: bool = False

    def probe(self, registry: UnavailableRegistry) -> None:
        """Find the readable sensors; record each missing host metric once with the reason."""
        try:
            self._prev_stat = parse_proc_stat_cpu(_read_text(self.proc_root / "stat"))
            self._stat_ok = True
        except (OSError, ValueError) as exc:
            registry.add("cpu_util_pct", HOST_DEVICE, f"/proc/stat unreadable: {exc}")
        self._probe_temps(registry)
        self._probe_rapl(registry)
        self._probe_ib(registry)

    def _try_add(self, metric: str, source: str, path: Path, scale: float, errors: list[str]) -> bool:
        try:
            float(_read_text(path))
        except (OSError, ValueError) as exc:
            errors.append(f"{path}: {exc}")
            return False
        self.sensors.append(_Sensor(metric, source, path, scale))
        return True

    def _probe_temps(self, registry: UnavailableRegistry) -> None:
        errors: list[str] = []
        found = False
        for zone in sorted((self.sys_root / "class/thermal").glob("thermal_zone*")):
            try:
                kind = _read_text(zone / "type")
            except OSError:
                kind = "unknown"
            found |= self._try_add("cpu_temp_c", f"{zone.name}:{kind}", zone / "temp", 1e-3, errors)
        for hw in sorted((self.sys_root / "class/hwmon").glob("hwmon*")):
            try:
                name = _read_text(hw / "name")
            except OSError:
                name = hw.name
            for inp in sorted(hw.glob("temp*_input")):
                label_file = hw / inp.name.replace("_input", "_label")
                label = _read_text(label_file) if label_file.exists() else inp.name.replace("_input", "")
                found |= self._try_add("cpu_temp_c", f"hwmon:{name}/{label}", inp, 1e-3, errors)
        if not found:
            why = "; ".join(errors[:3]) if errors else "no /sys/class/thermal zone or hwmon temp*_input present"
            registry.add("cpu_temp_c", HOST_DEVICE, why)

    def _probe_rapl(self, registry: UnavailableRegistry) -> None:
        errors: list[str] = []
        found = False
        ranges: dict[str, float] = {}
        for zone in sorted((self.sys_root / "class/powercap").glob("intel-rapl:*")):
            try:
                name = _read_text(zone / "name")
            except OSError:
                name = zone.name
            source = f"{zone.name}:{name}"
            if self._try_add("rapl_energy_uj", source, zone / "energy_uj", 1.0, errors):
                found = True
                with contextlib.suppress(OSError, ValueError):
                    ranges[source] = float(_read_text(zone / "max_energy_range_uj"))
        self.info["rapl_max_energy_range_uj"] = ranges
        if not found:
            why = "; ".join(errors[:3]) if errors else "no /sys/class/powercap/intel-rapl:* zone (RAPL not exposed)"
            registry.add("rapl_energy_uj", HOST_DEVICE, why)

    def _probe_ib(self, registry: UnavailableRegistry) -> None:
        errors: list[str] = []
        found = False
        for port in sorted((self.sys_root / "class/infiniband").glob("*/ports/*")):
            source = f"{port.parent.parent.name}/{port.name}"
            c = port / "counters"
            found |= self._try_add("ib_tx_bytes", source, c / "port_xmit_data", IB_WORD_BYTES, errors)
            found |= self._try_add("ib_rx_bytes", source, c / "port_rcv_data", IB_WORD_BYTES, errors)
        if not found:
            why = "; ".join(errors[:3]) if errors else "no /sys/class/infiniband/*/ports/* present"
            for metric in ("ib_tx_bytes", "ib_rx_bytes"):
                registry.add(metric, HOST_DEVICE, why)

    def read(self) -> list[tuple[str, str, float | None]]:
        """Read every host sensor now.

        Returns:
            ``(metric, source, value)`` triples; a sensor that fails now gives value None.
        """
        out: list[tuple[str, str, float | None]] = []
        if self._stat_ok:
            try:
                cur = parse_proc_stat_cpu(_read_text(self.proc_root / "stat"))
                if self._prev_stat is not None:
                    util = cpu_util_pct(self._prev_stat, cur)
                    if util is not None:
                        out.append(("cpu_util_pct", "all", util))
                        out.append(("cpu_steal_pct", "all", cpu_steal_pct(self._prev_stat, cur)))
                        self._prev_stat = cur
                else:
                    self._prev_stat = cur
            except (OSError, ValueError):
                out.append(("cpu_util_pct", "all", None))
                out.append(("cpu_steal_pct", "all", None))
        for s in self.sensors:
            try:
                value: float | None = float(_read_text(s.path)) * s.scale
            except (OSError, ValueError):
                value = None
            out.append((s.metric, s.source, value))
        return out
