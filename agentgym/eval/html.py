"""The self-contained HTML report: per-env table and a trajectory viewer, no server, no network.

Everything is rendered here with every piece of model or env text passed through `html.escape`, so a
model that writes `<script>` shows it as text. Trajectories are `<details>` elements: they expand on a
click without any script; the small inline script only filters and expands/collapses all.
"""
from __future__ import annotations

import base64
import html
import json
from typing import Any, Sequence

from agentgym.eval.reports import (TABLE_COLUMNS, comparison_rows, detail_columns, episode_count_note, run_line,
                                   subject, table_rows)

MAX_TEXT = 20_000  # characters of one observation/action shown; the JSON file keeps everything

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}.sub{color:#5b6472;margin-bottom:16px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001}.scroll{overflow-x:auto}
th,td{padding:6px 10px;border-bottom:1px solid #e4e7eb;text-align:right;vertical-align:top}
th{background:#f0f2f5;font-weight:600;min-width:4em}td:first-child,th:first-child{text-align:left}
td:first-child{overflow-wrap:anywhere;min-width:10em}td.num{white-space:nowrap}
.cols>label{font-size:13px;color:#5b6472}.cols>input{margin:0 4px 6px 0}
.cols>input:not(:checked)~.scroll .more{display:none}
tr.total td{font-weight:600;border-top:2px solid #c9ced6}
.controls{margin:8px 0 12px;display:flex;gap:10px;align-items:center}
details.traj{background:#fff;border:1px solid #e4e7eb;border-radius:6px;margin:6px 0}
details.traj>summary{cursor:pointer;padding:7px 10px;list-style-position:inside}
details.traj[open]>summary{border-bottom:1px solid #e4e7eb;background:#f6f8fa}
.ok{color:#137333;font-weight:600}.fail{color:#b3261e;font-weight:600}.muted{color:#6b7380}
.turn{padding:8px 12px;border-bottom:1px dashed #e4e7eb}.turn:last-child{border-bottom:0}
.label{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#6b7380;margin-top:6px}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;padding:6px 8px;background:#f6f8fa;border-radius:4px;
font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;max-height:360px;overflow:auto}
pre.action{background:#eef4ff}.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;
background:#eceff3;margin-left:6px}.badge.bad{background:#fde7e5;color:#b3261e}
table.kv td{padding:2px 8px;text-align:left;border:0}
"""

SCRIPT = """
(function(){
  var envSel=document.getElementById('f-env'), outSel=document.getElementById('f-out');
  function apply(){
    var env=envSel.value, out=outSel.value, shown=0;
    document.querySelectorAll('details.traj').forEach(function(d){
      var ok=(env==='*'||d.dataset.env===env)&&(out==='*'||d.dataset.outcome===out);
      d.style.display=ok?'':'none'; if(ok){shown++;}
    });
    document.getElementById('f-count').textContent=shown+' shown';
  }
  envSel.addEventListener('change',apply); outSel.addEventListener('change',apply);
  document.getElementById('f-open').addEventListener('click',function(){
    document.querySelectorAll('details.traj').forEach(function(d){if(d.style.display!=='none'){d.open=true;}});});
  document.getElementById('f-close').addEventListener('click',function(){
    document.querySelectorAll('details.traj').forEach(function(d){d.open=false;});});
  apply();
})();
"""

e = html.escape


def _clip(text: str) -> str:
    text = text if isinstance(text, str) else str(text)
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT} more characters in results.json)"


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{e(_clip(text))}</pre>'


WRAPPING_COLUMNS = frozenset({"env", "success (95% CI)", "pass@k"})  # cells that may break onto a second line


def _cell_text(text: str, column: str) -> str:
    """Escaped cell text that wraps only where it reads well."""
    text = e(text)
    if column == "env":
        return text.replace("/", "/<wbr>")  # a long id breaks after its namespace first
    if column == "success (95% CI)":
        return text.replace(", ", ",&nbsp;")  # "100.0% [51.0%, 100.0%]" breaks before the interval only
    if column == "pass@k":
        return " / ".join(part.replace(" ", "&nbsp;") for part in text.split(" / "))  # "@2 75.0%" stays whole
    return text


def _cell(text: str, column: str, tag: str = "td", more: bool = False) -> str:
    classes = (["more"] if more else []) + ([] if column in WRAPPING_COLUMNS or tag == "th" else ["num"])
    attr = ' class="' + " ".join(classes) + '"' if classes else ""
    return f"<{tag}{attr}>{e(text) if tag == 'th' else _cell_text(text, column)}</{tag}>"


def render_table(results: dict[str, Any], table_id: str = "metrics", toggle_id: str = "all-columns") -> str:
    """The per-env table; it wraps instead of scrolling sideways, and the columns `detail_columns` names
    stay hidden (CSS only, no script) until "all columns" is ticked."""
    detail = detail_columns(results)
    head = "".join(_cell(c, c, "th", c in detail) for c in TABLE_COLUMNS)
    rows = table_rows(results)
    body = []
    for i, row in enumerate(rows):
        cls = ' class="total"' if len(results["envs"]) > 1 and i == len(rows) - 1 else ""
        body.append(f"<tr{cls}>" + "".join(_cell(v, c, more=c in detail) for v, c in zip(row, TABLE_COLUMNS))
                    + "</tr>")
    attr = f' id="{table_id}"' if table_id else ""
    toggle = (f'<input type="checkbox" id="{toggle_id}"><label for="{toggle_id}"> all columns (adds '
              f'{e(", ".join(c for c in TABLE_COLUMNS if c in detail))})</label>') if detail else ""
    return (f'<div class="cols">{toggle}<div class="scroll"><table{attr}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div></div>')


def _tool_results(info: dict[str, Any]) -> str:
    results = info.get("tool_results") or []
    if not isinstance(results, list) or not results:
        return ""
    items = []
    for r in results:
        if isinstance(r, dict):
            status = "ok" if r.get("ok", True) else "error"
            args = json.dumps(r.get("arguments", {}), ensure_ascii=False, default=str)
            items.append(_pre(f"{r.get('name', '?')}({args}) -> [{status}]\n{r.get('output', '')}"))
        else:
            items.append(_pre(str(r)))
    return '<div class="label">tool results</div>' + "".join(items)


def render_turn(turn: dict[str, Any]) -> str:
    comps = turn.get("reward_components") or {}
    comp_rows = "".join(f"<tr><td>{e(str(k))}</td><td>{float(v):+.3f}</td></tr>" for k, v in comps.items())
    badges = [f'<span class="badge">reward {float(turn.get("reward", 0.0)):+.3f}</span>']
    if not turn.get("valid", True):
        badges.append('<span class="badge bad">invalid action</span>')
    if turn.get("tool_calls"):
        bad = " bad" if turn.get("tool_errors") else ""
        badges.append(f'<span class="badge{bad}">{turn["tool_calls"]} tool call(s), {turn.get("tool_errors", 0)} error(s)</span>')
    if turn.get("finish_reason", "stop") != "stop":
        badges.append(f'<span class="badge bad">{e(str(turn["finish_reason"]))}</span>')
    info = turn.get("info") or {}
    return (f'<div class="turn"><b>Turn {int(turn.get("index", 0)) + 1}</b>{"".join(badges)}'
            f'<div class="label">observation</div>{_pre(turn.get("observation", ""))}'
            f'<div class="label">action</div>{_pre(turn.get("action", ""), "action")}'
            f'{_tool_results(info)}'
            + (f'<div class="label">reward components</div><table class="kv">{comp_rows}</table>' if comp_rows else "")
            + "</div>")


def render_trajectory(record: dict[str, Any]) -> str:
    t = record["trajectory"]
    turns = t.get("turns", [])
    ret = sum(float(k.get("reward", 0.0)) for k in turns)
    outcome = "success" if t.get("success") else "failure"
    mark = '<span class="ok">✓ success</span>' if t.get("success") else '<span class="fail">✗ failure</span>'
    summary = (f'{mark} · {e(record["env"])} · seed {int(record["seed"])} · sample {int(record["sample"])} · '
               f'return {ret:+.3f} · {len(turns)} turn(s) · <span class="muted">{e(str(t.get("end_reason", "")))}'
               f'{" · " + e(str(t.get("task_id"))) if t.get("task_id") else ""}</span>')
    parts = []
    if t.get("system_prompt"):
        parts.append(f'<div class="turn"><div class="label">system prompt</div>{_pre(t["system_prompt"])}</div>')
    parts += [render_turn(k) for k in turns]
    if t.get("final_observation"):
        parts.append(f'<div class="turn"><div class="label">final observation</div>{_pre(t["final_observation"])}</div>')
    if t.get("error"):
        parts.append(f'<div class="turn"><div class="label">error</div>{_pre(t["error"])}</div>')
    return (f'<details class="traj" data-env="{e(record["env"])}" data-outcome="{outcome}">'
            f"<summary>{summary}</summary>{''.join(parts)}</details>")


def _page(title: str, body: str, script: str = "") -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body>{body}"
            + (f"<script>{script}</script>" if script else "") + "</body></html>")


def render_html(results: dict[str, Any]) -> str:
    run = results["run"]
    title = f"agentgym eval: {run['policy']} on {subject(results)}"
    sub = run_line(results) + ("" if run["complete"] else " · INCOMPLETE")
    env_options = "".join(f'<option value="{e(x["name"])}">{e(x["name"])}</option>' for x in results["envs"])
    controls = (f'<div class="controls"><label>env <select id="f-env"><option value="*">all</option>{env_options}'
                '</select></label><label>outcome <select id="f-out"><option value="*">all</option>'
                '<option value="success">success</option><option value="failure">failure</option></select></label>'
                '<button id="f-open" type="button">expand all</button><button id="f-close" type="button">'
                'collapse all</button><span id="f-count" class="muted"></span></div>')
    macro = ""
    if len(results["envs"]) > 1:
        macro = f'<p>Macro success (each env once): <b>{100 * results["summary"]["macro_success_rate"]:.1f}%</b></p>'
    failed = sum(1 for r in results["trajectories"] if r["trajectory"].get("error"))
    if failed:
        macro += (f'<p class="fail">{failed} episode(s) failed with a policy or env error (counted as failures); '
                  "filter by outcome and expand one to read the error.</p>")
    trajs = "".join(render_trajectory(r) for r in results["trajectories"])
    body = (f"<h1>{e(title)}</h1><div class=\"sub\">{e(sub)}</div><h2>Per-env results</h2>{render_table(results)}"
            f'{macro}<h2>Trajectories</h2>{controls}<div id="trajectories">{trajs}</div>')
    return _page(title, body, SCRIPT)


def render_comparison_html(named: Sequence[tuple[str, dict[str, Any]]], links: Sequence[str],
                           images: Sequence[tuple[str, bytes]] = ()) -> str:
    """Success across runs, each run's full table with a link to its own report, and inlined PNGs."""
    header, rows = comparison_rows(named)
    head = "".join(f"<th>{e(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    runs = "".join(f'<h3>{e(name)} — <a href="{e(link)}">trajectories</a></h3>'
                   f'<div class="sub">{e(r["run"]["policy"])} · {len(r["trajectories"])} episodes · '
                   f'wall {r["run"]["wall_s"]:.1f} s</div>{render_table(r, table_id="", toggle_id=f"all-columns-{i}")}'
                   for i, ((name, r), link) in enumerate(zip(named, links)))
    pictures = "".join(f'<h2>{e(title)}</h2><img alt="{e(title)}" style="max-width:100%" '
                       f'src="data:image/png;base64,{base64.b64encode(data).decode()}">' for title, data in images)
    pairs = ""
    if len(named) > 1:
        from agentgym.eval.paired import paired_rows

        p_head, p_rows = paired_rows(named)
        pairs = ('<h2>Paired, task by task</h2><div class="sub">the same env, seed and sample in both runs; '
                 'the p-value is the exact McNemar test on the tasks that changed</div><table id="paired"><thead><tr>'
                 + "".join(f"<th>{e(c)}</th>" for c in p_head) + "</tr></thead><tbody>"
                 + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in p_rows)
                 + "</tbody></table>")
    note = episode_count_note(named)
    note = f'<div class="sub">{e(note)}</div>' if note else ""
    return _page("agentgym comparison", f"<h1>Comparison</h1><h2>Success rate</h2><div class=\"sub\">rate "
                 f"[Wilson 95% interval] (successes/episodes); change: last run vs first</div><table id=\"metrics\">"
                 f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}{pairs}{pictures}<h2>Runs</h2>{runs}")
