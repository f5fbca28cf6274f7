/* Ranks runs at a chosen operating point (context × requests at once), kept in the
   address (#at=32K-8&by=per_gpu, and fam=<family slug> on the index) so a ranking
   can be shared; other keys in the address (the runs table's filters) are kept.
   Everything comes from the build (#oppoint-data, site_builder/oppoint.py): which
   cell stands for each run at each point (exact or nearest) and every number's
   text; this script only orders the rows by the chosen measure.
   The percentile (pct=p99 in the address, event sm-tail from tails.js) switches the
   TTFT and per-request columns to that level's values (every level is in the data).
   The "fastest under latency limits" block (#slo-rank) is redone here when the reader
   changes the limits (slo.js: slo= in the address, event sm-slo) or its measure
   (sloby=): each run's best cell meeting them, by slo.py's rule, tied places marked
   where both cells' 95% intervals overlap. */
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
  var LEVELS = data.levels || ["p50"];
  var AT_LEVEL = { per_request: 1, ttft: 1 };  /* the columns the percentile switches */

  /* A ranking row's first cell: its place ("—" when the run has no value) and the
     run's linked name, which wraps between its words only, never inside one (as the
     templates do); `withModel` names the model too (the ranking spans families). */
  function nameCell(e, place, withModel) {
    var name = el("td", null, "name");
    name.appendChild(el("span", e.value !== null ? String(place) : data.missing, "place"));
    name.appendChild(document.createTextNode(" "));
    var a = el("a");
    (withModel ? e.run.title + " \u00b7 " + e.run.label : e.run.label).split(" ")
      .forEach(function (w, j) {
        if (j) a.appendChild(document.createTextNode(" "));
        a.appendChild(el("span", w, "nowrap"));
      });
    a.href = ROOT + e.run.page;
    name.appendChild(a);
    return name;
  }

  function params() { return new URLSearchParams(window.location.hash.replace(/^#/, "")); }

  /* The percentile in the address (index in LEVELS; 0: the median, the default). */
  function levelIndex() { return Math.max(0, LEVELS.indexOf(params().get("pct"))); }

  function valueAt(cell, key, li) {
    if (li > 0 && AT_LEVEL[key]) return cell.lv ? cell.lv[key][li] : null;
    return cell.values[metricIndex[key]];
  }

  function textAt(cell, key, li) {
    if (li > 0 && AT_LEVEL[key]) return cell.lt ? cell.lt[key][li] : data.missing;
    return cell.texts[metricIndex[key]];
  }

  function labelAt(m, li) {
    return li > 0 && AT_LEVEL[m.key] ? m.label + " (" + LEVELS[li] + ")" : m.label;
  }

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
    var li = levelIndex();
    var out = [];
    data.runs.forEach(function (run, i) {
      if (state.fam && run.family_slug !== state.fam) return;
      var c = data.choices[state.at][i];
      var cell = c === -1 ? null : run.cells[c >= 0 ? c : -c - 2];
      out.push({ run: run, cell: cell, exact: c >= 0,
                 value: cell ? valueAt(cell, state.by, li) : null });
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
    var li = levelIndex();
    var rows = entries(state);
    result.textContent = "";
    var caption = data.points[state.at] + " · ranked by " + labelAt(data.metrics[by], li);
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
      var th = head.appendChild(el("th", labelAt(m, li), i === by ? "num by" : "num"));
      th.scope = "col";
      if (i === by) th.setAttribute("aria-sort", m.higher ? "descending" : "ascending");
    });
    var body = table.createTBody();
    var place = 0;
    rows.forEach(function (e) {
      var tr = body.insertRow();
      tr.setAttribute("data-slug", e.run.slug);
      if (e.value !== null) place += 1;
      tr.appendChild(nameCell(e, place, selFam && !state.fam));
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
        var td = el("td", e.cell ? textAt(e.cell, m.key, li) : data.missing,
                    i === by ? "num by" : "num");
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
  document.addEventListener("sm-tail", function () { update(readState()); });
  var start = readState();
  permalink.href = "#" + hashFor(start);
  update(start);

  /* ---- fastest under latency limits ----------------------------------------- */
  var sloResult = document.getElementById("slo-rank-result");
  var sloForm = document.getElementById("slo-rank-form");
  var sloBox = document.querySelector("#slo-rank .slo-control");
  var SLO = window.SpeedMatrixSlo;
  if (!sloResult || !sloForm || !sloBox || !SLO) return;
  var SLO_DEFAULT = sloBox.getAttribute("data-default") || "";
  var SLO_BY = sloResult.getAttribute("data-default-by");
  var selSloBy = sloForm.querySelector("select[name=sloby]");
  var limitsText = document.getElementById("slo-rank-limits");
  var sourceText = document.getElementById("slo-rank-source");
  var sourceDefault = sourceText.textContent;

  function sloBy() {
    var b = params().get("sloby");
    return b && b !== "ttft" && metricIndex.hasOwnProperty(b) ? b : SLO_BY;
  }

  /* A run's best cell meeting the limits by `by` (slo.best_cell: the first of the
     sorted cells on a tie); without a value for `by`, its best by total tok/s. */
  function bestCell(run, limits, by, li) {
    var pickBy = function (key) {
      var sign = data.metrics[metricIndex[key]].higher ? -1 : 1;
      var best = null, bestV = null;
      run.cells.forEach(function (c) {
        if (!c.lv || c.values[metricIndex.total] === null || !SLO.meets(c.lv, limits)) return;
        var v = valueAt(c, key, li);
        if (v === null) return;
        if (best === null || sign * (v - bestV) < 0) { best = c; bestV = v; }
      });
      return best;
    };
    return pickBy(by) || pickBy("total");
  }

  function interval(cell, by, li) {
    if (!cell || !cell.ci || (li > 0 && AT_LEVEL[by])) return null;
    return cell.ci[metricIndex[by]];
  }

  function sloEntries(limits, by, li) {
    var sign = data.metrics[metricIndex[by]].higher ? -1 : 1;
    var out = data.runs.map(function (run) {
      var cell = bestCell(run, limits, by, li);
      return { run: run, cell: cell, value: cell ? valueAt(cell, by, li) : null, tied: false };
    });
    var title = function (a, b) { return a.run.title < b.run.title ? -1 : a.run.title > b.run.title ? 1 : 0; };
    var ranked = out.filter(function (e) { return e.value !== null; })
      .sort(function (a, b) { return a.value !== b.value ? sign * (a.value - b.value) : title(a, b); });
    var rest = out.filter(function (e) { return e.value === null; }).sort(function (a, b) {
      return (a.cell === null) - (b.cell === null) || title(a, b);  /* a meeting cell first */
    });
    ranked.forEach(function (e, k) {
      if (!k) return;
      var a = interval(ranked[k - 1].cell, by, li), b = interval(e.cell, by, li);
      e.tied = !!(a && b && a[0] <= b[1] && b[0] <= a[1]);
    });
    return ranked.concat(rest);
  }

  function renderSlo() {
    var limits = SLO.current(SLO_DEFAULT);
    var by = sloBy(), li = levelIndex();
    var mine = SLO.spec(limits) !== SLO.spec(SLO.parse(SLO_DEFAULT) || []);
    limitsText.textContent = SLO.text(limits);
    sourceText.textContent = mine ? " \u00b7 your limits (the run pages' shares and goodput are for the site's)" : sourceDefault;
    selSloBy.value = by;
    var shown = data.metrics.map(function (m, i) { return i; });
    var table = el("table", null, "runs slo-rank-table sticky-first");
    table.id = "slo-rank-table";
    var head = table.createTHead().insertRow();
    ["# Run", "Best cell"].forEach(function (h) { head.appendChild(el("th", h)).scope = "col"; });
    shown.forEach(function (i) {
      var m = data.metrics[i];
      head.appendChild(el("th", labelAt(m, li), m.key === by ? "num by" : "num")).scope = "col";
    });
    var body = table.createTBody();
    var place = 0;
    sloEntries(limits, by, li).forEach(function (e) {
      var tr = body.insertRow();
      tr.setAttribute("data-slug", e.run.slug);
      if (e.value !== null) place += 1;
      var name = nameCell(e, place, !!selFam);
      if (e.tied) {
        var badge = el("span", "tied within noise", "badge tied");
        badge.title = "its 95% interval overlaps the place above";
        name.appendChild(document.createTextNode(" "));
        name.appendChild(badge);
      }
      tr.appendChild(name);
      tr.appendChild(el("td", e.cell ? e.cell.label : "no cell meets the limits"));
      shown.forEach(function (i) {
        var key = data.metrics[i].key;
        tr.appendChild(el("td", e.cell ? textAt(e.cell, key, li) : data.missing,
                          key === by ? "num by" : "num"));
      });
    });
    var wrap = sloResult.querySelector(".table-scroll");
    var old = document.getElementById("slo-rank-table");
    wrap.replaceChild(table, old);
  }

  selSloBy.addEventListener("change", function () {
    var p = params();
    if (selSloBy.value === SLO_BY) p.delete("sloby"); else p.set("sloby", selSloBy.value);
    var h = p.toString(), base = window.location.href.split("#")[0];
    window.history.replaceState(null, "", h ? base + "#" + h : base);
    renderSlo();
  });
  document.addEventListener("sm-slo", renderSlo);
  document.addEventListener("sm-tail", renderSlo);
  window.addEventListener("hashchange", renderSlo);
  renderSlo();
})();
