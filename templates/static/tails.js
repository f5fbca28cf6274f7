/* The percentile selector of the run and family pages: "Latency at" median (p50),
   p90, p95, p99 or p99.9. Every text the choice changes was printed by the build at
   every level, in the selector's order, in the element's data-levels list (a cell
   with too few requests for a rank reads "—" there, never the median), so this
   script only swaps texts. The choice lives in the address's hash (#pct=p99; other
   keys are kept, absent or unknown means the median); on a change it tells the
   page's other scripts (charts, rankings) with a "sm-tail" event. */
(function () {
  "use strict";
  var control = document.getElementById("tail-select");
  if (!control) return;
  var select = control.querySelector("select");
  var levels = Array.prototype.map.call(select.options, function (o) { return o.value; });
  var median = levels[0];
  var texts = [];
  Array.prototype.forEach.call(document.querySelectorAll("[data-levels]"), function (el) {
    var list;
    try {
      list = JSON.parse(el.getAttribute("data-levels"));
    } catch (err) {
      console.error("percentile texts of " + el.tagName + ": " + err);
      return;
    }
    // A header keeps its glossary link: its text is the link's.
    // A cell with a 95% interval swaps only its value (.lv); the interval is of the
    // median over windows, so it shows only at the median (style.css, data-pct).
    texts.push({ node: el.querySelector("a.term, .lv") || el, list: list });
  });
  var current = median;

  function fromHash() {
    var v = window.SpeedMatrixAddress.get("pct");
    return levels.indexOf(v) >= 0 ? v : median;
  }

  function writeHash(level) {
    var params = window.SpeedMatrixAddress.params();
    if (level === median) params.delete("pct"); else params.set("pct", level);
    window.SpeedMatrixAddress.replace(params);
  }

  function show(level) {
    var i = levels.indexOf(level);
    current = level;
    select.value = level;
    document.documentElement.setAttribute("data-pct", level);
    texts.forEach(function (t) {
      if (i < t.list.length && t.node.textContent !== t.list[i]) t.node.textContent = t.list[i];
    });
  }

  function announce(level) {
    document.dispatchEvent(new CustomEvent("sm-tail", { detail: { level: level } }));
  }

  select.addEventListener("change", function () {
    var level = levels.indexOf(select.value) >= 0 ? select.value : median;
    if (level === current) return;
    show(level);
    writeHash(level);
    announce(level);
  });
  window.addEventListener("hashchange", function () {
    var level = fromHash();
    if (level === current) return;
    show(level);
    announce(level);
  });

  control.hidden = false;
  show(fromHash());  // the others read the first level from the hash themselves
})();
