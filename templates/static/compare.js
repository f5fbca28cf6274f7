/* A/B view of any two runs: change per cell in percent, kept in the address
   (compare.html#a=RUN&b=RUN&m=metric). Data comes from local script files
   (data/index.js and runs/<slug>/data.js) so it works from file:// too. */
(function () {
  "use strict";
  var index = window.SPEED_MATRIX_INDEX;
  var result = document.getElementById("ab-result");
  var selA = document.getElementById("ab-a");
  var selB = document.getElementById("ab-b");
  var selM = document.getElementById("ab-m");
  var permalink = document.getElementById("ab-permalink");
  if (!index || !result) return;
  window.SPEED_MATRIX_RUNS = window.SPEED_MATRIX_RUNS || {};
  var bySlug = {};
  index.runs.forEach(function (r) { bySlug[r.slug] = r; bySlug[r.run_id] = bySlug[r.run_id] || r; });
  var pending = {};

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

  /* Formats: the same rules as site_builder/formats.py. */
  function half(v, d) { var k = Math.pow(10, d); return Math.floor(Math.abs(v) * k + 0.5 + 1e-9) / k * (v < 0 ? -1 : 1); }
  function group(v, d) { return v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }); }
  function trim(t) { return t.replace(/\.0$/, ""); }
  var FORMAT = {
    tok: function (v) {
      var small = half(v, 1);
      if (Math.abs(small) < 10000) return group(small, 1);
      var k = half(v / 1000, 1);
      if (Math.abs(k) < 1000) return trim(group(k, 1)) + "K";
      return trim(group(half(v / 1e6, 1), 1)) + "M";
    },
    ttft: function (v) { return Math.abs(half(v, 1)) < 10 ? group(half(v, 1), 1) + " ms" : group(half(v, 0), 0) + " ms"; },
    tbt: function (v) { return group(half(v, 1), 1) + " ms"; }
  };
  var METRICS = {
    total_tok_s: { fmt: FORMAT.tok, higher: true },
    per_request_tok_s: { fmt: FORMAT.tok, higher: true },
    ttft_ms: { fmt: FORMAT.ttft, higher: false },
    tbt_ms: { fmt: FORMAT.tbt, higher: false }
  };
  var STATUS = { valid: "Valid", over_capacity: "Over capacity", requests_queued: "Requests queued",
    looped: "Looped", error: "Error", pending: "Not measured" };
  function ctxLabel(n) { return n < 1024 ? String(n) : Math.floor(n / 1024) + "K"; }
  function fmtPct(p) {
    var r = half(p, 1);
    if (r === 0) return "0.0%";
    return (r > 0 ? "+" : "\u2212") + group(Math.abs(r), 1) + "%";
  }

  function cellsOf(run, phase) {
    var f = run.fields;
    var out = {};
    run.cells.forEach(function (row) {
      var c = {};
      f.forEach(function (name, i) { c[name] = row[i]; });
      if (c.phase === phase) out[c.context + "x" + c.concurrency] = c;
    });
    return out;
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function hasNumbers(c) { return c && (c.status === "valid" || c.status === "requests_queued"); }

  function compareCell(ca, cb, metric) {
    var td = el("td", "cell");
    var m = METRICS[metric];
    var va = hasNumbers(ca) ? ca[metric] : null;
    var vb = hasNumbers(cb) ? cb[metric] : null;
    if (va === null || va === undefined || vb === null || vb === undefined) {
      td.classList.add("st-over_capacity");
      var sa = ca ? (hasNumbers(ca) && va !== null ? m.fmt(va) : STATUS[ca.status] || ca.status) : "\u2014";
      var sb = cb ? (hasNumbers(cb) && vb !== null ? m.fmt(vb) : STATUS[cb.status] || cb.status) : "\u2014";
      td.appendChild(el("span", "pair", "A " + sa));
      td.appendChild(el("span", "pair", "B " + sb));
      return td;
    }
    var change = va === 0 ? null : (vb - va) / va * 100;
    var delta = el("span", "delta", change === null ? "\u2014" : fmtPct(change));
    if (change !== null && half(change, 1) !== 0) {
      var good = m.higher ? change > 0 : change < 0;
      delta.classList.add(good ? "better" : "worse");
    }
    td.appendChild(delta);
    td.appendChild(el("span", "pair", "A " + m.fmt(va)));
    td.appendChild(el("span", "pair", "B " + m.fmt(vb)));
    return td;
  }

  function keysOf(a, b) {
    var ctx = {}, lv = {};
    [a, b].forEach(function (cells) {
      Object.keys(cells).forEach(function (k) { ctx[cells[k].context] = 1; lv[cells[k].concurrency] = 1; });
    });
    var num = function (x, y) { return x - y; };
    return {
      contexts: Object.keys(ctx).map(Number).sort(num),
      levels: Object.keys(lv).map(Number).sort(num)
    };
  }

  function matrixTable(a, b, metric, caption) {
    var k = keysOf(a, b);
    var table = el("table", "matrix ab");
    table.appendChild(el("caption", "sub", caption));
    var head = table.createTHead().insertRow();
    head.appendChild(el("th", null, "Context"));
    k.levels.forEach(function (n) { head.appendChild(el("th", "num", String(n))); });
    var body = table.createTBody();
    k.contexts.forEach(function (ctx) {
      var tr = body.insertRow();
      var th = el("th", null, ctxLabel(ctx));
      th.scope = "row";
      tr.appendChild(th);
      k.levels.forEach(function (n) { tr.appendChild(compareCell(a[ctx + "x" + n], b[ctx + "x" + n], metric)); });
    });
    return table;
  }

  function prefillTable(a, b, metric) {
    var k = keysOf(a, b);
    var table = el("table", "matrix ab");
    table.appendChild(el("caption", "sub", metric === "ttft_ms" ? "Prefill: cold TTFT by context" : "Prefill: prompt tok/s by context"));
    var head = table.createTHead().insertRow();
    k.contexts.forEach(function (ctx) { head.appendChild(el("th", "num", ctxLabel(ctx))); });
    var tr = table.createTBody().insertRow();
    k.contexts.forEach(function (ctx) {
      var key = Object.keys(a).concat(Object.keys(b)).filter(function (x) { return x.indexOf(ctx + "x") === 0; })[0];
      tr.appendChild(compareCell(a[key], b[key], metric));
    });
    return table;
  }

  function runLink(label, run) {
    var p = el("p");
    p.appendChild(el("strong", null, label + " "));
    var a = el("a", null, run.title);
    a.href = run.page;
    p.appendChild(a);
    p.appendChild(el("span", "muted", " · " + [run.engine, run.run_id].filter(Boolean).join(" · ")));
    return p;
  }

  function state() {
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    var a = params.get("a"), b = params.get("b"), m = params.get("m");
    if (a && bySlug[a]) selA.value = bySlug[a].slug;
    if (b && bySlug[b]) selB.value = bySlug[b].slug;
    if (m && METRICS[m]) selM.value = m;
    return { a: selA.value, b: selB.value, m: selM.value };
  }

  function render() {
    var s = state();
    var href = "compare.html#a=" + encodeURIComponent(s.a) + "&b=" + encodeURIComponent(s.b) + "&m=" + encodeURIComponent(s.m);
    permalink.href = href;
    if (!s.a || !s.b) { result.textContent = "Pick two runs."; return; }
    Promise.all([loadRun(s.a), loadRun(s.b)]).then(function (runs) {
      result.textContent = "";
      result.appendChild(runLink("A", runs[0]));
      result.appendChild(runLink("B", runs[1]));
      var label = selM.options[selM.selectedIndex].textContent;
      var scroll = el("div", "table-scroll");
      scroll.appendChild(matrixTable(cellsOf(runs[0], "decode"), cellsOf(runs[1], "decode"), s.m,
        "Sustained decode: change in " + label + " from A to B · rows are context length, columns are simultaneous requests"));
      result.appendChild(scroll);
      if (s.m === "total_tok_s" || s.m === "ttft_ms") {
        var pa = cellsOf(runs[0], "prefill"), pb = cellsOf(runs[1], "prefill");
        if (Object.keys(pa).length || Object.keys(pb).length) {
          var scroll2 = el("div", "table-scroll");
          scroll2.appendChild(prefillTable(pa, pb, s.m));
          result.appendChild(scroll2);
        }
      }
    }).catch(function (err) {
      result.textContent = "Could not load the runs' data: " + err.message;
      console.error(err);
    });
  }

  function onChange() {
    var href = "#a=" + encodeURIComponent(selA.value) + "&b=" + encodeURIComponent(selB.value) + "&m=" + encodeURIComponent(selM.value);
    window.history.replaceState(null, "", window.location.href.split("#")[0] + href);
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
