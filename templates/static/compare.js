/* A/B view of any two runs: change per cell in percent, kept in the address
   (compare.html#a=RUN&b=RUN&m=metric). Data comes from local script files
   (data/index.js and runs/<slug>/data.js) so it works from file:// too.
   Numbers, context labels and status words arrive already formatted by the
   build (data.js); only the percent change between the two chosen runs is
   formatted here, with the constants of formats.percent_change that the
   build puts in the page (#ab-rules). tests/test_words.py checks both agree. */
(function () {
  "use strict";
  var index = window.SPEED_MATRIX_INDEX;
  var result = document.getElementById("ab-result");
  var selA = document.getElementById("ab-a");
  var selB = document.getElementById("ab-b");
  var selM = document.getElementById("ab-m");
  var permalink = document.getElementById("ab-permalink");
  if (!index || !result) return;
  /* The controls work only with this script: shown by it. */
  Array.prototype.forEach.call(document.querySelectorAll("[data-needs-js]"), function (e) {
    e.hidden = false;
  });
  window.SPEED_MATRIX_RUNS = window.SPEED_MATRIX_RUNS || {};
  var bySlug = {};
  index.runs.forEach(function (r) { bySlug[r.slug] = r; bySlug[r.run_id] = bySlug[r.run_id] || r; });
  var pending = {};
  var NEAR = 0.05; /* contexts within 5% of each other share a row when labels differ */
  var RULES = JSON.parse(document.getElementById("ab-rules").textContent);
  /* Which statuses carry numbers, the Valid code, a missing cell's status: rundir/statuses.py. */
  var STATUS = JSON.parse(document.getElementById("status-rules").textContent);
  var DASH = RULES.missing;

  function loadRun(slug) {
    if (window.SPEED_MATRIX_RUNS[slug]) return Promise.resolve(window.SPEED_MATRIX_RUNS[slug]);
    if (pending[slug]) return pending[slug];
    pending[slug] = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = bySlug[slug].data_js;
      s.onload = function () { resolve(window.SPEED_MATRIX_RUNS[slug]); };
      s.onerror = function () { reject(new Error("cannot load " + s.src)); };
      document.head.appendChild(s);
    });
    return pending[slug];
  }

  /* Percent change: formats.percent_change's rule (rundir/words.py round_half_up,
     then RULES.digits decimals with thousands separators and RULES' signs). */
  function half(v, d) { var k = Math.pow(10, d); return Math.floor(Math.abs(v) * k + 0.5 + RULES.nudge) / k * (v < 0 ? -1 : 1); }
  function fixed(v) {
    return v.toLocaleString("en-US", { minimumFractionDigits: RULES.digits, maximumFractionDigits: RULES.digits });
  }
  function fmtPct(p) {
    var r = half(p, RULES.digits);
    if (r === 0) return fixed(0) + "%";
    return (r > 0 ? RULES.plus : RULES.minus) + fixed(Math.abs(r)) + "%";
  }
  /* Per metric whether higher is better, and the prefill table's caption words:
     the metric table's (site_builder/metrictable.py), put in the page by the build. */
  var METRICS = JSON.parse(document.getElementById("metric-rules").textContent);
  var HIGHER = METRICS.higher;

  /* One phase's cells of a run: {cells: {"<context>x<concurrency>": cell}, contexts, levels, labels}. */
  function cellsOf(run, phase) {
    var out = { cells: {}, contexts: [], levels: [], labels: {}, first: {} };
    var ctx = {}, lv = {};
    run.cells.forEach(function (row) {
      var c = {};
      run.fields.forEach(function (name, i) { c[name] = row[i]; });
      if (c.phase !== phase) return;
      out.cells[c.context + "x" + c.concurrency] = c;
      if (!out.first[c.context]) out.first[c.context] = c;
      out.labels[c.context] = c.context_label;
      ctx[c.context] = 1;
      lv[c.concurrency] = 1;
    });
    var num = function (x, y) { return x - y; };
    out.contexts = Object.keys(ctx).map(Number).sort(num);
    out.levels = Object.keys(lv).map(Number).sort(num);
    return out;
  }

  /* Rows of contexts of A and B: equal contexts share a row; a context only one
     run has shares a row with the nearest context only the other run has, when
     they are within NEAR of each other. Returns rows {a, b, label} and the
     pairs whose labels differ, for the note under the table. */
  function alignContexts(pa, pb) {
    var inB = {}, inA = {};
    pb.contexts.forEach(function (x) { inB[x] = 1; });
    pa.contexts.forEach(function (x) { inA[x] = 1; });
    var rows = [];
    pa.contexts.forEach(function (x) { if (inB[x]) rows.push({ a: x, b: x }); });
    var onlyA = pa.contexts.filter(function (x) { return !inB[x]; });
    var onlyB = pb.contexts.filter(function (x) { return !inA[x]; });
    var candidates = [];
    onlyA.forEach(function (x) {
      onlyB.forEach(function (y) {
        var d = Math.abs(x - y) / Math.max(x, y);
        if (d <= NEAR) candidates.push({ a: x, b: y, d: d });
      });
    });
    candidates.sort(function (p, q) { return p.d - q.d || p.a - q.a; });
    var usedA = {}, usedB = {}, paired = [];
    candidates.forEach(function (p) {
      if (usedA[p.a] || usedB[p.b]) return;
      usedA[p.a] = usedB[p.b] = 1;
      rows.push({ a: p.a, b: p.b });
      if (pa.labels[p.a] !== pb.labels[p.b]) paired.push(p);
    });
    onlyA.forEach(function (x) { if (!usedA[x]) rows.push({ a: x, b: null }); });
    onlyB.forEach(function (y) { if (!usedB[y]) rows.push({ a: null, b: y }); });
    var low = function (r) { return Math.min(r.a === null ? Infinity : r.a, r.b === null ? Infinity : r.b); };
    rows.sort(function (p, q) { return low(p) - low(q); });
    rows.forEach(function (r) {
      var la = r.a === null ? null : pa.labels[r.a];
      var lb = r.b === null ? null : pb.labels[r.b];
      r.label = la === null ? lb : (lb === null || lb === la ? la : la + " / " + lb);
    });
    return { rows: rows, paired: paired };
  }

  function pairNote(paired, pa, pb) {
    if (!paired.length) return null;
    var parts = paired.map(function (p) { return "A " + pa.labels[p.a] + " with B " + pb.labels[p.b]; });
    return el("p", "note ab-paired", "Contexts of different lengths share a row (nearest, within " +
      Math.round(NEAR * 100) + "%): " + parts.join("; ") + ".");
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (tag === "th") e.scope = "col"; /* a row header says scope = "row" where it is made */
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function hasNumbers(c) { return c && STATUS.numbers.indexOf(c.status) >= 0; }
  function value(c, metric) {
    var v = hasNumbers(c) ? c[metric] : null;
    return v === undefined ? null : v;
  }
  /* What one side shows without a change: its number, else its status word, else a dash. */
  function sideText(c, metric) {
    if (!c) return DASH;
    return value(c, metric) !== null ? c[metric + "_text"] : c.status_label;
  }

  /* A cell's 95% interval of a metric, [lo, hi], or null: only runs measured with
     `bench run --repeats k` (k >= 2) carry one (data.js "<metric>_ci"). */
  function span(c, metric) {
    var v = hasNumbers(c) ? c[metric + "_ci"] : null;
    return v && v.length === 2 ? v : null;
  }
  /* A difference is significant only when both cells have intervals and they do not
     overlap; null: no claim (a side has one window). */
  function separated(ca, cb, metric) {
    var a = span(ca, metric), b = span(cb, metric);
    if (!a || !b) return null;
    return a[1] < b[0] || b[1] < a[0];
  }

  function compareCell(ca, cb, metric) {
    var td = el("td", "cell");
    var va = value(ca, metric), vb = value(cb, metric);
    if (va === null || vb === null) {
      var sa = sideText(ca, metric), sb = sideText(cb, metric);
      if (va === null && vb === null && sa === sb) {
        /* Both sides say the same (e.g. both Over capacity): say it once. */
        if (ca) td.classList.add("st-" + ca.status);
        td.appendChild(el("span", "status", sa));
        return td;
      }
      td.classList.add("st-" + ((ca && va === null ? ca : cb) || { status: STATUS.absent }).status);
      td.appendChild(el("span", "pair", "A " + sa));
      td.appendChild(el("span", "pair", "B " + sb));
      return td;
    }
    var change = va === 0 ? null : (vb - va) / va * 100;
    var delta = el("span", "delta", change === null ? DASH : fmtPct(change));
    var apart = separated(ca, cb, metric);
    /* Coloured only when called significant (both intervals, apart): a change of one
       window a side, or within noise, is shown without colour. */
    if (change !== null && half(change, RULES.digits) !== 0 && apart === true) {
      var good = HIGHER[metric] ? change > 0 : change < 0;
      delta.classList.add(good ? "better" : "worse");
    }
    td.appendChild(delta);
    if (apart !== null) {
      td.classList.add(apart ? "ab-significant" : "ab-noise");
      td.appendChild(el("span", "verdict", apart ? "significant" : "within noise"));
    }
    td.appendChild(el("span", "pair", "A " + ca[metric + "_text"] + spanText(ca, metric)));
    td.appendChild(el("span", "pair", "B " + cb[metric + "_text"] + spanText(cb, metric)));
    return td;
  }

  function spanText(c, metric) {
    return span(c, metric) ? " (95% " + c[metric + "_ci_text"] + ")" : "";
  }

  /* How many cells the intervals separate, or why no difference is called significant. */
  function noiseLine(pa, pb, metric) {
    var both = 0, apart = 0;
    alignContexts(pa, pb).rows.forEach(function (r) {
      if (r.a === null || r.b === null) return;
      pa.levels.forEach(function (n) {
        var ca = pa.cells[r.a + "x" + n], cb = pb.cells[r.b + "x" + n];
        if (!ca || !cb || value(ca, metric) === null || value(cb, metric) === null) return;
        var s = separated(ca, cb, metric);
        if (s === null) return;
        both += 1;
        if (s) apart += 1;
      });
    });
    var p = el("p", "ab-noise-summary");
    if (!both) {
      p.textContent = "No difference is called significant: that needs a 95% interval on both " +
        "sides, which a run has only when measured with bench run --repeats k (k ≥ 2).";
    } else {
      p.textContent = "Of the " + both + " decode cell" + (both === 1 ? "" : "s") + " with a 95% " +
        "interval in both runs, " + apart + " differ significantly (the intervals do not overlap); " +
        (both - apart) + " are within noise.";
    }
    return p;
  }

  function scrollBox(label, table) {
    var box = el("div", "table-scroll");
    box.setAttribute("role", "region");
    box.setAttribute("tabindex", "0");
    box.setAttribute("aria-label", label);
    box.appendChild(table);
    return box;
  }

  function matrixTable(pa, pb, metric, caption) {
    var aligned = alignContexts(pa, pb);
    var levels = {};
    pa.levels.concat(pb.levels).forEach(function (n) { levels[n] = 1; });
    levels = Object.keys(levels).map(Number).sort(function (x, y) { return x - y; });
    var table = el("table", "matrix ab sticky-first");
    table.appendChild(el("caption", "sub", caption));
    var head = table.createTHead().insertRow();
    head.appendChild(el("th", null, "Context"));
    levels.forEach(function (n) { head.appendChild(el("th", "num", String(n))); });
    var body = table.createTBody();
    aligned.rows.forEach(function (r) {
      var tr = body.insertRow();
      var th = el("th", null, r.label);
      th.scope = "row";
      tr.appendChild(th);
      levels.forEach(function (n) {
        tr.appendChild(compareCell(pa.cells[r.a + "x" + n], pb.cells[r.b + "x" + n], metric));
      });
    });
    return { table: table, note: pairNote(aligned.paired, pa, pb) };
  }

  function prefillTable(pa, pb, metric) {
    var aligned = alignContexts(pa, pb);
    var table = el("table", "matrix ab sticky-first");
    var caption = "Prefill: " + METRICS.prefill[metric] + " by context";
    /* A caption is as narrow as this short table: the visible title sits above it. */
    table.appendChild(el("caption", "visually-hidden", caption));
    var head = table.createTHead().insertRow();
    aligned.rows.forEach(function (r) { head.appendChild(el("th", "num", r.label)); });
    var tr = table.createTBody().insertRow();
    aligned.rows.forEach(function (r) {
      tr.appendChild(compareCell(r.a === null ? null : pa.first[r.a], r.b === null ? null : pb.first[r.b], metric));
    });
    return { table: table, note: pairNote(aligned.paired, pa, pb), title: el("p", "sub", caption) };
  }

  /* Median and geometric-mean change over the decode cells Valid in both runs (contexts
     paired as in the table), and how many cells that is. */
  function summaryLine(pa, pb, metric, label) {
    var pairs = [];
    alignContexts(pa, pb).rows.forEach(function (r) {
      if (r.a === null || r.b === null) return;
      pa.levels.forEach(function (n) {
        var ca = pa.cells[r.a + "x" + n], cb = pb.cells[r.b + "x" + n];
        if (!ca || !cb || ca.status !== STATUS.valid || cb.status !== STATUS.valid) return;
        if (ca[metric] === null || cb[metric] === null) return;
        pairs.push([ca[metric], cb[metric]]);
      });
    });
    var sum = window.SpeedMatrixExplore.summary(pairs);
    var p = el("p", "ab-summary");
    if (!sum.n) {
      p.textContent = "No decode cell is Valid in both runs with a " + label + ", so there is no summary of the change.";
      return p;
    }
    /* Not coloured: a median or mean over cells is never called significant. */
    function part(word, v) {
      return [document.createTextNode(word), el("strong", null, fmtPct(v * 100))];
    }
    var bits = [document.createTextNode(label + " from A to B over the " + sum.n + " decode cell" +
      (sum.n === 1 ? "" : "s") + " Valid in both runs: ")]
      .concat(part("median change ", sum.median), part(", geometric-mean change ", sum.geomean),
              [document.createTextNode(HIGHER[metric] ? "." : " (lower is better).")]);
    bits.forEach(function (b) { p.appendChild(b); });
    return p;
  }

  /* Both runs' curves (per request tok/s against total tok/s, per GPU when both runs have
     a GPU count) at their largest shared context, drawn with the explorer's chart. */
  function curvesChart(slugA, slugB, rows) {
    var ex = window.SpeedMatrixExplore;
    if (!ex || !ex.data || typeof window.vegaEmbed !== "function") return null;
    var idx = {};
    ex.data.runs.forEach(function (r, i) { idx[r.slug] = i; });
    var ia = idx[slugA], ib = idx[slugB];
    if (ia === undefined || ib === undefined) return null;
    var gpu = ex.data.runs[ia].gpus && ex.data.runs[ib].gpus ? "gpu" : "total";
    /* The largest shared context where both runs draw a curve (two points or more),
       else the largest where both have a point. */
    var shared = rows.filter(function (r) { return r.a !== null && r.b !== null; }).reverse();
    var tries = shared.map(function (r) { return [r, 2]; }).concat(shared.map(function (r) { return [r, 1]; }));
    for (var k = 0; k < tries.length; k++) {
      var row = tries[k][0], least = tries[k][1];
      var a = ex.curves([ia], row.a, "tradeoff", gpu);
      var b = ex.curves([ib], row.b, "tradeoff", gpu, ex.data.colors.slice(1));
      if (a.rows.length < least || (ia !== ib && b.rows.length < least)) continue;
      if (ia === ib) b = { rows: [], lines: [], names: [], colors: [] };  /* one run against itself: one line */
      /* keyed by slug, named by the runs' distinct names (two runs of one setup differ by date) */
      var both = { rows: a.rows.concat(b.rows), lines: a.lines.concat(b.lines),
                   names: a.names.map(function (n) { return "A: " + n; })
                     .concat(b.names.map(function (n) { return "B: " + n; })),
                   colors: a.colors.concat(b.colors) };
      var yTitle = gpu === "gpu" ? "Total tok/s per GPU" : "Total tok/s";
      var fig = el("figure", "chart ab-chart");
      fig.id = "ab-chart";
      var cap = el("figcaption");
      cap.appendChild(el("strong", null, "A and B at " + row.label));
      cap.appendChild(el("span", null, " Per request tok/s against " + (gpu === "gpu" ? "total tok/s per GPU" : "total tok/s") +
        ", one line per run through its concurrency levels (labels: requests at once), at the largest context where both runs have a curve; up and right is better."));
      fig.appendChild(cap);
      var target = el("div", "chart-live");
      fig.appendChild(target);
      var spec = ex.spec("tradeoff", false, false, both, [], ["Per request tok/s", yTitle]);
      window.setTimeout(function () {  /* once in the page: the box has a width to fit to */
        ex.draw(target, spec).then(function () { fig.classList.add("is-live"); })
          .catch(function (err) { console.error("A/B chart: " + err); });
      }, 0);
      return fig;
    }
    return null;
  }

  /* A run's distinct name: its picker option's text (site_builder/names.py). */
  function nameOf(slug) {
    for (var i = 0; i < selA.options.length; i++) {
      if (selA.options[i].value === slug) return selA.options[i].textContent;
    }
    return "";
  }

  function runLink(label, run, slug) {
    var p = el("p");
    p.appendChild(el("strong", null, label + " "));
    var a = el("a", null, nameOf(slug) || run.title);
    a.href = run.page;
    p.appendChild(a);
    p.appendChild(el("span", "muted", " · " + [run.engine, run.run_id].filter(Boolean).join(" · ")));
    return p;
  }

  /* The choice in the address; an id no run has is reported, never replaced by another run.
     An address naming one side only (a run page's "Compare with another run") leaves
     the other unpicked: the page's default pair could put the run against itself. */
  function state() {
    var params = window.SpeedMatrixAddress.params();
    var unknown = [];
    if (params.get("a") && !params.get("b")) selB.selectedIndex = -1;
    if (params.get("b") && !params.get("a")) selA.selectedIndex = -1;
    [["A", params.get("a"), selA], ["B", params.get("b"), selB]].forEach(function (x) {
      if (!x[1]) return;
      if (bySlug[x[1]]) x[2].value = bySlug[x[1]].slug;
      else { unknown.push(x); x[2].selectedIndex = -1; }
    });
    var m = params.get("m");
    if (m && HIGHER.hasOwnProperty(m)) selM.value = m;
    return { a: selA.value, b: selB.value, m: selM.value, unknown: unknown };
  }

  function showUnknown(unknown) {
    result.textContent = "";
    unknown.forEach(function (x) {
      result.appendChild(el("p", "notice ab-unknown", "Unknown run id for " + x[0] + " in the address: \u201c" +
        x[1] + "\u201d. No run of this site has that id or folder name; pick a run above."));
    });
  }

  function render() {
    var s = state();
    var href = "compare.html#a=" + encodeURIComponent(s.a) + "&b=" + encodeURIComponent(s.b) + "&m=" + encodeURIComponent(s.m);
    permalink.href = href;
    if (s.unknown.length) { showUnknown(s.unknown); return; }
    if (!s.a || !s.b) {
      result.textContent = !s.a && !s.b ? "Pick two runs." : "Pick run " + (s.a ? "B" : "A") +
        " to compare with " + nameOf(s.a || s.b) + ".";
      return;
    }
    result.textContent = "";
    result.appendChild(el("p", "muted", "Loading\u2026"));
    Promise.all([loadRun(s.a), loadRun(s.b)]).then(function (runs) {
      result.textContent = "";
      result.appendChild(runLink("A", runs[0], s.a));
      result.appendChild(runLink("B", runs[1], s.b));
      var label = selM.options[selM.selectedIndex].textContent;
      var pa0 = cellsOf(runs[0], "decode"), pb0 = cellsOf(runs[1], "decode");
      result.appendChild(summaryLine(pa0, pb0, s.m, label));
      result.appendChild(noiseLine(pa0, pb0, s.m));
      var curvesFig = curvesChart(s.a, s.b, alignContexts(pa0, pb0).rows);
      if (curvesFig) result.appendChild(curvesFig);
      var decode = matrixTable(cellsOf(runs[0], "decode"), cellsOf(runs[1], "decode"), s.m,
        "Sustained decode: change in " + label + " from A to B · rows are context length, columns are simultaneous requests");
      var hint = el("p", "scroll-hint", "Scroll sideways for more columns \u2192");
      hint.setAttribute("aria-hidden", "true");
      result.appendChild(hint);
      result.appendChild(scrollBox("Sustained decode, A and B", decode.table));
      if (decode.note) result.appendChild(decode.note);
      if (runs[0].telemetry && runs[1].telemetry) {  /* energy: only when both runs measured it */
        var kw = matrixTable(cellsOf(runs[0], "decode"), cellsOf(runs[1], "decode"), "tok_s_per_kw",
          "Sustained decode: change in total tok/s per kW of GPU power from A to B");
        var kwBox = scrollBox("Tok/s per kW, A and B", kw.table);
        kwBox.id = "ab-per-kw";
        result.appendChild(kwBox);
      }
      if (METRICS.prefill.hasOwnProperty(s.m)) {
        var pa = cellsOf(runs[0], "prefill"), pb = cellsOf(runs[1], "prefill");
        if (pa.contexts.length || pb.contexts.length) {
          var prefill = prefillTable(pa, pb, s.m);
          result.appendChild(prefill.title);
          result.appendChild(scrollBox("Prefill, A and B", prefill.table));
          if (prefill.note) result.appendChild(prefill.note);
        }
      }
    }).catch(function (err) {
      result.textContent = "Could not load the runs' data: " + err.message;
      console.error(err);
    });
  }

  function onChange() {
    var href = "#a=" + encodeURIComponent(selA.value) + "&b=" + encodeURIComponent(selB.value) + "&m=" + encodeURIComponent(selM.value);
    window.SpeedMatrixAddress.replace(href.slice(1));
    render();
  }

  [selA, selB, selM].forEach(function (s) { s.addEventListener("change", onChange); });
  document.getElementById("ab-swap").addEventListener("click", function () {
    var t = selA.value;
    selA.value = selB.value;
    selB.value = t;
    onChange();
  });
  window.addEventListener("hashchange", render);
  render();
})();
