/* Ranks runs at a chosen operating point (context × requests at once), kept in the
   address (#at=32K-8&by=per_gpu, and fam=<family slug> on the index) so a ranking
   can be shared; other keys in the address (the runs table's filters) are kept.
   Everything comes from the build (#oppoint-data, site_builder/oppoint.py): which
   cell stands for each run at each point (exact or nearest) and every number's
   text; this script only orders the rows by the chosen measure. */
(function () {
  "use strict";
  var node = document.getElementById("oppoint-data");
  var form = document.getElementById("oppoint-form");
  var result = document.getElementById("oppoint-result");
  if (!node || !form || !result) return;
  var data = JSON.parse(node.textContent);
  var section = document.getElementById("oppoint");
  /* The chooser works only with this script: shown by it. */
  Array.prototype.forEach.call(section.querySelectorAll("[data-needs-js]"), function (e) {
    e.hidden = false;
  });
  var permalink = document.getElementById("oppoint-permalink");
  var selCtx = form.elements.ctx, selN = form.elements.n, selBy = form.elements.by;
  var selFam = form.elements.fam || null;
  var KEYS = ["at", "by", "fam"];
  var DEFAULT_AT = node.getAttribute("data-default-at");
  var DEFAULT_BY = node.getAttribute("data-default-by");
  var ROOT = node.getAttribute("data-root") || "";
  var metricIndex = {};
  data.metrics.forEach(function (m, i) { metricIndex[m.key] = i; });

  function params() { return new URLSearchParams(window.location.hash.replace(/^#/, "")); }

  function readState() {
    var p = params();
    var at = p.get("at");
    var by = p.get("by");
    return {
      asked: at && !data.choices[at] ? at : "",
      at: at && data.choices[at] ? at : DEFAULT_AT,
      by: by && metricIndex.hasOwnProperty(by) ? by : DEFAULT_BY,
      fam: p.get("fam") || ""
    };
  }

  function hashFor(state) {
    var p = params();
    KEYS.forEach(function (k) { if (state[k]) p.set(k, state[k]); else p.delete(k); });
    return p.toString();
  }

  function writeState(state) {
    var text = hashFor(state);
    var base = window.location.href.split("#")[0];
    window.history.replaceState(null, "", text ? base + "#" + text : base);
    permalink.href = "#" + text;
  }

  function syncControls(state) {
    var cut = state.at.lastIndexOf("-");
    selCtx.value = state.at.slice(0, cut);
    selN.value = state.at.slice(cut + 1);
    selBy.value = state.by;
    if (selFam) selFam.value = state.fam;
  }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function entries(state) {
    var by = metricIndex[state.by];
    var out = [];
    data.runs.forEach(function (run, i) {
      if (state.fam && run.family_slug !== state.fam) return;
      var c = data.choices[state.at][i];
      var cell = c === -1 ? null : run.cells[c >= 0 ? c : -c - 2];
      out.push({ run: run, cell: cell, exact: c >= 0,
                 value: cell ? cell.values[by] : null });
    });
    var sign = data.metrics[by].higher ? -1 : 1;
    out.sort(function (a, b) {
      var na = a.value === null, nb = b.value === null;
      if (na !== nb) return na ? 1 : -1;
      if (!na && a.exact !== b.exact) return a.exact ? -1 : 1; /* nearest cells after */
      if (!na && a.value !== b.value) return sign * (a.value - b.value);
      return a.run.title < b.run.title ? -1 : a.run.title > b.run.title ? 1 : 0;
    });
    return out;
  }

  function render(state) {
    var by = metricIndex[state.by];
    var rows = entries(state);
    result.textContent = "";
    var caption = data.points[state.at] + " · ranked by " + data.metrics[by].label;
    result.appendChild(el("p", caption, "sub"));
    if (state.asked) {
      result.appendChild(el("p", "No run here has the context or request count of " + state.asked +
        "; showing " + data.points[state.at] + " instead.", "notice"));
    }
    result.appendChild(el("p", "Scroll sideways for more columns →", "scroll-hint"))
      .setAttribute("aria-hidden", "true");
    var wrap = el("div", null, "table-scroll");
    wrap.setAttribute("role", "region");
    wrap.setAttribute("tabindex", "0");
    wrap.setAttribute("aria-label", caption);
    var table = el("table", null, "runs oppoint-rank sticky-first");
    table.id = "oppoint-table";
    var head = table.createTHead().insertRow();
    /* The run comes first (it stays in view on a phone); its place is its prefix. */
    ["# Run", "Cell"].forEach(function (h) { head.appendChild(el("th", h)).scope = "col"; });
    data.metrics.forEach(function (m, i) {
      var th = head.appendChild(el("th", m.label, i === by ? "num by" : "num"));
      th.scope = "col";
      if (i === by) th.setAttribute("aria-sort", m.higher ? "descending" : "ascending");
    });
    var body = table.createTBody();
    var place = 0;
    rows.forEach(function (e) {
      var tr = body.insertRow();
      tr.setAttribute("data-slug", e.run.slug);
      if (e.value !== null) place += 1;
      var name = el("td", null, "name");
      name.appendChild(el("span", e.value !== null ? String(place) : data.missing, "place"));
      name.appendChild(document.createTextNode(" "));
      var a = el("a");
      /* A name wraps between its words only, never inside one (as the templates do). */
      (selFam && !state.fam ? e.run.title + " · " + e.run.label : e.run.label)
        .split(" ").forEach(function (w, j) {
          if (j) a.appendChild(document.createTextNode(" "));
          a.appendChild(el("span", w, "nowrap"));
        });
      a.href = ROOT + e.run.page;
      name.appendChild(a);
      tr.appendChild(name);
      var where = el("td");
      if (e.cell) {
        where.appendChild(document.createTextNode(e.cell.label));
        if (!e.exact) {
          var badge = el("span", "nearest", "badge nearest");
          badge.title = "no cell at " + data.points[state.at] + "; nearest measured cell";
          where.appendChild(document.createTextNode(" "));
          where.appendChild(badge);
        }
        if (e.cell.status !== data.valid) {
          where.appendChild(document.createTextNode(" "));
          where.appendChild(el("span", e.cell.status_label, "status"));
        }
      } else {
        where.textContent = data.missing;
      }
      tr.appendChild(where);
      data.metrics.forEach(function (m, i) {
        var td = el("td", e.cell ? e.cell.texts[i] : data.missing, i === by ? "num by" : "num");
        if (m.key === "cost" && e.run.price) td.title = e.run.price;
        tr.appendChild(td);
      });
    });
    wrap.appendChild(table);
    result.appendChild(wrap);
  }

  function update(state) {
    syncControls(state);
    render(state);
  }

  form.addEventListener("input", function () {
    var state = { at: selCtx.value + "-" + selN.value, by: selBy.value,
                  fam: selFam ? selFam.value : "" };
    if (!data.choices[state.at]) state.at = DEFAULT_AT;
    writeState(state);
    update(state);
  });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  window.addEventListener("hashchange", function () {
    var state = readState();
    permalink.href = "#" + hashFor(state);
    update(state);
  });
  var start = readState();
  permalink.href = "#" + hashFor(start);
  update(start);
})();
