"""`experiment.launches` as a sequential design (issue #33): the config's checks, the rounds' launches and their
order, the DAG's view of the rounds through checkpoints, and the cost lines of `plan`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specrepro.core.config import ConfigError, compose
from specrepro.core.rounds import Policy, interleaved, max_launches, policy_of, round_launches, round_of


def test_an_int_is_the_fixed_design_and_a_mapping_the_sequential_one():
    assert policy_of(3) is None and max_launches(3) == 3 and max_launches(None) == 1
    p = policy_of({"min": 2, "max": 5})
    assert p == Policy(2, 5) and p.schedule == [2, 3, 4, 5] and max_launches({"min": 2, "max": 5}) == 5
    assert [round_of(p, n) for n in range(1, 6)] == [1, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="beyond the design's max"):
        round_of(p, 6)


def test_hydra_composes_the_mapping_and_config_names_what_is_wrong():
    cfg = compose(["experiment.launches={min:2,max:4,spending:pocock}"])
    assert policy_of(cfg["experiment"]["launches"]) == Policy(2, 4, spending="pocock")
    for value, words in (("{min:1,max:4}", "experiment.launches.min = 1"),
                         ("{min:3,max:2}", "need min <= max"),
                         ("{min:2,max:4,looks:3}", "unknown keys ['looks']"),
                         ("{max:4}", "experiment.launches: missing key 'min'"),
                         ("{min:2,max:4,spending:linear}", "experiment.launches.spending = 'linear'"),
                         ("0", "experiment.launches: must be >= 1"),
                         ("often", "experiment.launches: an int (launches per arm) or {min: N, max: M}")):
        with pytest.raises(ConfigError) as info:
            compose([f"experiment.launches={value}"])
        assert words in str(info.value), (value, str(info.value))


def test_the_budget_refuses_only_a_first_round_over_it():
    # the seed at {min 2, max 5}: round 1 11.31 GPU-hours, at most 28.28 (campaign_cost's model)
    compose(["experiment.launches={min:2,max:5}", "experiment.max_gpu_hours=12"])
    with pytest.raises(ConfigError, match=r"experiment.max_gpu_hours: this campaign's first round needs about 11.3"):
        compose(["experiment.launches={min:2,max:5}", "experiment.max_gpu_hours=11"])
    with pytest.raises(ConfigError, match=r"experiment.max_gpu_hours: this campaign needs about"):
        compose(["experiment.launches=5", "experiment.max_gpu_hours=12"])


def test_rounds_launch_what_the_last_decision_asks_for_interleaved():
    p = Policy(2, 4)
    first = round_launches(p, ["a", "b", "c"], 1)
    assert first == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    assert interleaved(["a", "b", "c"], first) == [("a", 1), ("b", 1), ("c", 1), ("c", 2), ("b", 2), ("a", 2)]
    later = round_launches(p, ["a", "b", "c"], 2, {"a": [3], "c": [3], "b": []})
    assert later == {"a": [3], "c": [3]}
    assert interleaved(["a", "b", "c"], later) == [("a", 3), ("c", 3)]
    # launch 4 runs the arms backward, as launch 2 did
    assert interleaved(["a", "b", "c"], {"a": [4], "c": [4]}) == [("c", 4), ("a", 4)]


class Checkpoint:
    """Snakemake's `checkpoints.<rule>.get(**wildcards)`: the output when it exists, else the exception that makes
    Snakemake run the checkpoint first (here: KeyError)."""

    def __init__(self, layout, decisions):
        self.layout, self.decisions = layout, decisions

    def get(self, round):
        if int(round) not in self.decisions:
            raise KeyError(f"round {round} not decided yet")
        path = Path(self.layout.round_decision(round))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.decisions[int(round)]))
        return type("Job", (), {"output": [str(path)]})()


def test_the_dags_rounds_read_each_decision_through_its_checkpoint(tmp_path):
    from specrepro.core.campaign import Campaign
    from specrepro.workflow_support import Rounds

    cfg = compose(["experiment.launches={min:2,max:4}", f"results_dir={tmp_path}",
                   "~experiment.arms.main_rs_on_nocg", "~experiment.arms.pr_rs_on_nocg",
                   "experiment.skip_claims=[nocg_fixed_without_patch,nocg_patch_changes_nothing]"])
    campaign = Campaign(cfg)
    L = campaign.layout
    decisions = {1: {"done": False, "next": {"round": 2, "arms": {"main_rs_on": [3], "pr_rs_on": [3]}}}}
    checkpoints = type("Checkpoints", (), {})()
    checkpoints.sequential_round = Checkpoint(L, decisions)
    rounds = Rounds(campaign, checkpoints)
    # round 1 needs no decision; its first launch waits for nothing, the rest for the one before
    assert rounds.previous_launch("main_rs_off", 1) == []
    assert rounds.previous_launch("main_rs_off", 2) == [L.launch_record("main_rs_on", 2)]
    # round 2's first launch waits for round 1's decision; its second for its first
    assert rounds.previous_launch("main_rs_on", 3) == [L.round_decision(1)]
    assert rounds.previous_launch("pr_rs_on", 3) == [L.launch_record("main_rs_on", 3)]
    assert rounds.launch_records(2)[-2:] == [L.launch_record("main_rs_on", 3), L.launch_record("pr_rs_on", 3)]
    # the arms' records need the last decision, which round 2's checkpoint has not written yet
    with pytest.raises(KeyError, match="round 2 not decided"):
        rounds.arm_launches("main_rs_off")
    decisions[2] = {"done": True, "next": None}
    assert rounds.last_round() == 2 and rounds.final_decision() == [L.round_decision(2)]
    assert rounds.arm_launches("main_rs_off") == [L.launch_record("main_rs_off", n) for n in (1, 2)]
    assert rounds.arm_launches("pr_rs_on") == [L.launch_record("pr_rs_on", n) for n in (1, 2, 3)]


def test_identical_launch_means_take_the_prior_not_a_zero_width_interval():
    """A deterministic server (greedy decoding of a fixed model) gives launch means equal to the last digit: the
    launch prior stands in for their zero spread -- one launch's worth: identical relaunches are one number, not two
    (issue #39) -- so a -25% change is decided and a +0.2% one is not."""
    from specrepro.analysis import noise

    a = noise.arm_noise([[3.0, 3.0], [3.0, 3.0]], 0.005)
    b = noise.arm_noise([[4.0, 4.0], [4.0, 4.0]], 0.005)
    assert a.components[0].df == math.inf and "2 identical launch means: prior 0.5%" in a.components[0].source
    assert a.components[0].stand_in and a.components[0].variance == pytest.approx((0.005 * 3.0) ** 2)
    five = noise.arm_noise([[3.0]] * 5, 0.005)
    assert five.components[0].variance == a.components[0].variance  # five identical launches say no more than two
    d = noise.relative_change(a, b)
    assert d["relative"] == pytest.approx(-0.25) and d["ci_high"] < -0.2
    small = noise.relative_change(noise.arm_noise([[4.008], [4.008]], 0.005), b)
    assert small["ci_low"] < 0 < small["ci_high"]
    # without a prior the zero spread stays what it was: no estimate, and no number of launches will give one
    bare = noise.arm_noise([[3.0], [3.0]], None)
    assert bare.components[0].variance == 0.0 and bare.untestable
    # a spread that is not exactly zero is the measurement, however small
    assert noise.arm_noise([[3.0], [3.0001]], 0.005).components[0].df == 1.0


def test_rho_is_read_as_given_and_a_numpy_int_is_the_fixed_design():
    """rho = 0 is refused by name (it was silently read as 3: `value or 3.0`); rho 1 is the linear spending."""
    import numpy as np

    assert Policy.parse({"min": 2, "max": 4, "spending": "power", "rho": 1}).rho == 1.0
    assert Policy.parse({"min": 2, "max": 4, "spending": "power"}).rho == 3.0
    with pytest.raises(ValueError, match=r"experiment.launches.rho = 0: the power family's exponent must be > 0"):
        Policy.parse({"min": 2, "max": 4, "spending": "power", "rho": 0})
    assert policy_of(np.int64(3)) is None and max_launches(np.int64(3)) == 3
