"""The package speaks of no particular change: what belongs to a change lives in its own files (patches/<series>/,
conf/arm/<series>/, conf/claims/, conf/experiment/), and src/, analysis/, workflow/ and the Snakefile name none of it.

The words are read from the changes' own files, not listed by hand: each series' name, its arms, its claims' ids,
the experiments that run it, and the identifiers its patches touch (functions in hunk headers, names they add).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PACKAGE = [ROOT / "src", ROOT / "analysis", ROOT / "workflow", ROOT / "Snakefile", ROOT / "profiles"]
SERIES = sorted(p.parent.name for p in (ROOT / "patches").glob("*/series.yaml"))
# Words that are sglang's own API of general use, which a change may also touch.
GENERAL = {"forward", "__init__", "init", "run", "main", "capture", "replay"}


def words_of_change(series: str) -> set:
    folder = ROOT / "patches" / series
    words = {series}
    words |= {p.stem for p in (ROOT / "conf" / "arm" / series).glob("*.yaml")}
    experiments = sorted((ROOT / "conf" / "experiment").glob("*.yaml"))
    # an experiment of the change names its series or arms, or builds on one that does (defaults: - <experiment>)
    for exp in experiments + experiments:
        text = exp.read_text()
        if (f"{series}: patches/{series}" in text or f"/arm/{series}@" in text
                or any(re.search(rf"^\s*-\s*{re.escape(w)}\s*$", text, re.M) for w in words)):
            words.add(exp.stem)
            claims = re.search(r"claims:\s*(claims/\S+)", text)
            if claims:
                words |= {c["id"] for c in yaml.safe_load((ROOT / "conf" / claims.group(1)).read_text())["claims"]}
    for patch in folder.glob("*.patch"):
        text = patch.read_text()
        words |= set(re.findall(r"^@@.*\bdef (\w+)", text, re.M))
        words |= set(re.findall(r"^\+\s*(?:def|class) (\w+)", text, re.M))
        # what a patch adds by name: module constants and attributes (a local variable is anyone's word)
        words |= set(re.findall(r"^\+([A-Z_][A-Z0-9_]{3,})\s*[:=]", text, re.M))
        words |= set(re.findall(r"^\+\s*self\.(\w{4,})\s*[:=]", text, re.M))
    return {w for w in words if w not in GENERAL and len(w) > 3}


def package_text():
    for root in PACKAGE:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()
                                                and p.suffix in (".py", ".smk", ".yaml", "", ".j2", ".rst")
                                                and not any(part == "__pycache__" or part.endswith(".egg-info")
                                                            for part in p.parts)]
        for path in files:
            yield path, path.read_text(errors="replace")


def test_the_report_templates_are_read():
    """The report's words live in templates too (src/specrepro/templates/, workflow/report/): they are searched."""
    searched = {path.relative_to(ROOT).as_posix() for path, _ in package_text()}
    assert {"src/specrepro/templates/report.html.j2", "workflow/report/report_html.rst"} <= searched


def test_there_are_two_changes_and_their_words_are_found():
    assert {"eagle_topk", "sharpen_draft"} <= set(SERIES)
    assert {"sample_draft_proposal", "pr_rs_on", "pr_keeps_greedy_outputs"} <= words_of_change("eagle_topk")
    assert {"DRAFT_PROPOSAL_TEMPERATURE_SCALE", "sharpen_rs_on"} <= words_of_change("sharpen_draft")


@pytest.mark.parametrize("series", SERIES)
def test_the_package_names_nothing_of_a_change(series):
    words = words_of_change(series)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")\b")
    found = [f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(1)}"
             for path, text in package_text() for m in pattern.finditer(text)]
    assert not found, "the package speaks of change " + series + ":\n" + "\n".join(found)
