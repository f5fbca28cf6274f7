/* The explorer (explore.html): per-request tok/s against total tok/s (per GPU), one
   curve per run through its concurrency levels, the Pareto frontier dashed; or TTFT
   against concurrency. The view is kept in the address
   (explore.html#family=SLUG&ctx=TOKENS&y=gpu|total&view=tradeoff|ttft&logx=1&logy=1,
   and the run filters gpu=, engine=, quantization=, from=YYYY-MM-DD, to=): each change
   is a step in the browser's history, so back and forward walk through the views.
   Runs are keyed by slug and named by their distinct name (site_builder/names.py);
   a view's runs are ranked by its measure, the best ten coloured, the rest grey, and
   listed under the plot (site.js SpeedMatrixLegend: search, click to highlight).
   Everything comes from the build (site_builder/explore.py): the points with their
   texts already formatted, the frontier of every view, and the chart templates
   compiled from Altair (site_builder/explorecharts.py), whose holes are filled here as
   chartkit.Template.fill does. The explorer has the index in its page (runs,
   families, frontiers, templates, where each file of points lies) and loads only
   the files of points its view draws, one per family and context, with <script> tags
   (file:// pages cannot fetch(); site_builder/exploredata.py); the A/B page loads the
   whole data/explore.js and uses `curves`, `spec`, `draw` and `summary`.
   The percentile (pct=p99, event sm-tail) takes per-request tok/s and TTFT at that
   level; "under latency limits" (under=1; the limits: slo.js, slo=, event sm-slo)
   draws the cells missing them faint and the frontier through the Valid cells meeting
   them, by explore.pareto_front's rule (repeated here: the reader picks the limits). */
(function () {
  "use strict";
  /* The whole data (data/explore.js: the A/B page), else the explorer's index, in its
     page (site_builder/exploredata.py), whose points are loaded as views need them. */
  var INDEX = document.getElementById("explore-index");
  var DATA = window.SPEED_MATRIX_EXPLORE || (INDEX ? JSON.parse(INDEX.textContent) : null);
  var ALL = "*";
  var FRONTIER_COLOR = "#1f2328";
  var COST = "Cost per 1M output tokens";  /* site_builder/explore.py COST_FIELDS */
  /* The statuses drawn hollow (numbers kept, but flagged): rundir/statuses.py. */
  var STATUS = JSON.parse(document.getElementById("status-rules").textContent);

  var ADDRESS = window.SpeedMatrixAddress;
  /* A template's JSON with every hole filled and the rows in its datasets (rules.js). */
  function fill(text, values, datasets) { return window.SpeedMatrixRules.fill(text, values, datasets); }

  function field(name) { return DATA.fields.indexOf(name); }

  /* ---- the points, by family and context, as views need them -------------- */
  /* The site's root, from this script's own address (static/explore.<hash>.js). */
  var ROOT = document.currentScript ? document.currentScript.src.replace(/static\/[^\/]*$/, "") : "";
  var CHUNKS = "SPEED_MATRIX_EXPLORE_CHUNKS";  /* exploredata.CHUNKS */
  var loaded = {}, waiting = {}, familyOf = {}, runsOf = {};
  if (DATA && DATA.chunks) {
    DATA.points = DATA.points || new Array(DATA.total);  /* filled file by file */
    DATA.families.forEach(function (f) {
      runsOf[f.slug] = f.runs;
      f.runs.forEach(function (i) { familyOf[i] = f.slug; });
    });
  }

  /* A loaded file's points into DATA.points at its place, each point's run made the
     site's (the file names it by its place in the family). False when unreadable. */
  function take(c) {
    var rows = (window[CHUNKS] || {})[c.id];
    if (!rows || rows.length !== c.count) return false;
    var runs = runsOf[c.family];
    rows.forEach(function (p, k) {
      p[0] = runs[p[0]];
      DATA.points[c.start + k] = p;
    });
    delete window[CHUNKS][c.id];
    loaded[c.id] = true;
    return true;
  }

  function loadChunk(c, done) {
    if (loaded[c.id]) { done(null); return; }
    if (waiting[c.id]) { waiting[c.id].push(done); return; }
    waiting[c.id] = [done];
    var s = document.createElement("script");
    s.src = ROOT + c.src;
    function end(err) {
      var calls = waiting[c.id];
      delete waiting[c.id];
      calls.forEach(function (f) { f(err); });
    }
    s.onload = function () { end(take(c) ? null : c.src + ": not the points named"); };
    s.onerror = function () { end(c.src); };
    document.head.appendChild(s);
  }

  /* Make sure the points of these runs at one context are here: true when they are
     (nothing to wait for), else false, and done(error or null) once they are. */
  function need(runIdx, ctx, done) {
    if (!DATA.chunks) return true;  /* the whole data: every point is here */
    var fams = {};
    runIdx.forEach(function (i) { fams[familyOf[i]] = 1; });
    var todo = DATA.chunks.filter(function (c) {
      return fams[c.family] && c.context === ctx && !loaded[c.id];
    });
    if (!todo.length) return true;
    var left = todo.length, failed = null;
    todo.forEach(function (c) {
      loadChunk(c, function (err) {
        failed = failed || err;
        if (--left === 0) done(failed);
      });
    });
    return false;
  }

  /* The percentile (index in DATA.levels; 0: the median) and the limits kept to
     (null: not under limits), as the page's address says. */
  var look = { li: 0, limits: null };

  function at(p, key, raw) {
    var lv = p[field("levels")];
    return look.li > 0 && lv ? lv[key][look.li] : p[field(raw)];
  }

  function dim(p) {
    return !!(look.limits && window.SpeedMatrixSlo &&
              !window.SpeedMatrixSlo.meets(p[field("levels")], look.limits));
  }

  /* A point's row for the chart: x and y for the view, the tooltip texts. */
  function row(p, view, yMode) {
    var r = { run: DATA.runs[p[0]].name, key: DATA.runs[p[0]].slug, concurrency: p[field("concurrency")],
              queued: STATUS.flagged.indexOf(p[field("status")]) >= 0, dim: dim(p) };
    ["Context", "Requests at once", "Per request tok/s", "Total tok/s", "Per GPU tok/s", "TTFT",
     "Status"].forEach(function (k) { r[k] = p[field(k)]; });
    var lv = p[field("levels")];
    if (look.li > 0 && lv) {
      r["Per request tok/s"] = lv.texts.per_request[look.li];
      r.TTFT = lv.texts.ttft[look.li];
    }
    /* only a build with a price table has the cost's text (and a tooltip line for it) */
    if (field(COST) >= 0) r[COST] = p[field(COST)];
    if (view === "ttft") {
      r.x = p[field("concurrency")];
      r.y = at(p, "ttft", "ttft");
    } else {
      r.x = at(p, "per_request", "per_request");
      r.y = p[field(yMode === "gpu" ? "per_gpu" : "total")];
    }
    return r;
  }

  /* explore.pareto_front (rules.js). */
  function paretoFront(pts) { return window.SpeedMatrixRules.paretoFront(pts); }

  /* The frontier's point indices of a view: the build's at the median without limits,
     else over the Valid points meeting the limits, at the chosen percentile. */
  function frontierOf(scope, runIdx, ctx, mode) {
    if (look.li === 0 && !look.limits && !look.filtered) {
      return DATA.frontiers[scope + "|" + ctx + "|" + mode] || [];
    }
    var want = {};
    runIdx.forEach(function (i) { want[i] = 1; });
    var yKey = field(mode === "gpu" ? "per_gpu" : "total");
    var have = [];
    DATA.points.forEach(function (p, k) {
      if (want[p[0]] && p[1] === ctx && p[field("status")] === DATA.valid && p[yKey] !== null &&
          !dim(p) && at(p, "per_request", "per_request") !== null) have.push(k);
    });
    var xy = have.map(function (k) {
      return [at(DATA.points[k], "per_request", "per_request"), DATA.points[k][yKey]];
    });
    return paretoFront(xy).map(function (j) { return have[j]; });
  }

  /* The curves of some runs at one context: rows (the worst run's first, so the best
     are drawn on top), the runs drawn best first (highest y; lowest TTFT), their keys
     (`lines`), names and colours: the palette (or `colors`) for the best ten, grey
     after (chartkit.run_colors). */
  function curves(runIdx, context, view, yMode, colors) {
    var want = {};
    runIdx.forEach(function (i) { want[i] = 1; });
    var rows = [], best = {}, owner = [];
    DATA.points.forEach(function (p) {
      if (!want[p[0]] || p[1] !== context) return;
      var r = row(p, view, yMode);
      if (r.x === null || r.y === null || r.x <= 0 || r.y <= 0) return;
      rows.push(r);
      owner.push(p[0]);
      var b = best[p[0]];
      best[p[0]] = b === undefined ? r.y : (view === "ttft" ? Math.min(b, r.y) : Math.max(b, r.y));
    });
    var drawn = runIdx.filter(function (i) { return best.hasOwnProperty(i); });
    drawn.sort(function (a, b) { return view === "ttft" ? best[a] - best[b] : best[b] - best[a]; });
    var rank = {};
    drawn.forEach(function (i, k) { rank[i] = k; });
    var palette = colors || DATA.colors;
    var top = DATA.colors.length;
    var order = rows.map(function (_, k) { return k; });
    order.sort(function (a, b) { return (rank[owner[b]] - rank[owner[a]]) || (a - b); });
    rows = order.map(function (k) {
      rows[k].top = rank[owner[k]] < top;
      return rows[k];
    });
    return { rows: rows, runs: drawn,
             lines: drawn.map(function (i) { return DATA.runs[i].slug; }),
             names: drawn.map(function (i) { return DATA.runs[i].name; }),
             colors: drawn.map(function (_, k) {
               return k < top ? palette[k % palette.length] : DATA.rest_color;
             }) };
  }

  function spec(view, logx, logy, drawn, frontier, titles) {
    if (view === "tradeoff" && !(frontier && frontier.length)) view = "curves";
    var key = view + "|" + (logx ? 1 : 0) + (logy ? 1 : 0);
    var data = { points: drawn.rows };
    if (view === "tradeoff") data.frontier = frontier;
    var out = fill(DATA.templates[key], { lines: drawn.lines, colors: drawn.colors,
                                          x_title: titles[0], y_title: titles[1] }, data);
    var top = DATA.colors.length;
    out.usermeta = { legend: { title: "Run", rest: Math.max(0, drawn.lines.length - top),
      items: drawn.lines.map(function (k, i) { return [k, drawn.names[i], drawn.colors[i]]; }) } };
    return out;
  }

  /* Median and geometric-mean change from A to B over (a, b) pairs with positive
     values, as fractions (0.1 = +10%); n: how many pairs count. */
  function summary(pairs) {
    var ratios = pairs.filter(function (p) { return p[0] > 0 && p[1] > 0; })
      .map(function (p) { return p[1] / p[0]; }).sort(function (x, y) { return x - y; });
    var n = ratios.length;
    if (!n) return { n: 0, median: null, geomean: null };
    var mid = n % 2 ? ratios[(n - 1) / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    var logs = ratios.reduce(function (s, r) { return s + Math.log(r); }, 0);
    return { n: n, median: mid - 1, geomean: Math.exp(logs / n) - 1 };
  }

  /* vega-embed makes its box inline-block: the box is given its figure's width (whole
     pixels, as site.js does) so a "container" width has something to fit to. */
  function fitBox(target) {
    var fig = target.parentNode;
    target.style.width = Math.floor(fig.getBoundingClientRect().width) + "px";
    if (!target._fitting) {
      target._fitting = true;
      window.addEventListener("resize", function () { fitBox(target); });
    }
  }

  function draw(target, theSpec) {
    if (target._view) { target._view.finalize(); target._view = null; }
    target.textContent = "";
    fitBox(target);
    return window.vegaEmbed(target, theSpec, { actions: false, renderer: "svg", mode: "vega-lite" })
      .then(function (result) {
        target._view = result;
        if (window.SpeedMatrixLegend) window.SpeedMatrixLegend.attach(target.parentNode, theSpec, result);
        return result;
      });
  }

  window.SpeedMatrixExplore = DATA ? { curves: curves, spec: spec, draw: draw, summary: summary,
                                       need: need, data: DATA } : { summary: summary };

  /* ---- the explorer page ------------------------------------------------ */
  var form = document.getElementById("explore-form");
  if (!form || !DATA) return;
  var fig = document.getElementById("explore-chart");
  var selFamily = document.getElementById("ex-family");
  var selCtx = document.getElementById("ex-ctx");
  var selY = document.getElementById("ex-y");
  var selView = document.getElementById("ex-view");
  var boxX = document.getElementById("ex-logx");
  var boxY = document.getElementById("ex-logy");
  var boxUnder = document.getElementById("ex-under");
  /* The run filters: [address key, control, the run record's field]. */
  var FILTERS = [["gpu", "ex-gpu", "gpu"], ["engine", "ex-engine", "engine"],
                 ["quantization", "ex-quantization", "quantization"],
                 ["from", "ex-from", "date"], ["to", "ex-to", "date"]].map(function (f) {
    return { key: f[0], el: document.getElementById(f[1]), field: f[2] };
  }).filter(function (f) { return f.el; });
  var clear = document.getElementById("ex-clear");
  var DATE = /^\d{4}-\d{2}-\d{2}$/;
  var sloBox = document.getElementById("ex-slo");
  var OWN = ["family", "ctx", "y", "view", "logx", "logy", "under", "gpu", "engine", "quantization",
             "from", "to"];  /* this page's keys */
  var permalink = document.getElementById("ex-permalink");
  var caption = fig.querySelector("figcaption span");
  var title = fig.querySelector("figcaption strong");
  var note = document.getElementById("ex-note");
  Array.prototype.forEach.call(document.querySelectorAll("[data-needs-js]"), function (e) {
    e.hidden = false;
  });

  function members(scope) {
    if (scope === ALL) return DATA.runs.map(function (_, i) { return i; });
    for (var i = 0; i < DATA.families.length; i++) {
      if (DATA.families[i].slug === scope) return DATA.families[i].runs;
    }
    return null;
  }

  function fillContexts(scope, wanted) {
    selCtx.textContent = "";
    (DATA.contexts[scope] || []).forEach(function (c) {
      var o = document.createElement("option");
      o.value = String(c);
      o.textContent = DATA.context_labels[String(c)];
      selCtx.appendChild(o);
    });
    if (wanted !== null) selCtx.value = String(wanted);
  }

  /* The view in the address, else the build's default; names no run has are said. */
  function state() {
    var params = ADDRESS.params();
    var d = DATA["default"];
    var problems = [];
    var scope = params.get("family") || d.family;
    if (!members(scope)) { problems.push("family \u201c" + scope + "\u201d"); scope = d.family; }
    var ctx = params.get("ctx") ? Number(params.get("ctx")) : DATA.best_context[scope];
    if (DATA.contexts[scope].indexOf(ctx) < 0) {
      if (params.get("ctx")) problems.push("context \u201c" + params.get("ctx") + "\u201d");
      ctx = DATA.best_context[scope];
    }
    var y = params.get("y") === "total" || params.get("y") === "gpu" ? params.get("y") : d.y;
    var view = params.get("view") === "ttft" ? "ttft" : "tradeoff";
    var li = Math.max(0, (DATA.levels || []).indexOf(params.get("pct")));
    var under = params.get("under") === "1";
    /* A filter value no run has (or a date that is no date) is said, and not applied. */
    var filters = {};
    FILTERS.forEach(function (f) {
      var v = params.get(f.key);
      if (!v) return;
      var ok = f.field === "date" ? DATE.test(v) : DATA.runs.some(function (r) { return r[f.field] === v; });
      if (ok) filters[f.key] = v;
      else problems.push(f.key + " \u201c" + v + "\u201d");
    });
    var limits = under && window.SpeedMatrixSlo ? window.SpeedMatrixSlo.current(DATA.slo) : null;
    return { family: scope, ctx: ctx, y: y, view: view, logx: params.get("logx") === "1",
             logy: params.get("logy") === "1", under: under, li: li, limits: limits,
             filters: filters, problems: problems };
  }

  function show(s) {
    selFamily.value = s.family;
    fillContexts(s.family, s.ctx);
    selY.value = s.y;
    selView.value = s.view;
    boxX.checked = s.logx;
    boxY.checked = s.logy;
    boxUnder.checked = s.under;
    sloBox.hidden = !s.under;
    selY.disabled = s.view === "ttft";
    FILTERS.forEach(function (f) { f.el.value = s.filters[f.key] || ""; });
    if (clear) clear.hidden = !Object.keys(s.filters).length;
  }

  /* Whether a run passes the filters (the date range includes both ends). */
  function passes(run, filters) {
    return FILTERS.every(function (f) {
      var v = filters[f.key];
      if (!v) return true;
      if (f.key === "from") return !!run.date && run.date >= v;
      if (f.key === "to") return !!run.date && run.date <= v;
      return run[f.field] === v;
    });
  }

  /* Names for a note: the first few, then how many more. */
  function some(names) {
    var MAX = 8;
    if (names.length <= MAX) return names.join("; ");
    return names.slice(0, MAX).join("; ") + " and " + (names.length - MAX) + " more";
  }

  function hash() {
    return "#family=" + encodeURIComponent(selFamily.value) + "&ctx=" + encodeURIComponent(selCtx.value) +
      "&y=" + selY.value + "&view=" + selView.value + "&logx=" + (boxX.checked ? 1 : 0) +
      "&logy=" + (boxY.checked ? 1 : 0) + (boxUnder.checked ? "&under=1" : "") +
      FILTERS.map(function (f) {
        return f.el.value ? "&" + f.key + "=" + encodeURIComponent(f.el.value) : "";
      }).join("") + others();
  }

  /* The address's keys this page does not own (pct, slo: kept for the other scripts). */
  function others() {
    var p = ADDRESS.params();
    OWN.forEach(function (k) { p.delete(k); });
    var text = p.toString();
    return text ? "&" + text : "";
  }

  function render() {
    var s = state();
    var filtered = Object.keys(s.filters).length > 0;
    look = { li: s.li, limits: s.limits, filtered: filtered };
    show(s);
    permalink.href = "explore.html" + hash();
    shown = ADDRESS.hash();
    var ctx = Number(selCtx.value);
    var scoped = members(selFamily.value);
    var runs = scoped.filter(function (i) { return passes(DATA.runs[i], s.filters); });
    /* the view's points: its runs' files at this context, loaded once, then drawn */
    var asked = ADDRESS.hash();
    var here = need(runs, ctx, function (err) {
      if (err) { note.textContent = "Could not load this view's points (" + err + ")."; return; }
      if (ADDRESS.hash() === asked) render();
    });
    var texts = [];
    if (s.problems.length) texts.push("No run of this site has the " + s.problems.join(" or the ") +
      " in the address; showing the nearest view instead.");
    if (!here) {  /* the chart is not this view's until they come: not live meanwhile */
      fig.classList.remove("is-live");
      fig.setAttribute("aria-busy", "true");
      note.textContent = texts.concat(["Loading the points of " + runs.length + " run" +
        (runs.length === 1 ? "" : "s") + "\u2026"]).join(" ");
      return;
    }
    fig.removeAttribute("aria-busy");
    var gpuMode = s.view === "tradeoff" && selY.value === "gpu";
    var usable = gpuMode ? runs.filter(function (i) { return DATA.runs[i].gpus; }) : runs;
    var drawn = curves(usable, ctx, s.view, selY.value);
    var left = runs.filter(function (i) { return usable.indexOf(i) < 0; })
      .map(function (i) { return DATA.runs[i].name; });
    var absent = usable.filter(function (i) { return drawn.runs.indexOf(i) < 0; })
      .map(function (i) { return DATA.runs[i].name; });
    if (filtered) texts.push("Filters: " + runs.length + " of the " + scoped.length + " runs" +
      (selFamily.value === ALL ? "" : " of this family") + ".");
    if (left.length) texts.push("Left out of the per-GPU view (no GPU count): " + some(left) + ".");
    if (absent.length) texts.push("No numbers at " + DATA.context_labels[String(ctx)] + ": " + some(absent) + ".");
    note.textContent = texts.join(" ");
    var label = DATA.context_labels[String(ctx)] || "";
    var yTitle = gpuMode ? "Total tok/s per GPU" : "Total tok/s";
    var titles, frontier = [];
    if (s.view === "ttft") {
      titles = ["Requests at once", "TTFT" + (s.li ? " " + DATA.levels[s.li] : "") + " (ms)"];
      title.textContent = "TTFT against requests at once at " + label;
      caption.textContent = "One line per run; lower is better.";
    } else {
      titles = ["Per request tok/s" + (s.li ? " " + DATA.levels[s.li] : ""), yTitle];
      frontierOf(selFamily.value, runs, ctx, gpuMode ? "gpu" : "total")
        .forEach(function (k) { frontier.push(row(DATA.points[k], "tradeoff", gpuMode ? "gpu" : "total")); });
      title.textContent = "Per-request speed against " + (gpuMode ? "throughput per GPU" : "total throughput") + " at " + label;
      caption.textContent = "One line per run through its concurrency levels (labels: requests at once); " +
        "dashed dark line and rings: the Pareto frontier over Valid points (no other point is faster on both axes); " +
        "hollow points: requests queued; up and right is better." +
        (s.limits ? " Under " + window.SpeedMatrixSlo.text(s.limits) +
         ": faint points miss the limits; the frontier runs through those meeting them." : "");
    }
    if (drawn.runs.length > DATA.colors.length) {
      caption.textContent += " The best " + DATA.colors.length + " runs (" +
        (s.view === "ttft" ? "lowest TTFT" : "highest " + yTitle.toLowerCase().replace("gpu", "GPU")) + ") in colour, the other " +
        (drawn.runs.length - DATA.colors.length) + " grey: find one in the list under the chart " +
        "and click it to highlight it.";
    }
    var target = fig.querySelector(".chart-live");
    if (!target) {
      target = document.createElement("div");
      target.className = "chart-live";
      fig.appendChild(target);
    }
    if (!drawn.rows.length) {  /* never the default view's picture under another view's title */
      if (target._view) { target._view.finalize(); target._view = null; }
      target.textContent = "No run has numbers for this view.";
      var old = fig.querySelector(".chart-fallback");
      if (old) old.remove();
      fig.dataset.curves = "0";
      fig.classList.add("is-live");
      return;
    }
    fig.dataset.curves = String(drawn.runs.length);
    draw(target, spec(s.view, s.logx, s.logy, drawn, frontier, titles)).then(function () {
      var fallback = fig.querySelector(".chart-fallback");
      if (fallback) fallback.remove();
      fig.classList.add("is-live");
    }).catch(function (err) { console.error("explorer chart: " + err); });
  }

  function onChange(event) {
    var h = hash();
    /* Another family keeps the context when it has it, else opens at its own. */
    if (event && event.target === selFamily &&
        DATA.contexts[selFamily.value].indexOf(Number(selCtx.value)) < 0) {
      h = h.replace(/&ctx=[^&]*/, "");
    }
    /* a step in the history: back and forward walk through the views */
    ADDRESS.push(h);
    render();
  }

  /* Back, forward, or an edited address: draw what it says (once per address). */
  var shown = null;
  function onAddress() {
    if (ADDRESS.hash() === shown) return;
    render();
  }

  [selFamily, selCtx, selY, selView, boxX, boxY, boxUnder].concat(FILTERS.map(function (f) { return f.el; }))
    .forEach(function (e) { e.addEventListener("change", onChange); });
  if (clear) clear.addEventListener("click", function () {
    FILTERS.forEach(function (f) { f.el.value = ""; });
    onChange();
  });
  window.addEventListener("hashchange", onAddress);
  window.addEventListener("popstate", onAddress);
  document.addEventListener("sm-slo", render);
  document.addEventListener("sm-tail", render);
  render();
})();
