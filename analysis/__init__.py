"""The analysis stage, installed as `specrepro.analysis`: pure functions over tidy tables.

`stats` (small statistics tested with known numbers), `analyze` (noise floors,
deltas, GSM8K tests, claim verdicts), `claims` (the claims file and its
schema), `report` and `plots` (markdown and HTML rendering), `sequential` (rounds of launches until every
claim is decided: group-sequential boundaries, Holm, the decision on a runs table) and `sequential_plan` (its
simulation and planning: GPU-hours of a design beside fixed designs).
"""
