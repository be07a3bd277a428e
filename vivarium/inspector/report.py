"""A run as one static HTML file: its summary, health, figures and decisions, readable offline.

``vvm report TRACE --out run.html`` (``Run.report``) writes a page a researcher can attach to a
paper or publish as it is: no server, no network, nothing outside the file (figures are PNG
inlined as data, the script is inline). It holds:

- the run's record (id, world, policies, seed, steps, status) and its config;
- the summary (decisions by action, successes, fallbacks, the final state hash) and the health
  (what makes a run not a clean result, ``vivarium.trace.health``);
- the behaviour timeline, and the LLM token use when the run called a model;
- a decision inspector: each decision's pane as the notebook inspector draws it (the prompt as
  a chat, the raw reply, the parse, the outcome, the costs; ``vivarium.inspector.render``, every
  value escaped), chosen by step and agent or stepped through with the arrows.

A run of more decisions than ``max_decisions`` keeps its first ones in the inspector and says
so (the page stays a page); the summary and figures cover the whole run.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError

__all__ = ["write_report"]

MAX_DECISIONS = 2000


def _png(fig: Any) -> str:
    from vivarium.analysis.style import paper_style

    buffer = io.BytesIO()
    with paper_style():
        fig.savefig(buffer, format="png", dpi=150, metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode()


def _figures(run: Any) -> list[tuple[str, str]]:
    from vivarium.analysis import plots

    figures = [("behaviour over time", plots.behaviour_timeline(run, width="double"))]
    if len(run.llm_calls):
        figures.append(("LLM tokens", plots.token_use(run)))
    out = [(title, _png(fig)) for title, fig in figures]
    import matplotlib.pyplot as plt

    for _, fig in figures:
        plt.close(fig)
    return out


_MARK = '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<meta name="generator" content="vivarium-report">'


def _is_report(path: Path) -> bool:
    """Whether ``path`` is a page this module wrote (its first lines, as written): replaceable."""
    try:
        with path.open("rb") as f:
            return f.read(len(_MARK.encode())) == _MARK.encode()
    except OSError:
        return False


def write_report(
    run: Any, out: str | os.PathLike[str], *, max_decisions: int = MAX_DECISIONS
) -> Path:
    """Write ``run``'s report to ``out`` (see the module); the path written.

    Raises:
        TraceError: ``out`` is a folder or exists and is no report (never overwritten), or it
            cannot be written (one line).
    """
    from vivarium.inspector.decisions import RunDecisions
    from vivarium.inspector.render import decision_html
    from vivarium.trace.summary import run_summary

    target = Path(out)
    if target.is_dir():
        raise TraceError(f"report: {target} is a folder; give the page's file name")
    if target.exists() and not _is_report(target):
        raise TraceError(f"report: {target} exists and is not a Vivarium report; give another name")
    meta = run.metadata
    decisions = RunDecisions.load(run, str(meta.get("name")))
    shown = min(len(decisions), max_decisions)
    panes = []
    for pos in range(shown):
        agent, step = decisions.key(pos)
        row = decisions.row(pos)
        body = decision_html(
            row,
            decisions.calls(agent, step),
            decisions.transitions(agent, step),
            pivot=decisions.pivots.get((agent, step)),
        )
        panes.append({"step": step, "agent": agent, "action": str(row.get("action")), "html": body})
    summary = run_summary(run.path)
    by_action = ", ".join(f"{a}={c}" for a, c in summary.by_action) or "none"
    health = run.health
    head = [
        ("run", meta["run_id"]),
        ("world", meta.get("world")),
        ("policy", meta.get("policy")),
        ("seed", meta.get("seed")),
        ("steps", f"{meta.get('steps_done')} of {meta.get('steps')}"),
        ("status", meta.get("status")),
        ("decisions", f"{summary.decisions:,} ({by_action}); succeeded {summary.succeeded:,}"),
        ("fallbacks", summary.fallbacks),
        ("final state hash", summary.final_state_hash),
        ("health", "; ".join([str(health), *health.notes])),
    ]
    page = _PAGE.format(
        title=html.escape(f"Vivarium run {meta['run_id']}"),
        head="".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in head
        ),
        config=html.escape(json.dumps(meta.get("config"), indent=2, ensure_ascii=False)),
        figures="".join(
            f"<figure><img alt='{html.escape(t)}' src='data:image/png;base64,{png}'>"
            f"<figcaption>{html.escape(t)}</figcaption></figure>"
            for t, png in _figures(run)
        ),
        capped=(
            ""
            if shown == len(decisions)
            else f"<p class='note'>The inspector holds the first {shown:,} of {len(decisions):,} "
            "decisions; the summary and figures cover them all.</p>"
        ),
        # JSON inside a script element: no "<", ">" or "&" as such (a "</script>" or "<!--" in
        # a prompt would end or bend the element), each written as JSON's \\u escape instead.
        data=json.dumps(panes, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026"),
    )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"report: cannot write {target}: {exc.strerror or exc}") from None
    return target


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="generator" content="vivarium-report">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
th {{ text-align: left; padding-right: 1em; vertical-align: top; }}
figure {{ margin: 1em 0; }} img {{ max-width: 100%; }}
.note {{ color: #a33; }} pre.config {{ background: #f6f6f6; padding: 8px; overflow: auto; }}
#controls {{ position: sticky; top: 0; background: white; padding: 6px 0; }}
</style></head>
<body>
<h1>{title}</h1>
<table id="summary">{head}</table>
<details><summary>config</summary><pre class="config">{config}</pre></details>
<h2>Figures</h2>
{figures}
<h2>Decisions</h2>
{capped}
<div id="controls">
  <button id="prev" type="button">&larr;</button>
  step <select id="step"></select> agent <select id="agent"></select>
  <button id="next" type="button">&rarr;</button>
  <span id="where"></span>
</div>
<div id="pane"></div>
<script type="application/json" id="decisions">{data}</script>
<script>
(function () {{
  var panes = JSON.parse(document.getElementById("decisions").textContent);
  var stepBox = document.getElementById("step"), agentBox = document.getElementById("agent");
  var pane = document.getElementById("pane"), where = document.getElementById("where");
  var current = 0;
  function options(box, values) {{
    box.innerHTML = "";
    values.forEach(function (v) {{
      var o = document.createElement("option"); o.value = v; o.textContent = v; box.appendChild(o);
    }});
  }}
  function unique(values) {{ return values.filter(function (v, i) {{ return values.indexOf(v) === i; }}); }}
  function show(i) {{
    if (!panes.length) {{ pane.textContent = "This run made no decision."; return; }}
    current = Math.max(0, Math.min(panes.length - 1, i));
    var d = panes[current];
    options(stepBox, unique(panes.map(function (p) {{ return String(p.step); }})));
    stepBox.value = String(d.step);
    options(agentBox, unique(panes.filter(function (p) {{ return p.step === d.step; }})
      .map(function (p) {{ return p.agent; }})));
    agentBox.value = d.agent;
    pane.innerHTML = d.html;  // rendered and escaped by Vivarium (vivarium.inspector.render)
    where.textContent = "decision " + (current + 1) + " of " + panes.length;
  }}
  function find(step, agent) {{
    for (var i = 0; i < panes.length; i++) {{
      if (String(panes[i].step) === step && (agent === null || panes[i].agent === agent)) return i;
    }}
    return current;
  }}
  stepBox.addEventListener("change", function () {{ show(find(stepBox.value, null)); }});
  agentBox.addEventListener("change", function () {{ show(find(stepBox.value, agentBox.value)); }});
  document.getElementById("prev").addEventListener("click", function () {{ show(current - 1); }});
  document.getElementById("next").addEventListener("click", function () {{ show(current + 1); }});
  show(0);
}})();
</script>
</body></html>
"""
