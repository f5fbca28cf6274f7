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
/* Ranks runs at a chosen operating point (context × requests at once), kept in the
   address (#at=32K-8&by=per_gpu, and on the index fam=<family slug>, or fam=* for
   every model, labelled as not comparable) so a ranking can be shared; other keys
   in the address (the runs table's filters) are kept. Rankings are within one
   model family: a family page ranks its own runs, the index the family chosen
   (its largest by default).
   Everything comes from the build (site_builder/rankings.py), in one file per
   family, data/oppoint/<family>.js, loaded with a <script> tag (file:// pages
   cannot fetch()) when the reader reaches the rankings, uses them, or arrives with
   a ranking in the address: which cell stands for each run at each point (exact or
   nearest) and every number's text; this script only orders the rows by the
   chosen measure. "All models" lays every family's file end to end.
   The percentile (pct=p99 in the address, event sm-tail from tails.js) switches the
   TTFT and per-request columns to that level's values (every level is in the data).
   The "fastest under latency limits" block (#slo-rank) is redone here when the reader
   changes the limits (slo.js: slo= in the address, event sm-slo), its measure
   (sloby=) or the family: each run's best cell meeting them, by slo.py's rule, tied
   places marked where both cells' 95% intervals overlap. */
(function () {
  "use strict";
  var node = document.getElementById("oppoint-data");
  var form = document.getElementById("oppoint-form");
  var result = document.getElementById("oppoint-result");
  if (!node || !form || !result) return;
  var section = document.getElementById("oppoint");
  /* The chooser works only with this script: shown by it. */
  Array.prototype.forEach.call(document.querySelectorAll("#oppoint [data-needs-js], " +
      "#slo-rank [data-needs-js]"), function (e) { e.hidden = false; });
  var permalink = document.getElementById("oppoint-permalink");
  var selCtx = form.elements.ctx, selN = form.elements.n, selBy = form.elements.by;
  var selFam = form.elements.fam || null;
  var KEYS = ["at", "by", "fam"];
  var DEFAULT_AT = node.getAttribute("data-default-at");
  var DEFAULT_BY = node.getAttribute("data-default-by");
  var FAMILY = node.getAttribute("data-family") || "";
  var ALL = node.getAttribute("data-all") || "*";
  var ROOT = node.getAttribute("data-root") || "";
  var DIR = ROOT + (node.getAttribute("data-dir") || "data/oppoint") + "/";
  var STORE = "SPEED_MATRIX_OPPOINT";
  /* The measures this page offers (a family without prices has no cost column). */
  var OFFERED = {};
  Array.prototype.forEach.call(selBy.options, function (o) { OFFERED[o.value] = 1; });
  var data = null;  /* the data of the family shown (or of all of them), once loaded */
  var metricIndex = {};
  var LEVELS = window.SpeedMatrixRules.levels();  /* the build's (#page-rules) */
  var AT_LEVEL = { per_request: 1, ttft: 1 };  /* the columns the percentile switches */
  var DEFAULT_FAM = selFam ? (selFam.querySelector("option[selected]") || selFam.options[0]).value
    : FAMILY;

  /* A ranking row's first cell: its place ("—" when the run has no value) and the
     run's linked site-wide name (model · GPU · engine …, site_builder/names.py),
     which wraps between its words only, never inside one (as the templates do). */
  function nameCell(e, place) {
    var name = el("td", null, "name");
    name.appendChild(el("span", e.value !== null ? String(place) : data.missing, "place"));
    name.appendChild(document.createTextNode(" "));
    var a = el("a");
    e.run.name.split(" ").forEach(function (w, j) {
      if (j) a.appendChild(document.createTextNode(" "));
      a.appendChild(el("span", w, "nowrap"));
    });
    a.href = ROOT + e.run.page;
    name.appendChild(a);
    return name;
  }

  var ADDRESS = window.SpeedMatrixAddress, RULES = window.SpeedMatrixRules;
  function params() { return ADDRESS.params(); }

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

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  /* ---- which family, and its data ------------------------------------------- */
  function famOption(fam) {
    if (!selFam) return null;
    for (var i = 0; i < selFam.options.length; i++) {
      if (selFam.options[i].value === fam) return selFam.options[i];
    }
    return null;
  }

  /* The family in the address when the page offers it, else the page's default. */
  function famOf(p) {
    var fam = p.get("fam") || "";
    return fam && famOption(fam) ? fam : DEFAULT_FAM;
  }

  /* The families whose files a choice needs: one, or every one for "All models". */
  function slugsFor(fam) {
    if (fam !== ALL) return [fam];
    return Array.prototype.map.call(selFam.options, function (o) { return o.value; })
      .filter(function (v) { return v !== ALL; });
  }

  function defaultAt(fam) {
    var o = famOption(fam);
    return (o && o.getAttribute("data-default-at")) || DEFAULT_AT;
  }

  var waiting = {};  /* slug -> callbacks while its file loads */
  function loadOne(slug, done) {
    var store = window[STORE] || {};
    if (store[slug]) { done(true); return; }
    if (waiting[slug]) { waiting[slug].push(done); return; }
    waiting[slug] = [done];
    var s = document.createElement("script");
    s.src = DIR + encodeURIComponent(slug) + ".js";
    s.async = true;
    function end(ok) {
      var calls = waiting[slug];
      delete waiting[slug];
      if (!ok && s.parentNode) s.parentNode.removeChild(s);  /* a later try loads it anew */
      calls.forEach(function (f) { f(ok && !!(window[STORE] || {})[slug]); });
    }
    s.onload = function () { end(true); };
    s.onerror = function () { end(false); };
    document.head.appendChild(s);
  }

  function load(slugs, done) {
    var left = slugs.length, failed = [];
    if (!left) { done(failed); return; }
    slugs.forEach(function (slug) {
      loadOne(slug, function (ok) {
        if (!ok) failed.push(slug);
        if (--left === 0) done(failed);
      });
    });
  }

  var merged = {};
  /* One family's data as it is; several laid end to end (each file has the
     choices at every point of the site, in its runs' order). */
  function dataFor(slugs) {
    var store = window[STORE];
    if (slugs.length === 1) return store[slugs[0]];
    var key = slugs.join("|");
    if (merged[key]) return merged[key];
    var first = store[slugs[0]];
    var out = { metrics: first.metrics, points: first.points, missing: first.missing,
                valid: first.valid, levels: first.levels, runs: [], choices: {} };
    Object.keys(first.choices).forEach(function (k) { out.choices[k] = []; });
    slugs.forEach(function (slug) {
      var d = store[slug];
      out.runs = out.runs.concat(d.runs);
      Object.keys(out.choices).forEach(function (k) {
        out.choices[k] = out.choices[k].concat(d.choices[k] ||
          d.runs.map(function () { return -1; }));
      });
    });
    merged[key] = out;
    return out;
  }

  function use(d) {
    data = d;
    metricIndex = {};
    data.metrics.forEach(function (m, i) { metricIndex[m.key] = i; });
    LEVELS = data.levels || LEVELS;
  }

  /* The metrics shown as columns: those the page offers, in the data's order. */
  function shownMetrics() {
    var out = [];
    data.metrics.forEach(function (m, i) { if (OFFERED[m.key]) out.push(i); });
    return out;
  }

  /* ---- the operating-point ranking ------------------------------------------ */
  function readState() {
    var p = params();
    var at = p.get("at");
    var by = p.get("by");
    var fam = famOf(p);
    var fallback = defaultAt(fam);
    return {
      asked: at && !data.choices[at] ? at : "",
      at: at && data.choices[at] ? at : (data.choices[fallback] ? fallback
        : Object.keys(data.choices)[0]),
      by: by && metricIndex.hasOwnProperty(by) && OFFERED[by] ? by : DEFAULT_BY,
      fam: selFam ? fam : ""
    };
  }

  /* The address for a state: every key of the chooser's (fam on the index only, so
     a shared link keeps its family when the site's largest one changes). */
  function hashFor(state) {
    var p = params();
    KEYS.forEach(function (k) { if (state[k]) p.set(k, state[k]); else p.delete(k); });
    return p.toString();
  }

  function writeHash(text) {
    permalink.href = "#" + ADDRESS.replace(text);
  }

  function syncControls(state) {
    var cut = state.at.lastIndexOf("-");
    selCtx.value = state.at.slice(0, cut);
    selN.value = state.at.slice(cut + 1);
    selBy.value = state.by;
    if (selFam) selFam.value = state.fam;
  }

  /* The runs at the chosen point, best first (oppoint.rank's rule: rules.js rankAt). */
  function entries(state) {
    var li = levelIndex();
    return RULES.rankAt(data.runs, data.choices[state.at], state.by, function (cell, key) {
      return valueAt(cell, key, li);
    });
  }

  function famName(fam) {
    var o = famOption(fam);
    return o ? o.textContent.replace(/ \([^)]*\)$/, "") : "";  /* less its run count */
  }

  function render(state) {
    var by = metricIndex[state.by];
    var li = levelIndex();
    var rows = entries(state);
    result.textContent = "";
    var where = state.fam === ALL ? "all models" : state.fam ? famName(state.fam) : "";
    var caption = data.points[state.at] + " · ranked by " + labelAt(data.metrics[by], li) +
      (where ? " · " + where : "");
    result.appendChild(el("p", caption, "sub"));
    if (state.fam === ALL) {
      result.appendChild(el("p", "All models: different models are not comparable on speed " +
        "alone (a smaller model is faster on the same GPUs); choose a model to compare " +
        "like with like.", "notice cross-model"));
    }
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
    var shown = shownMetrics();
    /* The run comes first (it stays in view on a phone); its place is its prefix. */
    ["# Run", "Cell"].forEach(function (h) { head.appendChild(el("th", h)).scope = "col"; });
    shown.forEach(function (i) {
      var m = data.metrics[i];
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
      tr.appendChild(nameCell(e, place));
      var td = el("td");
      if (e.cell) {
        td.appendChild(document.createTextNode(e.cell.label));
        if (!e.exact) {
          var badge = el("span", "nearest", "badge nearest");
          badge.title = "no cell at " + data.points[state.at] + "; nearest measured cell";
          td.appendChild(document.createTextNode(" "));
          td.appendChild(badge);
        }
        if (e.cell.status !== data.valid) {
          td.appendChild(document.createTextNode(" "));
          td.appendChild(el("span", e.cell.status_label, "status"));
        }
      } else {
        td.textContent = data.missing;
      }
      tr.appendChild(td);
      shown.forEach(function (i) {
        var m = data.metrics[i];
        var cell = el("td", e.cell ? textAt(e.cell, m.key, li) : data.missing,
                      i === by ? "num by" : "num");
        if (m.key === "cost" && e.run.price) cell.title = e.run.price;
        tr.appendChild(cell);
      });
    });
    wrap.appendChild(table);
    result.appendChild(wrap);
  }

  /* ---- loading on demand, then drawing both rankings ------------------------ */
  var started = false, generation = 0;
  function refresh() {
    started = true;
    var fam = selFam ? famOf(params()) : FAMILY;
    var slugs = slugsFor(fam);
    var mine = ++generation;
    if (selFam) selFam.value = fam;
    if (selSloFam) selSloFam.value = fam;
    var store = window[STORE] || {};
    if (!slugs.every(function (s) { return store[s]; })) {
      result.textContent = "";
      result.appendChild(el("p", "Loading the ranking\u2026", "sub loading"));
    }
    load(slugs, function (failed) {
      if (mine !== generation) return;  /* a later choice is being drawn */
      if (failed.length) {
        result.textContent = "";
        result.appendChild(el("p", "Could not load the ranking data (" + failed.map(function (s) {
          return DIR + s + ".js"; }).join(", ") + "); the summary above is the build's.",
          "notice"));
        return;
      }
      use(dataFor(slugs));
      var state = readState();
      permalink.href = "#" + hashFor(state);
      syncControls(state);
      render(state);
      renderSlo(fam);
    });
  }

  form.addEventListener("input", function (ev) {
    var p = params();
    var fam = selFam ? selFam.value : "";
    var at = selCtx.value + "-" + selN.value;
    /* Another family keeps the point the reader chose, else opens at its own default. */
    if (selFam && ev.target === selFam && !p.has("at")) at = defaultAt(fam);
    if (data && !data.choices[at]) at = defaultAt(fam);
    writeHash(hashFor({ at: at, by: selBy.value, fam: fam }));
    refresh();
  });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  window.addEventListener("hashchange", function () { if (started || wanted()) refresh(); });
  document.addEventListener("sm-tail", function () { if (started) refresh(); });

  /* The address asks for a ranking (a shared link): draw it now. */
  function wanted() {
    var p = params();
    return ["at", "by", "fam", "slo", "sloby"].some(function (k) { return p.has(k); });
  }

  /* ---- fastest under latency limits ----------------------------------------- */
  var sloResult = document.getElementById("slo-rank-result");
  var sloForm = document.getElementById("slo-rank-form");
  var sloBox = document.querySelector("#slo-rank .slo-control");
  var SLO = window.SpeedMatrixSlo;
  var sloReady = !!(sloResult && sloForm && sloBox && SLO);
  var selSloFam = sloReady ? sloForm.querySelector("select[name=slofam]") : null;
  var SLO_DEFAULT = sloReady ? sloBox.getAttribute("data-default") || "" : "";
  var selSloBy = sloReady ? sloForm.querySelector("select[name=sloby]") : null;
  var limitsText = document.getElementById("slo-rank-limits");
  var sourceText = document.getElementById("slo-rank-source");
  var familyText = document.getElementById("slo-rank-family");
  var sourceDefault = sourceText ? sourceText.textContent : "";

  /* Per GPU when some run of the family has a GPU count, else total (rankings.py). */
  function sloDefaultBy() {
    var i = metricIndex.per_gpu;
    return data.runs.some(function (r) {
      return r.cells.some(function (c) { return c.values[i] !== null; });
    }) ? "per_gpu" : "total";
  }

  function sloBy() {
    var b = params().get("sloby");
    return b && b !== "ttft" && metricIndex.hasOwnProperty(b) && OFFERED[b] ? b : sloDefaultBy();
  }

  function interval(cell, by, li) {
    if (!cell || !cell.ci || (li > 0 && AT_LEVEL[by])) return null;
    return cell.ci[metricIndex[by]];
  }

  /* Each run's best cell meeting the limits, best run first (oppoint.slo_rank's rule:
     rules.js rankSlo), tied places marked where both cells' 95% intervals overlap. */
  function sloEntries(limits, by, li) {
    return RULES.rankSlo(data.runs, limits, by, function (cell, key) {
      return valueAt(cell, key, li);
    }, function (cell) { return interval(cell, by, li); });
  }

  function renderSlo(fam) {
    if (!sloReady || !data) return;
    var limits = SLO.current(SLO_DEFAULT);
    var by = sloBy(), li = levelIndex();
    var mine = SLO.spec(limits) !== SLO.spec(SLO.parse(SLO_DEFAULT) || []);
    limitsText.textContent = SLO.text(limits);
    sourceText.textContent = mine ? " \u00b7 your limits (the run pages' shares and goodput are for the site's)" : sourceDefault;
    if (familyText) {
      familyText.textContent = fam === ALL ? "all models (different models are not " +
        "comparable on speed alone)" : famName(fam);
    }
    selSloBy.value = by;
    var shown = shownMetrics();
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
      var name = nameCell(e, place);
      if (e.tied) {
        var badge = el("span", "tied within noise", "badge tied");
        badge.title = "its 95% interval overlaps the place above";
        name.appendChild(document.createTextNode(" "));
        name.appendChild(badge);
      }
      tr.appendChild(name);
      tr.appendChild(el("td", e.cell ? e.cell.label : RULES.noneMeets(e.run, limits)));
      shown.forEach(function (i) {
        var key = data.metrics[i].key;
        tr.appendChild(el("td", e.cell ? textAt(e.cell, key, li) : data.missing,
                          key === by ? "num by" : "num"));
      });
    });
    var wrap = sloResult.querySelector(".table-scroll");
    var old = document.getElementById("slo-rank-table");
    wrap.replaceChild(table, old);
    var more = document.getElementById("slo-rank-more");
    if (more) more.hidden = true;  /* every run of the choice is listed now */
  }

  if (sloReady) {
    selSloBy.addEventListener("change", function () {
      var p = params();
      if (data && selSloBy.value === sloDefaultBy()) p.delete("sloby");
      else p.set("sloby", selSloBy.value);
      writeHash(p.toString());
      refresh();
    });
    if (selSloFam) {
      selSloFam.addEventListener("change", function () {
        var p = params();
        p.set("fam", selSloFam.value);
        p.delete("at");  /* the other family's own default point */
        writeHash(p.toString());
        refresh();
      });
    }
    document.addEventListener("sm-slo", function () { refresh(); });
  }

  /* On demand: now when the address asks for a ranking, else when the rankings come
     near the screen or the reader touches a control. */
  function startOnce() { if (!started) refresh(); }
  if (wanted()) {
    refresh();
  } else if ("IntersectionObserver" in window) {
    var seen = new IntersectionObserver(function (items) {
      if (items.some(function (i) { return i.isIntersecting; })) {
        seen.disconnect();
        startOnce();
      }
    }, { rootMargin: "200px" });
    seen.observe(section);
    var slo = document.getElementById("slo-rank");
    if (slo) seen.observe(slo);
  } else {
    refresh();
  }
  [form, sloForm].forEach(function (f) {
    if (f) f.addEventListener("focusin", startOnce);
  });
})();
