"""The node's GPUs, read from the node itself, and the device files a job's grant maps to.

ROCm: the KFD topology, /sys/class/kfd/kfd/topology/nodes/<N>/ (the amdgpu
driver's; ROCm's "KFD Topology" documentation lists the files).  A node whose
`gpu_id` is non-zero is a GPU agent -- one per partition in CPX and other
compute-partition modes -- and ROCr numbers the agents it exposes in KFD node
order, CPU-only nodes skipped: that order is what ROCR_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES and (on a node whose gres.conf lists the render nodes in
that order) Slurm's GPU indices count.  Each agent's render node is
/dev/dri/renderD<drm_render_minor> from its `properties`: 128, 136, 144, ... on
an MI300-class node in SPX mode (the driver reserves minors for the
partitions), so "128 + index" names a device that does not exist, or another
job's GPU.  Its PCI location is `domain` and `location_id` (bus << 8 | device
<< 3 | function); `unique_id` is what ROCr's GPU-<hex> UUIDs are made of.

CUDA: /proc/driver/nvidia/gpus/<pci>/information (the driver's own file: Model,
GPU UUID, Bus Location, Device Minor; captured on an H200 in
tests/data/node_facts/h200_proc/), one GPU per PCI device, numbered in Device
Minor order -- the order of gres.conf's File=/dev/nvidia[0-7], so Slurm's GPU
indices count it.  procfs is the node's whole table even inside a job whose
devices Slurm constrains (nvidia-smi there lists only the job's GPUs, numbered
from 0).  Without the folder, `nvidia-smi --query-gpu=index,pci.bus_id,uuid`
(nvidia-smi 580 has no `minor_number` field: the capture shows its refusal).

Memory in use, for preflight's idleness check, is read per PCI address, never
per index: ROCm from the amdgpu driver's sysfs (mem_info_vram_used and _total
of /sys/bus/pci/devices/<pci>/), CUDA from
`nvidia-smi --query-gpu=pci.bus_id,memory.used,memory.total`.

`specrepro node-facts [--root DIR] [--gpus LIST]` prints the table and what a
grant maps to: the one command to run on a node before a campaign.  Tests point
`root` at captured trees (tests/data/node_facts/, each naming its source).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence
from specrepro.util.errors import SpecreproError

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
GRANT_ENV = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


class NodeFactsError(SpecreproError, RuntimeError):
    """The node's GPUs could not be read, or a grant names GPUs the node does not have."""


@dataclass(frozen=True)
class Gpu:
    index: int  # in the runtime's own enumeration (ROCr: KFD node order, CPU nodes skipped)
    node_id: Optional[int]  # KFD topology node (ROCm)
    gpu_id: Optional[int]
    render_minor: Optional[int]
    pci: str  # domain:bus:device.function
    unique_id: str
    device: str  # the device file a container needs for this GPU
    partitions: Optional[int] = None  # ROCm: compute partitions (XCCs) of this agent

    @property
    def uuid(self) -> str:
        """ROCr's spelling of the GPU's unique id (ROCR_VISIBLE_DEVICES accepts it)."""
        return f"GPU-{int(self.unique_id):016x}" if self.unique_id.isdigit() else self.unique_id


def _properties(path: Path) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _pci(domain: int, location_id: int) -> str:
    return f"{domain:04x}:{(location_id >> 8) & 0xff:02x}:{(location_id >> 3) & 0x1f:02x}.{location_id & 0x7}"


def rocm_gpus(root: Path = Path("/")) -> List[Gpu]:
    """The GPU agents of the KFD topology under `root`, in ROCr's order."""
    nodes = Path(root) / KFD_NODES
    if not nodes.is_dir():
        raise NodeFactsError(f"{nodes}: no KFD topology (is the amdgpu driver loaded? is this a ROCm node?)")
    found = []
    for node in sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        gpu_id_file = node / "gpu_id"
        gpu_id = int(gpu_id_file.read_text().strip() or 0) if gpu_id_file.is_file() else 0
        props = _properties(node / "properties") if (node / "properties").is_file() else {}
        # a CPU node has gpu_id 0 and no SIMDs; older kernels lack gpu_id, so SIMDs decide there
        if not gpu_id and not props.get("simd_count"):
            continue
        minor = props.get("drm_render_minor")
        found.append(Gpu(index=len(found), node_id=int(node.name), gpu_id=gpu_id or None, render_minor=minor,
                         pci=pci_key(_pci(props.get("domain", 0), props.get("location_id", 0))),
                         unique_id=str(props.get("unique_id", "")), device=f"/dev/dri/renderD{minor}",
                         partitions=props.get("num_xcc")))
    if not found:
        raise NodeFactsError(f"{nodes}: no GPU agent in the KFD topology")
    return found


NVIDIA_PROC = "proc/driver/nvidia/gpus"


def pci_key(text: str) -> str:
    """One spelling of a PCI address: nvidia-smi's 00000000:18:00.0 and sysfs's 0000:18:00.0 alike."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*", text)
    if not m:
        return text.strip().lower()
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _information(path: Path) -> Dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def cuda_gpus(root: Path = Path("/"), nvidia_smi_csv: Optional[str] = None) -> List[Gpu]:
    """The node's NVIDIA GPUs: the driver's procfs under `root`, else `nvidia-smi --query-gpu=index,pci.bus_id,uuid`."""
    proc = Path(root) / NVIDIA_PROC
    infos = [_information(d / "information") for d in sorted(proc.iterdir()) if (d / "information").is_file()] \
        if proc.is_dir() else []
    if infos:
        infos.sort(key=lambda i: int(i.get("Device Minor", "0")))
        return [Gpu(index=k, node_id=None, gpu_id=None, render_minor=None, pci=pci_key(i.get("Bus Location", "")),
                    unique_id=i.get("GPU UUID", ""), device=f"/dev/nvidia{i.get('Device Minor')}")
                for k, i in enumerate(infos)]
    if nvidia_smi_csv is None:
        try:
            nvidia_smi_csv = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise NodeFactsError(f"{proc}: not there, and nvidia-smi could not list the GPUs: {exc}") from exc
    out = []
    for line in nvidia_smi_csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        # no minor number from nvidia-smi: /dev/nvidia<index> holds where minors follow the index (the usual case)
        out.append(Gpu(index=int(cells[0]), node_id=None, gpu_id=None, render_minor=None, pci=pci_key(cells[1]),
                       unique_id=cells[2], device=f"/dev/nvidia{cells[0]}"))
    if not out:
        raise NodeFactsError("nvidia-smi listed no GPU")
    return out


def node_gpus(accelerator: str, root: Path = Path("/"), nvidia_smi_csv: Optional[str] = None) -> List[Gpu]:
    if accelerator == "rocm":
        return rocm_gpus(root)
    if accelerator == "cuda":
        return cuda_gpus(root, nvidia_smi_csv)
    return []


def rocm_memory_used(gpus: Sequence[Gpu], root: Path = Path("/")) -> Dict[str, float]:
    """pci -> fraction of VRAM in use, from the amdgpu driver's sysfs (one PCI device: its partitions together)."""
    out = {}
    for g in gpus:
        dev = Path(root) / "sys" / "bus" / "pci" / "devices" / g.pci
        try:
            used = int((dev / "mem_info_vram_used").read_text().strip())
            total = int((dev / "mem_info_vram_total").read_text().strip())
        except (OSError, ValueError):
            continue
        if total > 0:
            out[g.pci] = used / total
    return out


def nvidia_memory_used(csv: str) -> Dict[str, float]:
    """pci -> fraction of memory in use, from `nvidia-smi --query-gpu=pci.bus_id,memory.used,memory.total
    --format=csv,noheader,nounits` (inside a constrained job: the job's GPUs only, keyed by their own address)."""
    out = {}
    for line in csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3:
            try:
                out[pci_key(cells[0])] = float(cells[1]) / float(cells[2])
            except (ValueError, ZeroDivisionError):
                continue
    return out


def _match(token: str, gpus: Sequence[Gpu], source: str) -> Gpu:
    token = token.strip()
    if token.isdigit():
        i = int(token)
        if i >= len(gpus):
            raise NodeFactsError(f"{source}: GPU {i} is not on this node ({len(gpus)} GPUs: 0-{len(gpus) - 1})")
        return gpus[i]
    for g in gpus:
        if token in (g.device, g.uuid, g.unique_id) or (token.startswith("/dev/") and Path(token).name ==
                                                          Path(g.device).name):
            return g
    raise NodeFactsError(f"{source}: {token!r} matches no GPU of this node (by index, device file or UUID)")


def grant(gpus: Sequence[Gpu], environ: Optional[Dict[str, str]] = None,
          explicit: Optional[Sequence] = None) -> Dict[str, object]:
    """The GPUs a job may use: `explicit` (serve.gpus / --gpus), else the first grant variable set.

    Tokens may be indices (in the runtime's order), device files (/dev/dri/renderD136, as some gres.conf grant
    them) or UUIDs.  A Slurm range (4-7) is spelled out.
    """
    environ = os.environ if environ is None else environ
    source, text = "serve.gpus", None
    if explicit is not None:
        text = ",".join(str(x) for x in explicit)
    else:
        for name in GRANT_ENV:
            if environ.get(name, "").strip():
                source, text = name, environ[name]
                break
    if text is None:
        return {"source": None, "gpus": []}
    tokens = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)-(\d+)\s*", part)
        tokens += [str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1)] if m else [part]
    chosen = [_match(t, gpus, source) for t in tokens if t.strip()]
    return {"source": source, "gpus": chosen}


def describe(gpus: Sequence[Gpu], granted: Dict[str, object]) -> str:
    lines = ["index  kfd node  gpu_id  render  pci            unique id             device"]
    for g in gpus:
        lines.append(f"{g.index:<6} {g.node_id if g.node_id is not None else '-':<9} {g.gpu_id or '-':<7} "
                     f"{g.render_minor if g.render_minor is not None else '-':<7} {g.pci:<14} {g.uuid:<21} {g.device}")
    if granted["source"]:
        chosen = granted["gpus"]
        lines += ["", f"granted by {granted['source']}: " + ", ".join(f"{g.index} -> {g.device}" for g in chosen)]
    return "\n".join(lines)


def as_records(gpus: Sequence[Gpu]) -> List[Dict[str, object]]:
    return [dict(asdict(g), uuid=g.uuid) for g in gpus]
