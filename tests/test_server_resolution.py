"""sglang's own resolution of every arm's arguments before GPU time: `plan` prints it, and refuses rewritten fields.

The resolution is sglang 0.5.20's (its argument parser and ServerArgs.resolve_once, reading the toy model's
config.json), run with this host's sglang env; nothing here restates what sglang decides.
"""

from __future__ import annotations

import pytest

from conftest import specrepro

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def toy(cpu_campaign, tmp_path_factory):
    # cpu_campaign: the sglang env and the pinned release are on this host (what plan resolves with)
    out = tmp_path_factory.mktemp("toy")
    specrepro("toy-model", str(out))
    return out


def plan(toy, *overrides, check=True):
    return specrepro("plan", "experiment=eagle_topk_cpu", f"model.toy.dir={toy}", *overrides, check=check)


def resolution_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith(("resolved ", "REFUSED ", "unresolved "))]


def test_plan_prints_sglangs_resolution_of_every_arm(toy):
    out = plan(toy).stdout
    lines = resolution_lines(out)
    assert len(lines) == 5 and all(line.startswith("resolved ") for line in lines), lines
    rs_on = next(line for line in lines if line.startswith("resolved main_rs_on:"))
    assert "every asked field kept" in rs_on and "attention_backend=intel_amx" in rs_on
    assert "speculative_use_rejection_sampling=True" in rs_on and "device=cpu" in rs_on
    assert "as the launch will ({'has_amx': True})" in out


def test_an_arm_whose_asked_fields_sglang_would_rewrite_is_refused(toy):
    # Without the cpu platform's launcher fact, sglang 0.5.20 swaps intel_amx for torch_native on a CPU
    # without AMX (arg_groups/overrides.py) -- the backend that refuses EAGLE.  plan says so and stops.
    proc = plan(toy, "platform.sglang_platform_facts.has_amx=false", check=False)
    assert proc.returncode == 2
    refused = [line for line in resolution_lines(proc.stdout) if line.startswith("REFUSED ")]
    assert len(refused) == 5
    assert "attention_backend: asked 'intel_amx', sglang resolves 'torch_native'" in refused[0]
    assert "fix their arguments before spending GPU time" in proc.stderr


def test_off_the_node_sglang_is_told_what_the_node_is(toy):
    # a ROCm arm planned on this CPU host: sglang resolves it as on a HIP device
    out = specrepro("plan", "platform=mi355x", "model=toy_lookup", f"model.toy.dir={toy}").stdout
    assert "off the node, told {'is_hip': True}" in out
    lines = resolution_lines(out)
    assert lines and all(line.startswith("resolved ") for line in lines), lines
    assert "attention_backend=aiter" in lines[0] and "device=cuda" in lines[0]
