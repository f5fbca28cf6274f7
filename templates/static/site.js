/* Draws each page's charts with the vendored vega-embed and wires the copy buttons.
   Nothing here fetches anything: chart specs are inline, the bundle is local.
   Charts on the first screen are drawn first, one after another; the others when
   they come near the screen or the page is idle, whichever is first (each shows
   its build-time picture until then). A chart of many runs has its legend here
   (SpeedMatrixLegend, also used by explore.js and compare.js): the run list under
   the plot (spec usermeta.legend: site_builder/chartkit.py legend_meta).
   On a page with the percentile selector (tails.js) a chart's rows carry their
   latencies at every level and its spec their titles there (usermeta.tails): the
   chart is drawn at the level in the hash (#pct=p99) and redrawn on "sm-tail". */
(function () {
  "use strict";

  /* ---- the run list of a chart of runs -------------------------------------
     Best first (the build's or the page's ranking), the coloured runs then the grey
     ones; it scrolls past a few rows, has a search box past ten runs, and a click on
     a run highlights it in the chart (the spec's `hl` param), another click or
     Escape clears it. The plot keeps its height: the list is outside the chart. */
  var SEARCH_FROM = 10;

  function legendBox(fig, meta) {
    var box = document.createElement("div");
    box.className = "chart-legend";
    var items = meta.items;
    var head = document.createElement("p");
    head.className = "chart-legend-title";
    var shown = items.length - (meta.rest || 0);
    /* meta.rule: which runs the page colours (one colour per run in all its charts) */
    head.textContent = meta.title + "s (" + items.length + ")" +
      (meta.rest ? ": " + (meta.rule || "the best " + shown + " in colour") + ", the others grey" : "") +
      "; click one to highlight it";
    box.appendChild(head);
    var list = document.createElement("ul");
    var named = fig.querySelector("figcaption strong");
    list.setAttribute("aria-label", meta.title + "s of " + (named ? named.textContent : "the chart"));
    var buttons = [];
    items.forEach(function (item) {
      var li = document.createElement("li");
      var b = document.createElement("button");
      b.type = "button";
      b.setAttribute("data-key", item[0]);
      b.setAttribute("aria-pressed", "false");
      var sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = item[2];
      sw.setAttribute("aria-hidden", "true");
      var name = document.createElement("span");
      name.className = "name";
      name.textContent = item[1];
      b.appendChild(sw);
      b.appendChild(name);
      li.appendChild(b);
      list.appendChild(li);
      buttons.push(b);
    });
    if (items.length > SEARCH_FROM) {
      var label = document.createElement("label");
      label.className = "chart-legend-find";
      var input = document.createElement("input");
      input.type = "search";
      input.placeholder = "Find a run";
      input.setAttribute("aria-label", "Find a run in " + (fig.id || "the chart"));
      var count = document.createElement("span");
      count.className = "muted";
      count.setAttribute("aria-live", "polite");
      input.addEventListener("input", function () {
        var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
        var n = 0;
        buttons.forEach(function (b, i) {
          var text = items[i][1].toLowerCase();
          var hit = words.every(function (w) { return text.indexOf(w) >= 0; });
          b.parentNode.hidden = !hit;
          if (hit) n += 1;
        });
        count.textContent = words.length ? n + " of " + items.length : "";
      });
      label.appendChild(input);
      label.appendChild(count);
      box.appendChild(label);
    }
    box.appendChild(list);
    box._key = "";
    box._view = null;
    box._keys = items.map(function (x) { return x[0]; }).join("\n");
    function pick(key) {
      box._key = key;
      buttons.forEach(function (b) {
        b.setAttribute("aria-pressed", b.getAttribute("data-key") === key ? "true" : "false");
      });
      box.classList.toggle("has-pick", !!key);
      if (box._view) box._view.signal("hl", key).runAsync();
    }
    list.addEventListener("click", function (ev) {
      var b = ev.target.closest("button[data-key]");
      if (!b) return;
      var key = b.getAttribute("data-key");
      pick(box._key === key ? "" : key);
    });
    box.addEventListener("keydown", function (ev) {
      if (ev.key === "Escape" && box._key) pick("");
    });
    box._pick = pick;
    return box;
  }

  /* The chart's run list for its latest drawing (result: vega-embed's); a list of the
     same runs is kept (with its search and highlight), another replaces it. */
  function attachLegend(fig, spec, result) {
    var meta = spec.usermeta && spec.usermeta.legend;
    var box = fig.querySelector(".chart-legend");
    if (!meta || !meta.items || !meta.items.length) {
      if (box) box.remove();
      return null;
    }
    var keys = meta.items.map(function (x) { return x[0]; }).join("\n");
    if (!box || box._keys !== keys) {
      if (box) box.remove();
      box = legendBox(fig, meta);
      fig.appendChild(box);
    }
    box._view = result ? result.view : null;
    if (box._view && box._key) box._pick(box._key);
    return box;
  }

  window.SpeedMatrixLegend = { attach: attachLegend };

  // Room a concatenated chart needs beside its plots (axis labels and titles, padding).
  var CONCAT_GUTTER = 90;

  // Charts are drawn to their container's width, so their text keeps its size on a
  // phone. Single and layered charts use Vega-Lite's width "container" (vega-embed
  // refits them on a resize); a concatenated one (the timeline) gets its parts'
  // width here and is redrawn when the container's width changes.
  function fitConcat(spec, width) {
    var parts = spec.vconcat || spec.hconcat;
    if (!parts) return false;
    var each = Math.max(160, width - CONCAT_GUTTER);
    if (spec.hconcat) each = Math.max(160, Math.floor(each / parts.length) - CONCAT_GUTTER);
    parts.forEach(function (part) { part.width = each; });
    return true;
  }

  // One drawing of a chart into its box; a newer drawing (the level changed) wins.
  function embed(chart, spec) {
    var target = chart.target;
    var gen = chart.gen;
    var concat = fitConcat(spec, target.clientWidth);
    return window.vegaEmbed(target, spec, { actions: false, renderer: "svg", mode: "vega-lite" })
      .then(function (result) {
        if (gen !== chart.gen) { result.finalize(); return false; }
        chart.result = result;
        if (!concat) return true;
        var drawnAt = target.clientWidth;
        var timer = null;
        chart.onResize = function () {
          window.clearTimeout(timer);
          timer = window.setTimeout(function () {
            if (target.clientWidth === drawnAt) return;
            undraw(chart);
            embed(chart, spec);
          }, 150);
        };
        window.addEventListener("resize", chart.onResize);
        return true;
      });
  }

  function undraw(chart) {
    if (chart.onResize) window.removeEventListener("resize", chart.onResize);
    chart.onResize = null;
    if (chart.result) chart.result.finalize();
    chart.result = null;
  }

  function hashLevel() {
    return window.SpeedMatrixAddress.get("pct");
  }

  // Whether a level leaves a chart nothing to plot: a plotted field (a number at some
  // level) with no value in any row.
  function emptyAt(spec, level) {
    var rows = [];
    Object.keys(spec.datasets || {}).forEach(function (name) {
      rows = rows.concat(spec.datasets[name]);
    });
    var fields = {};
    rows.forEach(function (row) {
      var at = row.levels && row.levels[level];
      Object.keys(at || {}).forEach(function (k) {
        if (typeof at[k] !== "string") fields[k] = fields[k] || at[k] !== null;
      });
    });
    return Object.keys(fields).some(function (k) { return !fields[k]; });
  }

  // The spec at a level: each row's fields there swapped in, its tooltips and axes
  // retitled. The median, a level the spec has no titles for, or a spec without
  // levels: the spec as built.
  function atLevel(spec, level) {
    var titles = spec.usermeta && spec.usermeta.tails && spec.usermeta.tails[level];
    if (!titles) return spec.usermeta ? JSON.parse(JSON.stringify(spec)) : spec;
    var out = JSON.parse(JSON.stringify(spec));
    Object.keys(out.datasets || {}).forEach(function (name) {
      out.datasets[name] = out.datasets[name].map(function (row) {
        return row.levels ? Object.assign({}, row, row.levels[level]) : row;
      });
    });
    (function retitle(node) {
      if (Array.isArray(node)) { node.forEach(retitle); return; }
      if (!node || typeof node !== "object") return;
      if (typeof node.field === "string" && titles.hasOwnProperty(node.field)) {
        node.title = titles[node.field];
      }
      Object.keys(node).forEach(function (k) { if (k !== "datasets") retitle(node[k]); });
    })(out);
    return out;
  }

  // Draw (or redraw, in the same box) a chart at a level; the figure's data-level
  // says which level its live drawing shows.
  function draw(chart, level) {
    var fig = chart.fig;
    if (chart.failed) return;
    undraw(chart);
    chart.gen += 1;
    var meta = chart.spec.usermeta;
    if (meta && meta.empty && emptyAt(chart.spec, level)) {  // the build's words, no axes
      var note = document.createElement("p");
      note.className = "chart-empty";
      note.textContent = meta.empty;
      chart.target.replaceChildren(note);
      var fallback = fig.querySelector(".chart-fallback");
      if (fallback) fallback.remove();
      fig.setAttribute("data-level", level || "");
      fig.classList.add("is-live");
      chart.drawn = Promise.resolve();
      return;
    }
    var empty = chart.target.querySelector(".chart-empty");
    if (empty) empty.remove();
    chart.drawn = embed(chart, atLevel(chart.spec, level))
      .then(function (current) {
        if (!current) return;
        attachLegend(fig, chart.spec, chart.result);
        var fallback = fig.querySelector(".chart-fallback");
        if (fallback) fallback.remove();
        if (chart.spec.usermeta) fig.setAttribute("data-level", level || "");
        fig.classList.add("is-live");
      })
      .catch(function (err) {
        if (!fig.classList.contains("is-live")) {  // the fallback stays, no empty box
          chart.target.remove();
          chart.failed = true;
        }
        console.error("chart " + fig.id + ": " + err);
      });
  }

  // Whether a figure's top is on the first screen (or near it).
  function nearScreen(fig) {
    return fig.getBoundingClientRect().top < window.innerHeight + 200;
  }

  var idle = window.requestIdleCallback || function (fn) { return window.setTimeout(fn, 30); };

  function drawCharts() {
    if (typeof window.vegaEmbed !== "function") return;
    var figures = document.querySelectorAll("figure.chart");
    var charts = [];
    var level = hashLevel();
    Array.prototype.forEach.call(figures, function (fig) {
      var node = fig.querySelector("script.chart-spec");
      if (!node) return;
      var spec;
      try {
        spec = JSON.parse(node.textContent);
      } catch (err) {
        console.error("chart " + fig.id + ": bad spec: " + err);
        return;
      }
      charts.push({ fig: fig, spec: spec, target: null, result: null, onResize: null, gen: 0,
                    started: false });
    });
    // One chart at a time (each drawing holds the main thread): the first screen's
    // first, in page order, then the one the reader scrolls to, then the rest.
    var queue = charts.filter(function (c) { return nearScreen(c.fig); });
    var later = charts.filter(function (c) { return queue.indexOf(c) < 0; });
    var busy = false;
    function start(chart) {
      chart.started = true;
      // Visible (but empty) while drawing: a hidden box has no width to fit to.
      var target = document.createElement("div");
      target.className = "chart-live";
      chart.fig.appendChild(target);
      chart.target = target;
      // A whole number of pixels: Vega reads the rounded clientWidth, and a picture
      // half a pixel too wide would be scaled down (its text below its size).
      // Registered before Vega's own resize handler, so that one reads the new width.
      function fitBox() {
        target.style.width = Math.floor(chart.fig.getBoundingClientRect().width) + "px";
      }
      fitBox();
      window.addEventListener("resize", fitBox);
      draw(chart, level);
      return chart.drawn || Promise.resolve();
    }
    function next() {
      if (busy) return;
      var chart = queue.shift();
      while (chart && chart.started) chart = queue.shift();
      if (!chart) {
        chart = later.shift();
        while (chart && chart.started) chart = later.shift();
        if (!chart) return;
        busy = true;  // off the first screen: when the page is idle
        idle(function () { start(chart).then(done, done); }, { timeout: 200 });
        return;
      }
      busy = true;
      start(chart).then(done, done);
    }
    function done() { busy = false; next(); }
    if ("IntersectionObserver" in window && later.length) {
      var seen = new IntersectionObserver(function (entries) {
        entries.forEach(function (e) {
          if (!e.isIntersecting) return;
          seen.unobserve(e.target);
          later.forEach(function (c) { if (c.fig === e.target && !c.started) queue.push(c); });
        });
        next();
      }, { rootMargin: "200px 0px" });
      later.forEach(function (c) { seen.observe(c.fig); });
    }
    next();
    var tailed = charts.filter(function (c) { return c.spec.usermeta && c.spec.usermeta.tails; });
    if (!tailed.length) return;
    document.addEventListener("sm-tail", function (ev) {
      level = ev.detail && ev.detail.level;
      tailed.forEach(function (chart) { if (chart.started) draw(chart, level); });
    });
  }

  function copyText(text, ok, fail) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(ok, fail);
    } else {
      fail();
    }
  }

  function wireCopyButtons() {
    var buttons = document.querySelectorAll("button.copy[data-copy]");
    Array.prototype.forEach.call(buttons, function (btn) {
      var source = document.getElementById(btn.getAttribute("data-copy"));
      if (!source) return;
      btn.hidden = false;
      btn.addEventListener("click", function () {
        var label = btn.textContent;
        function say(word) {
          btn.textContent = word;
          window.setTimeout(function () { btn.textContent = label; }, 1500);
        }
        copyText(source.textContent, function () { say("Copied"); }, function () {
          var range = document.createRange();
          range.selectNodeContents(source);
          var sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
          say("Press Ctrl+C");
        });
      });
    });
  }

  wireCopyButtons();
  drawCharts();
})();
