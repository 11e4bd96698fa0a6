"""The node's GPUs from its own KFD topology, and what a grant maps to (trees shaped after captured sysfs output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, kfd_tree, nvidia_proc_tree, specrepro
from specrepro.measure import node_facts as nf

DATA = ROOT / "tests" / "data" / "node_facts"


def devices(gpus, environ=None, explicit=None):
    return [g.device for g in nf.grant(gpus, environ or {}, explicit)["gpus"]]


def test_spx_mi355x_grants_map_to_the_drivers_render_minors(tmp_path):
    gpus = nf.rocm_gpus(kfd_tree("mi355x_spx_8gpu", tmp_path))
    assert [g.render_minor for g in gpus] == [128, 136, 144, 152, 160, 168, 176, 184]
    assert devices(gpus, {"SLURM_JOB_GPUS": "1"}) == ["/dev/dri/renderD136"]
    assert devices(gpus, {"SLURM_STEP_GPUS": "5-7", "SLURM_JOB_GPUS": "0"}) == [
        "/dev/dri/renderD168", "/dev/dri/renderD176", "/dev/dri/renderD184"]
    # not 128 + index: GPU 1 is renderD136, renderD129 is no GPU of this node
    assert "/dev/dri/renderD129" not in {g.device for g in gpus}


def test_cpu_nodes_first_are_skipped_and_pci_matches_the_captured_drm_listing(tmp_path):
    gpus = nf.rocm_gpus(kfd_tree("mi300_spx_cpu_nodes_first", tmp_path))
    assert [g.node_id for g in gpus] == [4, 5, 6, 7] and [g.index for g in gpus] == [0, 1, 2, 3]
    captured = json.loads((DATA / "mi300_spx_cpu_nodes_first.json").read_text())["pci_render"]
    assert {g.pci: g.render_minor for g in gpus} == captured
    assert devices(gpus, {"ROCR_VISIBLE_DEVICES": "1"}) == ["/dev/dri/renderD136"]
    assert gpus[0].uuid == "GPU-6cdb410c2f219ac0"  # ROCr's spelling of unique_id 7843934696581995200
    assert devices(gpus, {"HIP_VISIBLE_DEVICES": "GPU-6cdb410c2f219ac0"}) == ["/dev/dri/renderD128"]


def test_cpx_partitions_are_agents_of_their_own(tmp_path):
    gpus = nf.rocm_gpus(kfd_tree("mi300_cpx", tmp_path))
    assert len(gpus) == 24 and {g.partitions for g in gpus} == {1}
    assert devices(gpus, {"ROCR_VISIBLE_DEVICES": "5,6,7"}) == [
        "/dev/dri/renderD133", "/dev/dri/renderD136", "/dev/dri/renderD137"]


def test_a_grant_of_device_files(tmp_path):
    gpus = nf.rocm_gpus(kfd_tree("mi355x_spx_8gpu", tmp_path))
    chosen = nf.grant(gpus, {"SLURM_JOB_GPUS": "/dev/dri/renderD144,/dev/dri/renderD184"})["gpus"]
    assert [g.index for g in chosen] == [2, 7]


def test_a_grant_the_node_does_not_have_is_an_error_naming_the_variable(tmp_path):
    gpus = nf.rocm_gpus(kfd_tree("mi300_spx_cpu_nodes_first", tmp_path))
    with pytest.raises(nf.NodeFactsError, match=r"SLURM_JOB_GPUS: GPU 5 is not on this node \(4 GPUs: 0-3\)"):
        nf.grant(gpus, {"SLURM_JOB_GPUS": "3,5"})
    with pytest.raises(nf.NodeFactsError, match="no KFD topology"):
        nf.rocm_gpus(tmp_path / "empty")


def test_cuda_gpus_from_the_drivers_procfs_as_captured_on_the_h200():
    gpus = nf.cuda_gpus(ROOT / "tests" / "data" / "node_facts" / "h200_proc")
    assert [(g.index, g.pci, g.unique_id, g.device) for g in gpus] == \
        [(0, "0000:00:06.0", "GPU-3a526cd6-9156-bcaa-1944-f7b803556602", "/dev/nvidia0")]


def test_an_8_gpu_board_maps_slurm_indices_and_uuids_through_device_minors(tmp_path):
    gpus = nf.cuda_gpus(nvidia_proc_tree("hgx_8gpu_nvidia", tmp_path))
    assert [g.pci for g in gpus][4:6] == ["0000:9a:00.0", "0000:ab:00.0"]
    assert devices(gpus, {"SLURM_JOB_GPUS": "4,5"}) == ["/dev/nvidia4", "/dev/nvidia5"]
    assert devices(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-0a1b2c3d-0006-4000-8000-000000000006"}) == ["/dev/nvidia6"]


def test_without_procfs_nvidia_smi_is_asked_for_fields_it_has():
    # `minor_number` is refused by nvidia-smi 580 (tests/data/node_facts/h200_proc/README.md); these three are not
    gpus = nf.cuda_gpus(Path("/nonexistent"), "0, 00000000:00:06.0, GPU-3a526cd6-9156-bcaa-1944-f7b803556602\n")
    assert [(g.pci, g.device) for g in gpus] == [("0000:00:06.0", "/dev/nvidia0")]
    assert nf.pci_key("00000000:2A:00.0") == "0000:2a:00.0" == nf.pci_key("0000:2a:00.0")


def test_node_facts_command(tmp_path):
    root = kfd_tree("mi355x_spx_8gpu", tmp_path)
    out = specrepro("node-facts", "--root", str(root), "--gpus", "1,5-7").stdout
    assert "granted by --gpus: 1 -> /dev/dri/renderD136, 5 -> /dev/dri/renderD168, 6 -> /dev/dri/renderD176, " \
           "7 -> /dev/dri/renderD184" in out
    assert "0000:15:00.0" in out  # GPU 1's PCI location (bus 0x15)
    bad = specrepro("node-facts", "--root", str(tmp_path / "nothing"), check=False)
    assert bad.returncode == 2 and "no KFD topology" in bad.stderr
