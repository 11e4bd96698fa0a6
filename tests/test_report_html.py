"""The seed campaign's HTML report read as a reader reads it: in headless Chromium, from the campaign's own files.

tests/data/report/eagle_topk_cpu is a finished `make campaign` (its tables, recorded analysis, arm and run
records, patch_check verdict); `specrepro report --recorded` renders it without servers or the toy model.  The
page is opened in a fresh Chromium profile whose resolver fails every name, over the DevTools protocol, which
records every request the page makes.  `reader_problems` is what a reader would object to; the tests below it
break a copy of the page in each way and see the objection raised, so a check that cannot fail would show.

With SPECREPRO_SCREENSHOTS=DIR the first screen and the folded sections opened are saved there as PNGs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from chromium import OFFLINE, Page
from conftest import ROOT

DATA = ROOT / "tests" / "data" / "report" / "eagle_topk_cpu"
WIDTH, HEIGHT = 1400, 900
# What each verdict's cell must look like: its class and its background colour (rgb, as the browser computes it).
VERDICT_LOOK = {"REPRODUCED": ("v-reproduced", "rgb(210, 244, 220)"),
                "NOT REPRODUCED": ("v-not-reproduced", "rgb(255, 217, 212)"),
                "INCONCLUSIVE": ("v-inconclusive", "rgb(255, 241, 184)"),
                "NOT JUDGED": ("v-not-judged", "rgb(231, 234, 238)"),
                "NOT TESTABLE HERE": ("v-not-testable", "rgb(231, 234, 238)")}
# What the seed CPU campaign cannot test, and why (known from the platform, not from the code that decides it): the
# CPU's latency and throughput (conf/platform/cpu.yaml), the toy model's invalid rate (conf/model/toy_lookup.yaml),
# and the no-graph arms, which ran their graph twins' commands (no CUDA graph on a CPU).  Every other claim shows the
# verdict analysis.json records.
NOT_TESTABLE_HERE = {"pr_improves_tpot": "mean_tpot_ms", "pr_improves_throughput": "output_throughput",
                     "rs_costs_throughput": "output_throughput", "no_invalid_output": "invalid_rate",
                     "nocg_fixed_without_patch": "no arm captured a CUDA graph",
                     "nocg_patch_changes_nothing": "no arm captured a CUDA graph"}


def shown_verdict(claim: Dict[str, Any]) -> str:
    return "NOT TESTABLE HERE" if claim["id"] in NOT_TESTABLE_HERE else claim["verdict"]

# Everything the page shows a reader, measured in the browser (one script, run through DevTools).
READ_PAGE = """(() => {
  const rect = e => { const r = e.getBoundingClientRect(); return {top: r.top, left: r.left, right: r.right,
                                                                   bottom: r.bottom, width: r.width}; };
  const main = document.querySelector('main');
  const first = main ? main.firstElementChild : null;
  const summaryTable = document.querySelector('#verdicts > .single table');
  const summaryRows = summaryTable ? [...summaryTable.querySelectorAll('tbody tr')].map(tr => {
    const cells = [...tr.children];
    return {verdict: cells[0].innerText.trim(), cls: cells[0].className, claim: cells[1].innerText.trim(),
            pr: cells[2].innerText.trim(), here: cells[3].innerText.trim(), needs: cells[4].innerText.trim(),
            background: getComputedStyle(cells[0]).backgroundColor, bottom: rect(tr).bottom};
  }) : [];
  const provenance = document.querySelector('#verdicts .provenance');
  const verdictCells = [...document.querySelectorAll('td.verdict')].map(td => ({
    text: td.querySelector('strong') ? td.querySelector('strong').innerText.trim() : td.innerText.trim(),
    cls: td.className, background: getComputedStyle(td).backgroundColor}));
  const images = [...document.images].map(img => ({alt: img.alt, complete: img.complete,
    width: img.naturalWidth, height: img.naturalHeight, inPair: !!img.closest('.pair'),
    nextToTable: (() => { const pair = img.closest('.pair'); if (!pair) return null;
                          const t = pair.querySelector('table'); if (!t) return null;
                          const a = rect(t), b = rect(img);
                          return b.left >= a.right - 1 || b.top >= a.bottom - 1; })()}));
  const folded = [...document.querySelectorAll('section.collapsed')].map(s => ({
    id: s.id, title: s.querySelector('summary :is(h2, h3, h4)').innerText.trim(),
    open: s.querySelector('details').open}));
  return {first: first ? first.id : null, firstTop: first ? rect(first).top : null,
          summaryTableBottom: summaryRows.length ? summaryRows[0].bottom : null,
          provenance: provenance ? {text: provenance.innerText, top: rect(provenance).top,
                                    bottom: rect(provenance).bottom, height: rect(provenance).bottom - rect(provenance).top}
                                 : null,
          summaryRows, verdictCells, images, folded,
          tables: document.querySelectorAll('table').length,
          pipeRows: (document.body.innerText.match(/^\\|.*\\|$/gm) || []).length,
          pre: [...document.querySelectorAll('pre')].map(p => p.innerText.slice(0, 80)),
          csp: (document.querySelector('meta[http-equiv="Content-Security-Policy"]') || {}).content || null,
          headings: [...document.querySelectorAll('h2')].map(h => h.innerText.trim()),
          toc: [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'))};
})()"""


def render(out: Path) -> Path:
    """`specrepro report --recorded` of the recorded seed campaign into `out`."""
    proc = subprocess.run([sys.executable, "-m", "specrepro.cli", "report", str(DATA), "--out", str(out), "--recorded"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "report.html"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Dict[str, Any]:
    import yaml

    out = tmp_path_factory.mktemp("seed_report")
    html = render(out)
    analysis = json.loads((DATA / "report" / "analysis.json").read_text())
    # the PR's published figures, as the experiment gives them (a claim with both shows them beside ours)
    analysis["_reference"] = yaml.safe_load((DATA / "resolved_config.yaml").read_text())["experiment"]["reference"]
    return {"html": html, "out": out, "analysis": analysis}


def off_file_requests(page: Page, html: Path) -> List[str]:
    """Requests the page asked for beyond the file: anything but the page itself and its data: images."""
    return [u for u in page.requests if not u.startswith("data:") and u != html.as_uri()]


def reader_problems(seen: Dict[str, Any], requests: List[str], analysis: Dict[str, Any], plots: int) -> List[str]:
    """What a reader of the report would object to, given what the browser measured."""
    problems = []
    if seen["first"] != "verdicts" or (seen["firstTop"] or 0) > 60:
        problems.append(f"the claims summary is not the first thing on the page (first: {seen['first']})")
    if seen["summaryTableBottom"] is None or seen["summaryTableBottom"] > HEIGHT:
        problems.append("the first claim's verdict is not on the first screen")
    if any(r["bottom"] > HEIGHT for r in seen["summaryRows"]):
        problems.append("not every verdict is on the first screen")
    prov = seen["provenance"]
    if not prov or not prov["height"] or prov["bottom"] > HEIGHT or (
            seen["summaryRows"] and prov["top"] > seen["summaryRows"][0]["bottom"]):
        problems.append("no provenance block on the first screen above the verdicts")
    elif not all(w in prov["text"] for w in ("this campaign", "the PR", "sglang", "sha256", "config hash",
                                             "speculative", "hardware")):
        problems.append(f"the provenance block misses what ran: {prov['text'][:300]!r}")
    claims = analysis["claims"]
    if [r["claim"] for r in seen["summaryRows"]] != [c["text"] for c in claims]:
        problems.append("the summary does not give one line per claim, in the claims' order")
    for row, claim in zip(seen["summaryRows"], claims):
        verdict = shown_verdict(claim)
        cls, colour = VERDICT_LOOK[verdict]
        if not row["verdict"].startswith(verdict) or cls not in row["cls"].split():
            problems.append(f"summary: {claim['id']} shows {row['verdict']!r} ({row['cls']}), not {verdict}")
        if claim["id"] in NOT_TESTABLE_HERE and NOT_TESTABLE_HERE[claim["id"]] not in row["verdict"]:
            problems.append(f"summary: {claim['id']} does not say why it is not testable here")
        if row["background"] != colour and "surprise" not in row["cls"].split() and "predicted" not in row["cls"]:
            problems.append(f"summary: {claim['id']}'s verdict is not coloured ({row['background']})")
        if verdict == "INCONCLUSIVE" and "held back" not in row["verdict"]:
            problems.append(f"summary: {claim['id']} does not say what held it back")
        if ("as theory predicts" in row["verdict"] or "as the pin predicts" in row["verdict"]) != (
                "predicted" in row["cls"].split()):
            problems.append(f"summary: {claim['id']}'s prediction is not told apart ({row['cls']})")
        if ("SURPRISE" in row["verdict"]) != ("surprise" in row["cls"].split()):
            problems.append(f"summary: {claim['id']}'s surprise is not marked")
        if claim.get("delta") and "95% CI" not in row["here"]:
            problems.append(f"summary: {claim['id']} shows no interval")
        ref = (analysis.get("_reference") or {})
        if claim.get("metric") and all((ref.get(a) or {}).get(claim["benchmark"], {}).get(claim["metric"]) is not None
                                       for a in (claim.get("arm"), claim.get("against"))) and "->" not in row["pr"]:
            problems.append(f"summary: {claim['id']} does not show the PR's figure")
        if claim.get("delta") and "->" not in row["here"]:
            problems.append(f"summary: {claim['id']} does not show our figures in units")
        if not row["needs"]:
            problems.append(f"summary: {claim['id']} does not say what REPRODUCED needs")
    if not seen["verdictCells"]:
        problems.append("no verdict cell carries a class")
    for cell in seen["verdictCells"]:
        look = VERDICT_LOOK.get(cell["text"])
        marked = {"predicted", "surprise"} & set(cell["cls"].split())
        if look is None or look[0] not in cell["cls"].split() or (cell["background"] != look[1] and not marked):
            problems.append(f"verdict cell {cell['text']!r} has class {cell['cls']!r}, colour {cell['background']}")
    if seen["pipeRows"] or any("| ---" in p for p in seen["pre"]):
        problems.append("a table is drawn with pipes, not a <table>")
    if seen["tables"] < 10:
        problems.append(f"only {seen['tables']} <table> elements")
    if len(seen["images"]) != plots:
        problems.append(f"{len(seen['images'])} images on the page, {plots} plots written")
    for img in seen["images"]:
        if not img["complete"] or img["width"] == 0:
            problems.append(f"plot {img['alt']} does not load")
        if img["inPair"] and not img["nextToTable"]:
            problems.append(f"plot {img['alt']} is not beside or under its table")
    if requests:
        problems.append(f"requests left the file: {requests}")
    if not seen["csp"] or "default-src 'none'" not in seen["csp"]:
        problems.append("no Content-Security-Policy keeps the page off the network")
    return problems


def read(html: Path, profile: Path, screenshot: Path = None) -> tuple:
    with Page(profile, WIDTH, HEIGHT, resolver_rules=OFFLINE) as page:
        page.open(html.as_uri())
        seen = page.eval(READ_PAGE)
        requests = off_file_requests(page, html)
        if screenshot is not None:
            page.screenshot(screenshot)
        return seen, requests


def test_the_seed_report_reads_verdicts_first_in_chromium(rendered, tmp_path):
    shots = Path(os.environ.get("SPECREPRO_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    seen, requests = read(rendered["html"], tmp_path / "profile", shots / "report_first_screen.png")
    plots = len(list((rendered["out"] / "plots").glob("*.png")))
    assert plots >= 6
    assert reader_problems(seen, requests, rendered["analysis"], plots) == []
    # every claim's verdict, once in the summary and once in the claims table
    verdicts = [shown_verdict(c) for c in rendered["analysis"]["claims"]]
    assert sorted(c["text"] for c in seen["verdictCells"]) == sorted(verdicts * 2)
    # the long parts are folded, a click away, and listed in the table of contents
    folded = {f["title"]: f["open"] for f in seen["folded"]}
    for title in ("Noise floors", "Acceptance per verify step", "Commands that ran"):
        assert folded.get(title) is False, (title, folded)
    assert any(t.startswith("patch_check: series") for t in folded)
    assert all(f"#{f['id']}" in seen["toc"] for f in seen["folded"])
    for heading in ("GSM8K-style benchmarks", "Accept length against theory", "Claims",
                    "Greedy outputs against the baseline"):
        assert heading in seen["headings"]


def test_the_folded_parts_hold_what_they_say(rendered, tmp_path):
    """Opened, the folded sections show the noise floors, every question's greedy output, the acceptance
    histograms beside their table, and the commands that ran."""
    shots = Path(os.environ.get("SPECREPRO_SCREENSHOTS") or tmp_path)
    with Page(tmp_path / "profile", WIDTH, HEIGHT, resolver_rules=OFFLINE) as page:
        page.open(rendered["html"].as_uri())
        page.eval("document.querySelectorAll('details').forEach(d => d.open = true)")
        text = page.eval("document.body.innerText")
        top = page.eval("document.getElementById('greedy-outputs-against-the-baseline').getBoundingClientRect().top"
                        " + window.scrollY")
        page.screenshot(shots / "report_greedy_outputs.png", clip={"x": 0, "y": top, "width": WIDTH, "height": 900})
        assert off_file_requests(page, rendered["html"]) == []
    assert "gsm8k: every question's greedy output, arm by arm (16 questions)" in text
    assert "specrepro_cpu_launch" in text and "specrepro.cli gsm8k" in text  # the server and client commands
    assert "within a launch (CV)" in text  # the noise floors
    assert "applies_without_fuzz" in text  # the patch check's table


def broken_copy(html: Path, tmp_path: Path, *edits) -> Path:
    text = html.read_text()
    for old, new in edits:
        assert re.search(old, text), old
        text = re.sub(old, new, text, count=1)
    out = tmp_path / "broken.html"
    out.write_text(text)
    return out


@pytest.mark.parametrize("edits, objection", [
    # an image fetched from elsewhere (and no CSP to stop it): the request is seen
    ([(r"<meta http-equiv=\"Content-Security-Policy\"[^>]*>", ""),
      (r"<main>", "<main><img alt='beacon' src='http://example.invalid/beacon.png'>")], "requests left the file"),
    # the verdict colours gone
    ([(r"\.verdict\.v-reproduced \{[^}]*\}", "")], "has class"),
    # a plot that does not decode
    ([(r"src='data:image/png;base64,", "src='data:image/png;base64,AAAA")], "does not load"),
    # the summary moved below the rest
    ([(r"<main>\n", "<main>\n<section id='preface'><p>" + "words " * 400 + "</p></section>\n")],
     "not the first thing on the page"),
    # a table drawn with pipes
    ([(r"<table>", "<pre>| arm | accept len |\n| --- | --- |</pre><table>")], "drawn with pipes"),
], ids=["network", "colour", "image", "order", "pipes"])
def test_the_reader_check_objects_to_a_broken_page(rendered, tmp_path, edits, objection):
    broken = broken_copy(rendered["html"], tmp_path, *edits)
    seen, requests = read(broken, tmp_path / "profile")
    plots = len(list((rendered["out"] / "plots").glob("*.png")))
    problems = reader_problems(seen, requests, rendered["analysis"], plots)
    assert any(objection in p for p in problems), problems


# What the first screen must hold since #41, each broken in a copy; one browser reads them all (a browser start costs
# seconds of the fast layer).
FIRST_SCREEN_BREAKAGES = [
    # the provenance block gone
    ([(r'<div class="provenance">', '<div class="provenance" hidden>')], "no provenance block"),
    # a predicted verdict painted as any other
    ([(r'class="verdict v-reproduced predicted"', 'class="verdict v-reproduced"')], "prediction is not told apart"),
    # a verdict pushed below the first screen
    ([(r"<h2>Verdicts", "<div style='height: 600px'></div><h2>Verdicts")], "not every verdict is on the first"),
]


def test_the_reader_check_objects_to_a_broken_first_screen(rendered, tmp_path):
    plots = len(list((rendered["out"] / "plots").glob("*.png")))
    with Page(tmp_path / "profile", WIDTH, HEIGHT, resolver_rules=OFFLINE) as page:
        for i, (edits, objection) in enumerate(FIRST_SCREEN_BREAKAGES):
            folder = tmp_path / str(i)
            folder.mkdir()
            broken = broken_copy(rendered["html"], folder, *edits)
            page.open(broken.as_uri())
            problems = reader_problems(page.eval(READ_PAGE), off_file_requests(page, broken), rendered["analysis"],
                                       plots)
            assert any(objection in p for p in problems), (objection, problems)


def test_the_csp_alone_keeps_the_page_off_the_network(rendered, tmp_path):
    """With its CSP, even an external image written into the page is refused by the browser before it is sent."""
    broken = broken_copy(rendered["html"], tmp_path,
                         (r"<main>", "<main><img alt='beacon' src='http://example.invalid/beacon.png'>"))
    with Page(tmp_path / "profile", WIDTH, HEIGHT, resolver_rules=OFFLINE) as page:
        page.open(broken.as_uri())
        assert off_file_requests(page, broken) == ["http://example.invalid/beacon.png"]
        assert page.blocked == {"http://example.invalid/beacon.png": "csp"}
