//! The frame every HTML page shares: one file, inline CSS and script, no fetch.

use crate::svg::escape;

/// Forbids every fetch: the page must work from disk with nothing else.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

pub const CSS: &str = r#"
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1320px;padding:16px 24px;color:#1b1b1b;background:#fafafa}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:1.02em;margin:1em 0 .3em}
table{border-collapse:collapse;font-size:.88em;background:#fff}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.figures{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
@media (min-width:1100px){.figures figure{max-width:calc(50% - 18px)}}
figure{margin:0;background:#fff;border:1px solid #ddd;padding:4px}figure svg{display:block;max-width:100%;height:auto}
figcaption{font-size:.82em;color:#555;max-width:620px;padding:4px 2px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:.92em}dl.facts dt{color:#555}dl.facts dd{margin:0}
.verdict-bad{color:#b00020;font-weight:600}.verdict-ok{color:#1b6e20;font-weight:600}
details{background:#fff;border:1px solid #ddd;margin:3px 0;padding:3px 8px}details[open]{border-color:#999}
summary{cursor:pointer;font-size:.9em}
table.packets{font-family:Hack,'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:.8em;margin:6px 0}
tr.before td{background:#e8f0fb}tr.ack td{background:#e6f5e6}tr.after td{background:#fdeaea}tr.gap td{color:#888;text-align:center}
.note{color:#555;font-size:.88em}.status{font-size:.8em;color:#777}
ol.fixes li{margin:2px 0}
nav.worst{font-size:.9em;margin:.4em 0 .2em;line-height:1.6}
.table-tools{margin:.4em 0;font-size:.9em}.table-tools input{font:inherit;padding:2px 6px;width:22em}
th.sortable{cursor:pointer;user-select:none}th.sortable:hover{background:#e2e2e2}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
#conn-table tr[hidden]{display:none}
"#;

/// Writes a whole page around `body`. The script records problems and counts the stall
/// markers into `#render-status`, so a headless browser can check the page.
pub fn page(title: &str, body: &str, expected_stall_markers: usize) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{CSS}</style>
</head>
<body>
{body}
<p id="render-status" class="status" data-status="pending" data-expected-stall-markers="{expected_stall_markers}">page script did not run</p>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        title = escape(title),
    )
}

const SCRIPT: &str = r#"
(function () {
  var problems = [];
  window.addEventListener('error', function (e) { problems.push(String(e.message || e)); report(); });
  function openListing(id) {
    var el = id && document.getElementById(id);
    if (el && el.tagName === 'DETAILS') { el.open = true; }
  }
  document.addEventListener('click', function (ev) {
    var t = ev.target;
    var a = t && t.closest ? t.closest('a') : null;
    if (!a) { return; }
    var href = a.getAttribute('href') || '';
    if (href.charAt(0) === '#') { openListing(href.slice(1)); }
  });
  window.addEventListener('hashchange', function () { openListing(location.hash.slice(1)); });
  function report() {
    var el = document.getElementById('render-status');
    if (!el) { return; }
    var markers = document.querySelectorAll('svg .stall-marker').length;
    var gaps = document.querySelectorAll('svg .gap-marker').length;
    var svgs = document.querySelectorAll('svg').length;
    var expected = parseInt(el.getAttribute('data-expected-stall-markers'), 10);
    var dead = [];
    Array.prototype.forEach.call(document.querySelectorAll("a[href^='#']"), function (a) {
      var id = a.getAttribute('href').slice(1);
      if (!document.getElementById(id)) { dead.push(id); }
    });
    var firstGraph = document.querySelector('figure svg');
    var ok = problems.length === 0 && markers === expected && dead.length === 0;
    el.setAttribute('data-dead-links', String(dead.length));
    if (firstGraph) {
      el.setAttribute('data-first-graph-top',
        String(Math.round(firstGraph.getBoundingClientRect().top + window.scrollY)));
    }
    var table = document.getElementById('conn-table');
    if (table) { el.setAttribute('data-rows-shown', table.getAttribute('data-rows-shown') || ''); }
    el.setAttribute('data-status', ok ? 'ok' : 'error');
    el.setAttribute('data-stall-markers', String(markers));
    el.setAttribute('data-gap-markers', String(gaps));
    el.setAttribute('data-svgs', String(svgs));
    el.textContent = 'rendered: ' + svgs + ' graphs, ' + markers + ' stall markers, ' + gaps +
      ' other gap markers' + (dead.length ? '; links without a target: ' + dead.slice(0, 5).join(' ') : '') +
      (problems.length ? '; problems: ' + problems.join(' | ') : '');
  }
  openListing(location.hash.slice(1));
  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', report); } else { report(); }
})();
"#;
