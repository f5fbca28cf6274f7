/* The latency limits a reader sets (an SLO): TTFT and time between tokens, each at a
   percentile, kept in the address as slo=ttft_p99=2000,tbt_p99=50 (absent: the site's
   default, the build's --slo). The syntax, the levels and the judgement are the
   build's (site_builder/slo.py), read and applied by rules.js from #page-rules.
   Every `.slo-control` box gets a form; a change writes the address
   (address.js) and dispatches `sm-slo` ({detail: {slo: spec}}), which the
   rankings (oppoint.js) and the explorer (explore.js) listen for. They judge cells
   with `SpeedMatrixSlo.meets` on the percentiles the build put in their data. */
(function () {
  "use strict";
  var RULES = window.SpeedMatrixRules, ADDRESS = window.SpeedMatrixAddress;
  var LEVELS = RULES.levels();
  var NAMES = RULES.slo().names;
  var METRICS = RULES.slo().metrics;
  var parse = RULES.sloParse, spec = RULES.sloSpec, meets = RULES.meets;

  /* The limits in the address when they can be read, else the default's. */
  function current(defaultSpec) {
    return parse(ADDRESS.get("slo") || "") || parse(defaultSpec) || [];
  }

  /* As the pages print a latency (rundir/words.py ttft, formats.tbt). */
  function ms(metric, v) {
    if (metric === "tbt" || v < 100) {
      return (metric === "tbt" ? v.toFixed(1) : String(Math.round(v * 10) / 10)) + " ms";
    }
    return Math.round(v).toLocaleString("en-US") + " ms";
  }

  function text(limits) {
    if (!limits.length) return "no limits";
    return limits.map(function (l) {
      return NAMES[l.metric] + " " + l.level + " \u2264 " + ms(l.metric, l.ms);
    }).join(" and ");
  }

  function write(limits, defaultSpec) {
    var p = ADDRESS.params();
    var s = spec(limits);
    if (s === spec(parse(defaultSpec) || [])) p.delete("slo"); else p.set("slo", s);
    ADDRESS.replace(p);
    document.dispatchEvent(new CustomEvent("sm-slo", { detail: { slo: s } }));
  }

  function el(tag, attrs, textContent) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (textContent) e.textContent = textContent;
    return e;
  }

  /* One box's form: per metric a level (or none) and a limit in ms. */
  function build(box) {
    var defaultSpec = box.getAttribute("data-default") || "";
    var form = el("form", { "class": "filters slo-form", "aria-label": "Latency limits" });
    var fields = {};
    METRICS.forEach(function (metric) {
      var label = el("label", {}, NAMES[metric] + " ");
      var sel = el("select", { name: metric + "_level" });
      sel.appendChild(el("option", { value: "" }, "no limit"));
      LEVELS.forEach(function (lv) { sel.appendChild(el("option", { value: lv }, lv)); });
      label.appendChild(sel);
      var lim = el("label", {}, "\u2264 ");
      var input = el("input", { name: metric + "_ms", type: "number", min: "0", step: "any",
                                inputmode: "decimal", size: "6" });
      lim.appendChild(input);
      lim.appendChild(document.createTextNode(" ms"));
      form.appendChild(label);
      form.appendChild(lim);
      fields[metric] = { level: sel, ms: input };
    });
    var reset = el("button", { type: "button", name: "reset" }, "Site default");
    var out = el("output", { "class": "slo-error", "aria-live": "polite" });
    form.appendChild(reset);
    form.appendChild(out);
    box.appendChild(form);

    function show(limits) {
      METRICS.forEach(function (metric) {
        var l = limits.filter(function (x) { return x.metric === metric; })[0];
        fields[metric].level.value = l ? l.level : "";
        fields[metric].ms.value = l ? String(l.ms) : "";
      });
      out.textContent = "";
    }

    function read() {
      var limits = [];
      for (var i = 0; i < METRICS.length; i++) {
        var f = fields[METRICS[i]];
        if (!f.level.value) continue;
        var v = Number(f.ms.value);
        if (!f.ms.value || !isFinite(v) || v <= 0) return null;
        limits.push({ metric: METRICS[i], level: f.level.value, ms: v });
      }
      return limits.length ? limits : null;
    }

    form.addEventListener("input", function () {
      var limits = read();
      if (!limits) {
        out.textContent = "Give at least one limit, each a level and a positive number of ms.";
        return;
      }
      out.textContent = "";
      write(limits, defaultSpec);
    });
    form.addEventListener("submit", function (ev) { ev.preventDefault(); });
    reset.addEventListener("click", function () {
      var limits = parse(defaultSpec) || [];
      show(limits);
      write(limits, defaultSpec);
    });
    document.addEventListener("sm-slo", function (ev) {
      var limits = parse(ev.detail && ev.detail.slo) || current(defaultSpec);
      if (spec(limits) !== spec(read() || [])) show(limits);
    });
    window.addEventListener("hashchange", function () { show(current(defaultSpec)); });
    show(current(defaultSpec));
  }

  window.SpeedMatrixSlo = { LEVELS: LEVELS, parse: parse, spec: spec, current: current,
                            meets: meets, text: text };
  Array.prototype.forEach.call(document.querySelectorAll(".slo-control"), build);
})();
