"""The report as data: one set of sections, rendered to markdown and to HTML; the claims summary; the PR comment.

Known inputs (the recorded seed campaign's analysis, hand-made sections), known outputs.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT

DATA = ROOT / "tests" / "data" / "report" / "eagle_topk_cpu"


@pytest.fixture(scope="module")
def analysis():
    return json.loads((DATA / "report" / "analysis.json").read_text())


def test_cells_render_alike_in_markdown_and_html():
    from specrepro.util.document import Cell, Section, Table, md_section, to_html, verdict_cell

    table = Table(["claim", "verdict", "output"],
                  [["a | b", verdict_cell("NOT REPRODUCED", " (as predicted for the pin)"),
                    Cell("x`y|z", code=True)],
                   ["**bold** and `code` <script>", verdict_cell("REPRODUCED"), Cell("`", code=True)]])
    md = md_section(Section("T", [table]))
    assert "| a \\| b | **NOT REPRODUCED** (as predicted for the pin) | ``x`y\\|z`` |" in md
    assert "| **bold** and `code` <script> | **REPRODUCED** | `` ` `` |" in md
    html = to_html("t", Section("Verdicts"), [Section("T", [table])], intro=[], lede="", footer=[])
    assert ('<td class="verdict v-not-reproduced"><strong>NOT REPRODUCED</strong>'
            '<span class="note"> (as predicted for the pin)</span></td>') in html
    assert '<td class="verdict v-reproduced"><strong>REPRODUCED</strong></td>' in html
    # inline marks become elements, everything else is escaped; verbatim cells are code, never marks
    assert "<td><strong>bold</strong> and <code>code</code> &lt;script&gt;</td>" in html
    assert "<td><code>x`y|z</code></td>" in html
    assert "<script>" not in html


def test_an_unknown_verdict_reads_as_mixed():
    from specrepro.util.document import verdict_class

    assert verdict_class("VARIES BY LEVEL") == "verdict v-mixed"
    assert verdict_class("INCONCLUSIVE") == "verdict v-inconclusive"


def test_folded_and_html_only_parts():
    from specrepro.util.document import Code, Details, Figure, Section, Table, Text, to_html, to_markdown

    figure = Figure("bench.headline", "iVBORw0KGgo=", "its caption")
    sections = [Section("Open", [Table(["a"], [["1"]], figures=[figure])]),
                Section("Folded", [Text(["inside"]), Details("more", [Code("cmd --flag")], only="html")],
                        collapsed=True, note="3 rows"),
                Section("Web only", [Text(["x"])], only="html")]
    md = to_markdown(sections)
    assert "### Folded\n\ninside\n" in md and "Web only" not in md and "cmd --flag" not in md
    assert "data:image" not in md and "its caption" not in md
    html = to_html("t", Section("Verdicts"), sections, intro=[], lede="", footer=[])
    assert re.search(r'<section id="folded" class="depth-2 collapsed">\s*<details><summary><h2>Folded</h2> '
                     r'<span class="fold-note">3 rows</span></summary>', html)
    assert "<details class=\"inner\"><summary>more</summary>" in html and "<pre><code>cmd --flag</code></pre>" in html
    # the plot beside its table, with its caption
    assert re.search(r'<div class="pair">.*<table>.*</table></div>\s*<div class="figures"><figure>'
                     r"<img alt='bench.headline' src='data:image/png;base64,iVBORw0KGgo='>"
                     r"<figcaption>its caption</figcaption>", html, re.S)
    assert '<a href="#folded">Folded</a> <span class="folded">(folded)</span>' in html


def test_the_claims_summary_gives_effect_interval_and_noise(analysis):
    from specrepro.analysis.report import claim_summary_rows

    rows = {r[1]: r for r in claim_summary_rows(analysis)}
    assert len(rows) == len(analysis["claims"])
    cost = rows["Turning rejection sampling on costs accept length (seed -18%)."]
    assert cost[0].text == "REPRODUCED" and cost[0].cls == "verdict v-reproduced"
    assert cost[2] == "main_rs_on vs main_rs_off: -23.2% (95% CI -24.4% .. -21.9%)"
    assert cost[3] == "each arm (main_rs_on, main_rs_off): 3 repeats on one server + prior 0.5% between launches"
    restores = rows["The patch restores accept length to the rejection-sampling-off level (closes at least 90% of "
                    "the gap)."]
    assert restores[2] == ("pr_rs_on closes 96% of the gap to main_rs_off (95% CI 90% .. 102%; the claim needs more "
                           "than 90%)")
    greedy = rows["The patch commits the target argmax (greedy outputs differ from the baseline's no more than the "
                  "baseline's own)."]
    assert greedy[2] == "48 of 48 greedy outputs identical to main_rs_off's"
    assert greedy[3] == "the baseline against itself (A/A): 0 of 32 differ"
    pinned = rows["With CUDA graphs disabled the patch changes nothing."]
    assert pinned[0].text == "NOT REPRODUCED" and pinned[0].note == " (as predicted for the pin)"
    unjudged = rows["No arm produces invalid output."]
    assert unjudged[0].text == "NOT JUDGED" and "shown, not judged here" in unjudged[2] and unjudged[3] == "-"


def test_the_verdict_rows_show_what_this_platform_can_test(analysis):
    """The first screen's rows for the recorded CPU campaign: the statistic's verdict where the claim is testable,
    NOT TESTABLE HERE with its reason where it is not, the PR's figure beside ours, and the greedy claim comparing
    16 different outputs (the toy model's prompt decides its chain's start)."""
    import pandas as pd

    from specrepro.analysis.report import run_records_of, verdict_rows

    cfg = seed_cfg()
    records = [json.loads(p.read_text()) for p in sorted((DATA / "arms").glob("*/arm.json"))]
    requests = pd.read_parquet(DATA / "tables" / "requests.parquet")
    rows = {r[1]: r for r in verdict_rows(cfg, analysis, records, run_records_of(cfg, records), requests)}
    shown = {text: (r[0].text, r[0].cls) for text, r in rows.items()}
    assert shown["Turning rejection sampling on costs accept length (seed -18%)."] == (
        "REPRODUCED", "verdict v-reproduced predicted")
    cost = rows["Turning rejection sampling on costs accept length (seed -18%)."]
    assert cost[0].note == " — as theory predicts (-22.8%)"
    assert cost[2:] == ["3.778 -> 3.080 tokens/verify step (-18.5%)",
                        "4.000 -> 3.074 tokens/verify step (-23.2%, 95% CI -24.4% .. -21.9%)",
                        "direction: CI below -2%; the PR's -18.5% is outside our CI"]
    nocg = rows["With CUDA graphs disabled the patch changes nothing."]
    assert nocg[0].text == "NOT TESTABLE HERE" and nocg[0].cls == "verdict v-not-testable"
    assert "no arm captured a CUDA graph" in nocg[0].note and "pr_rs_on_nocg = pr_rs_on" in nocg[0].note
    assert "the pin predicts NOT REPRODUCED" in nocg[0].note and nocg[3].endswith("(shown, not judged)")
    restores = rows["The patch restores accept length to the rejection-sampling-off level (closes at least 90% of "
                    "the gap)."]
    assert restores[0].text == "INCONCLUSIVE" and "held back: p 0.021, Holm-adjusted over 6 claims" in restores[0].note
    assert restores[2] == "3.080 -> 3.882 of 3.778 tokens/verify step (115% of the gap)"
    tpot = rows["The patch lowers mean TPOT with rejection sampling on (3.29 -> 3.08 ms)."]
    assert tpot[0].text == "NOT TESTABLE HERE" and tpot[2] == "3.29 -> 3.08 ms (-6.4%)"
    greedy = rows["The patch commits the target argmax (greedy outputs differ from the baseline's no more than the "
                  "baseline's own)."]
    assert greedy[3] == "48 of 48 outputs identical (16 distinct outputs over 16 questions); A/A 0 of 32 differ"


def swept(verdicts):
    """A claim judged at three levels of concurrency, with these verdicts."""
    return [{"id": f"c@concurrency={lv}", "base_id": "c", "text": "It holds.", "levels": {"concurrency": lv},
             "verdict": v, "detail": "", "arm": "a", "against": "b",
             "delta": {"relative": r, "ci_low": r - 0.01, "ci_high": r + 0.01, "half_width": 0.01, "se": 0.005}}
            for lv, v, r in zip((1, 2, 4), verdicts, (0.10, 0.12, 0.02))]


def test_a_swept_claim_is_one_summary_line():
    from specrepro.analysis.report import claim_summary_rows

    (row,) = claim_summary_rows({"claims": swept(["REPRODUCED"] * 3)})
    assert row[0].text == "REPRODUCED" and row[1] == "It holds."
    assert row[2] == "holds at concurrency 1, 2 and 4 (+2.0% .. +12.0% over the levels)"
    (row,) = claim_summary_rows({"claims": swept(["REPRODUCED", "REPRODUCED", "INCONCLUSIVE"])})
    assert row[0].text == "VARIES BY LEVEL" and row[0].cls == "verdict v-mixed"
    assert row[2].startswith("holds at concurrency 1 and 2; INCONCLUSIVE at 4")


def test_markdown_and_html_show_the_same_tables(analysis, tmp_path):
    """One set of sections: every markdown table of the report is a <table> in the HTML, with the same header."""
    from specrepro.analysis.report import render_results

    render_results(DATA, tmp_path, recorded=True)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    lines = md.splitlines()
    md_headers = [line for line, below in zip(lines, lines[1:]) if line.startswith("| ") and below.startswith("| ---")]
    html_headers = re.findall(r"<thead><tr>(.*?)</tr></thead>", html)
    assert len(md_headers) >= 12

    def cells_md(line):
        return [c.strip() for c in line.strip("|").split(" | ")]

    def cells_html(row):
        return [re.sub(r"<[^>]+>", "", c).replace("&#39;", "'") for c in re.findall(r"<th>(.*?)</th>", row)]

    html_cells = [cells_html(h) for h in html_headers]
    for line in md_headers:
        header = [re.sub(r"`", "", c) for c in cells_md(line)]
        assert header in html_cells, header
    # the HTML has more: the summary, the per-question outputs and the commands, which markdown leaves out
    assert len(html_headers) > len(md_headers)


def seed_cfg():
    from specrepro.core.config import check_resolved
    import yaml

    raw = yaml.safe_load((DATA / "resolved_config.yaml").read_text())
    raw.update(project_root=str(ROOT), results_dir=str(DATA))
    return check_resolved(raw)


# A path of this host in text a reviewer pastes on GitHub: a slash after a space, a quote, a bracket or a backtick.
ABSOLUTE_PATH = re.compile(r"(?:^|[\s(`'\"\[])(/[A-Za-z0-9_.-]+)+")


def test_the_pr_comment_is_short_pasteable_and_renders_as_github_markdown(analysis):
    """Rendered through markdown-it-py with GitHub's table extension (CommonMark + GFM tables, as GitHub renders
    a comment): the provenance table and the claims table are tables, one body row per claim, and no path of this
    host is left in it."""
    import pandas as pd
    from markdown_it import MarkdownIt

    from specrepro.analysis.report import pr_comment

    cfg = seed_cfg()
    records = [json.loads(p.read_text()) for p in sorted((DATA / "arms").glob("*/arm.json"))]
    requests = pd.read_parquet(DATA / "tables" / "requests.parquet")
    text = pr_comment(cfg, analysis, records, requests)
    lines = text.splitlines()
    assert lines[0] == "### specrepro: eagle_topk_cpu"
    assert len(lines) <= 40, len(lines)
    assert not ABSOLUTE_PATH.search(text), ABSOLUTE_PATH.search(text)
    assert str(ROOT) not in text and str(DATA) not in text
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    tables = re.findall(r"<table>(.*?)</table>", html, re.S)
    assert len(tables) == 2, html[:2000]
    provenance, claims = tables
    # the provenance: this campaign beside the PR's setup, and the hashes of what ran
    assert "<th>What ran</th>" in provenance and "<td>this campaign</td>" in provenance
    assert "<td>the PR</td>" in provenance
    # the hash of the configuration that ran, as the report stage recorded it
    assert f"config hash <code>{analysis['provenance']['config_hash']}</code>" in html
    # the claims: a row per claim, every verdict bold, the PR's figure beside ours in units
    body = re.findall(r"<tr>(.*?)</tr>", claims.split("<tbody>")[1], re.S)
    assert len(body) == len(analysis["claims"])
    assert all(row.startswith("\n<td><strong>") for row in body), body[0]
    cost = next(row for row in body if "Turning rejection sampling on costs accept length" in row)
    assert "3.778 -&gt; 3.080 tokens/verify step (-18.5%)" in cost
    assert "direction: CI below -2%; the PR's -18.5% is outside our CI" in cost
    tpot = next(row for row in body if "lowers mean TPOT" in row)
    assert "<strong>NOT TESTABLE HERE</strong>" in tpot and "3.29 -&gt; 3.08 ms (-6.4%)" in tpot
    # no pipe table survived as text, every link to the report is relative to the results folder
    assert not re.search(r"<p>\|", html)
    assert "<code>report/report.html</code> in the results folder" in html
    assert "specrepro run experiment=eagle_topk_cpu" in text
    cfg["tracking"]["results_url"] = "https://ci.example/artifacts/123/eagle_topk_cpu/"
    assert "https://ci.example/artifacts/123/eagle_topk_cpu/report/report.html" in pr_comment(cfg, analysis, records)


def test_snakemake_captions_come_from_the_report():
    """report/plots.rst is the Jinja template Snakemake's report renders per plot (its `name` wildcard)."""
    from jinja2 import Environment

    from specrepro.util.document import Figure
    from specrepro.analysis.report import caption_template

    text = caption_template([Figure("gsm8k.headline", "", "gsm8k: each arm's mean of `x` (the table's numbers)."),
                             Figure("theory", "", 'Quotes "and" {braces}.')])

    class Wildcards:
        def __init__(self, name):
            self.name = name

    class Snakemake:
        def __init__(self, name):
            self.wildcards = Wildcards(name)

    env = Environment()
    assert env.from_string(text).render(snakemake=Snakemake("gsm8k.headline")).strip() == \
        "gsm8k: each arm's mean of x (the table's numbers)."
    assert env.from_string(text).render(snakemake=Snakemake("theory")).strip() == 'Quotes "and" {braces}.'
    assert env.from_string(text).render(snakemake=Snakemake("other")).strip() == "other"


def test_the_per_question_listing_keeps_every_question_that_differs():
    """Thousands of questions: the listing shows the ones that differ, then the first of the others."""
    import pandas as pd

    from specrepro.analysis.report import PER_QUESTION_ROWS, per_question_outputs

    questions = PER_QUESTION_ROWS + 100
    requests = pd.DataFrame([{"arm": arm, "benchmark": "gsm8k", "repeat": 1, "request": q, "output": f"answer {q}"}
                             for arm in ("base", "new") for q in range(questions)])
    agreement = {"benchmark": "gsm8k", "arm": "new", "against": "base",
                 "differing": [{"request": questions - 1, "repeat": 1, "first_difference_at": 7}]}
    (details,) = per_question_outputs({"output_agreement": [agreement]}, requests)
    (table,) = details.blocks
    assert details.summary == (f"gsm8k: every question's greedy output, arm by arm ({PER_QUESTION_ROWS} of "
                               f"{questions} questions: every one that differs, then the first of the others)")
    assert table.header == ["question", "base's output (first repeat)", "new"]
    assert len(table.rows) == PER_QUESTION_ROWS
    last = table.rows[-1]
    assert last[0] == str(questions - 1) and last[2].text == "differs in 1 repeat(s)" and last[2].cls == "bad"
    assert table.rows[0][2].text == "same" and table.rows[0][1].code
