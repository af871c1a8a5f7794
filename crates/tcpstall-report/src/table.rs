//! The table of every connection: one row each, sorted by a click on a column header
//! and filtered by a text box, by a script inline in the page (nothing fetched).
//! `#filter=TEXT` in the page's address fills the box when the page opens.

use std::collections::HashSet;
use std::fmt::Write as _;

use tcpstall_core::analyze::Analysis;
use tcpstall_core::diagnosis::ConnectionDiagnosis;
use tcpstall_core::segment::secs;

use crate::svg::escape;

/// Rows at most: a page stays light enough for a browser; the rest are counted.
pub const MAX_ROWS: usize = 20_000;

pub fn verdict_class(c: &ConnectionDiagnosis) -> &'static str {
    if c.stall_count > 0 {
        "verdict-bad"
    } else {
        "verdict-ok"
    }
}

/// The gaps of a connection by class, most first: "9 nagle-delayed-ack, 1 app-think-time".
pub fn classes(c: &ConnectionDiagnosis) -> String {
    let mut counts: Vec<(usize, &'static str)> = c
        .class_counts()
        .into_iter()
        .map(|(class, (n, _))| (n, class.name()))
        .collect();
    counts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let parts: Vec<String> = counts
        .iter()
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// Writes the table. `drawn` holds the numbers of connections that have a section in
/// the page: only those rows link.
pub fn connections_table(analysis: &Analysis, drawn: &HashSet<usize>, out: &mut String) {
    let total = analysis.connections.len();
    let rows = total.min(MAX_ROWS);
    let _ = write!(
        out,
        r#"<div class="table-tools"><label>Filter <input id="conn-filter" type="search" placeholder="address, port, verdict, class…" autocomplete="off"></label> <span id="conn-count">{rows} of {rows} connections</span> <span class="note">Click a column header to sort.</span></div>"#
    );
    out.push_str(r#"<table id="conn-table"><thead><tr>"#);
    for (label, kind, class) in [
        ("#", "num", "num"),
        ("client → server", "text", ""),
        ("verdict", "text", ""),
        ("stalls", "num", "num"),
        ("time lost", "num", "num"),
        ("share", "num", "num"),
        ("gaps by class", "text", ""),
        ("duration", "num", "num"),
        ("packets", "num", "num"),
    ] {
        let _ = write!(
            out,
            r#"<th class="{class} sortable" data-sort="{kind}" tabindex="0">{label}</th>"#
        );
    }
    out.push_str("</tr></thead><tbody>");
    for (i, c) in analysis.connections.iter().enumerate().take(rows) {
        let n = i + 1;
        let number = if drawn.contains(&n) {
            format!(r##"<a href="#conn-{n}">{n}</a>"##)
        } else {
            n.to_string()
        };
        let share = c.time_lost_share();
        let (lost, share_text) = if c.stall_count > 0 {
            (
                format!("{:.3} s", secs(c.time_lost)),
                format!("{:.1}%", 100.0 * share),
            )
        } else {
            ("-".into(), "-".into())
        };
        let _ = write!(
            out,
            r#"<tr><td class="num" data-v="{n}">{number}</td><td>{} → {}</td><td class="{}">{}</td><td class="num" data-v="{}">{}</td><td class="num" data-v="{}">{lost}</td><td class="num" data-v="{:.6}">{share_text}</td><td>{}</td><td class="num" data-v="{}">{:.3} s</td><td class="num" data-v="{}">{}</td></tr>"#,
            c.client,
            c.server,
            verdict_class(c),
            escape(c.verdict.describe()),
            c.stall_count,
            c.stall_count,
            c.time_lost,
            share,
            classes(c),
            c.duration(),
            secs(c.duration()),
            c.packets,
            c.packets,
        );
    }
    out.push_str("</tbody></table>");
    if total > rows {
        let _ = write!(
            out,
            r#"<p class="note">The {} least severe connections are not in the table; they are in the totals above and in the JSON report.</p>"#,
            total - rows
        );
    }
    if analysis.unlisted.connections > 0 {
        let _ = write!(
            out,
            r#"<p class="note">{} less severe connections were counted but not kept by the analysis: they are in the totals above and in the JSON report's <code>connections_not_listed</code>, not listed.</p>"#,
            analysis.unlisted.connections
        );
    }
    let _ = write!(out, "<script>{SCRIPT}</script>");
}

const SCRIPT: &str = r#"
(function () {
  var table = document.getElementById('conn-table');
  var box = document.getElementById('conn-filter');
  var count = document.getElementById('conn-count');
  if (!table || !box) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  rows.forEach(function (r) { r._text = r.textContent.toLowerCase(); });
  function filter() {
    var terms = box.value.toLowerCase().split(/\s+/).filter(function (t) { return t; });
    var shown = 0;
    rows.forEach(function (r) {
      var ok = terms.every(function (t) { return r._text.indexOf(t) >= 0; });
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + ' of ' + rows.length + ' connections';
    table.setAttribute('data-rows-shown', String(shown));
  }
  function key(row, col, kind) {
    var cell = row.cells[col];
    if (!cell) { return kind === 'num' ? -Infinity : ''; }
    if (kind === 'num') {
      var v = parseFloat(cell.getAttribute('data-v'));
      return isNaN(v) ? -Infinity : v;
    }
    return cell.textContent.toLowerCase();
  }
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function sortBy(th) {
    var col = heads.indexOf(th);
    var kind = th.getAttribute('data-sort');
    var descending = th.getAttribute('aria-sort') !== 'descending';
    if (kind === 'text' && !th.hasAttribute('aria-sort')) { descending = false; }
    heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
    var keyed = rows.map(function (r, i) { return [key(r, col, kind), i, r]; });
    keyed.sort(function (a, b) {
      var d = a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
      if (descending) { d = -d; }
      return d || a[1] - b[1];
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (k) { frag.appendChild(k[2]); });
    body.appendChild(frag);
    rows = keyed.map(function (k) { return k[2]; });
  }
  heads.forEach(function (th) {
    th.addEventListener('click', function () { sortBy(th); });
    th.addEventListener('keydown', function (e) { if (e.key === 'Enter') { sortBy(th); } });
  });
  box.addEventListener('input', filter);
  var m = /^#filter=(.*)$/.exec(location.hash);
  if (m) { box.value = decodeURIComponent(m[1]); }
  filter();
})();
"#;
