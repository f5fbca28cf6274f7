/* Draws each page's charts with the vendored vega-embed and wires the copy buttons.
   Nothing here fetches anything: chart specs are inline, the bundle is local. */
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

  function embed(fig, target, spec) {
    var concat = fitConcat(spec, target.clientWidth);
    return window.vegaEmbed(target, spec, { actions: false, renderer: "svg", mode: "vega-lite" })
      .then(function (result) {
        if (!concat) return;
        var drawnAt = target.clientWidth;
        var timer = null;
        window.addEventListener("resize", function onResize() {
          window.clearTimeout(timer);
          timer = window.setTimeout(function () {
            if (target.clientWidth === drawnAt) return;
            window.removeEventListener("resize", onResize);
            result.finalize();
            embed(fig, target, spec);
          }, 150);
        });
      });
  }

  function drawCharts() {
    if (typeof window.vegaEmbed !== "function") return;
    var figures = document.querySelectorAll("figure.chart");
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
      // A whole number of pixels: Vega reads the rounded clientWidth, and a picture
      // half a pixel too wide would be scaled down (its text below its size).
      // Registered before Vega's own resize handler, so that one reads the new width.
      function fitBox() {
        target.style.width = Math.floor(fig.getBoundingClientRect().width) + "px";
      }
      fitBox();
      window.addEventListener("resize", fitBox);
      embed(fig, target, spec)
        .then(function () {
          var fallback = fig.querySelector(".chart-fallback");
          if (fallback) fallback.remove();
          fig.classList.add("is-live");
        })
        .catch(function (err) {
          target.remove();
          console.error("chart " + fig.id + ": " + err);
        });
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
