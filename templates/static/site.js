/* Draws each page's charts with the vendored vega-embed and wires the copy buttons.
   Nothing here fetches anything: chart specs are inline, the bundle is local. */
(function () {
  "use strict";

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
      var target = document.createElement("div");
      target.className = "chart-live";
      target.hidden = true;
      fig.appendChild(target);
      window.vegaEmbed(target, spec, { actions: false, renderer: "svg", mode: "vega-lite" })
        .then(function () {
          var fallback = fig.querySelector(".chart-fallback");
          if (fallback) fallback.remove();
          target.hidden = false;
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
