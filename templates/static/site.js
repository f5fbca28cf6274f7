/* Draws each page's charts with the vendored vega-embed and wires the copy buttons.
   Nothing here fetches anything: chart specs are inline, the bundle is local.
   On a page with the percentile selector (tails.js) a chart's rows carry their
   latencies at every level and its spec their titles there (usermeta.tails): the
   chart is drawn at the level in the hash (#pct=p99) and redrawn on "sm-tail". */
(function () {
  "use strict";

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
    return new URLSearchParams(window.location.hash.replace(/^#/, "")).get("pct");
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
      return;
    }
    var empty = chart.target.querySelector(".chart-empty");
    if (empty) empty.remove();
    embed(chart, atLevel(chart.spec, level))
      .then(function (current) {
        if (!current) return;
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

  function drawCharts() {
    if (typeof window.vegaEmbed !== "function") return;
    var figures = document.querySelectorAll("figure.chart");
    var tailed = [];
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
      // Visible (but empty) while drawing: a hidden box has no width to fit to.
      var target = document.createElement("div");
      target.className = "chart-live";
      fig.appendChild(target);
      var chart = { fig: fig, spec: spec, target: target, result: null, onResize: null, gen: 0 };
      // A whole number of pixels: Vega reads the rounded clientWidth, and a picture
      // half a pixel too wide would be scaled down (its text below its size).
      // Registered before Vega's own resize handler, so that one reads the new width.
      function fitBox() {
        target.style.width = Math.floor(fig.getBoundingClientRect().width) + "px";
      }
      fitBox();
      window.addEventListener("resize", fitBox);
      if (spec.usermeta && spec.usermeta.tails) tailed.push(chart);
      draw(chart, hashLevel());
    });
    if (!tailed.length) return;
    document.addEventListener("sm-tail", function (ev) {
      var level = ev.detail && ev.detail.level;
      tailed.forEach(function (chart) { draw(chart, level); });
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
