/* The rules the page recomputes when the reader changes the limits, the percentile or
   the measure, written once here (slo.js, oppoint.js and explore.js call them). Each is
   the twin of a Python function named beside it, which decides the same at build time,
   and tests/site/test_page_rules.py runs both on the same inputs (under node). What
   the rules are made of (the percentile levels, the SLO grammar, which way each
   ranking measure is better) is the build's: site_builder/pagerules.py, inlined in
   the page as #page-rules. Pure: no address, no document but that one read. */
(function (root, factory) {
  var api = factory();
  if (typeof module === "object" && module.exports) {
    module.exports = api;
  } else {
    var node = root.document && root.document.getElementById("page-rules");
    if (node) api.use(JSON.parse(node.textContent));
    root.SpeedMatrixRules = api;
  }
})(this, function () {
  "use strict";
  var R = null, LIMIT = null;

  /* The build's rules (pagerules.js_rules). */
  function use(rules) {
    R = rules;
    LIMIT = new RegExp("^(?:" + rules.slo.limit + ")$", "i");
  }

  function levels() { return R.levels; }

  /* The SLO grammar: {metrics, names, limit (the pattern of one limit), default}. */
  function slo() { return R.slo; }

  /* slo.parse: "ttft_p99=2000,tbt_p99_9=50" -> [{metric, level, ms}], or null when it
     cannot be read (Python says why; the page keeps the last good limits). */
  function sloParse(text) {
    if (typeof text !== "string" || !text.trim()) return null;
    var out = [], seen = {};
    var parts = text.split(",");
    for (var i = 0; i < parts.length; i++) {
      var m = LIMIT.exec(parts[i]);
      if (!m) return null;
      var metric = m[1].toLowerCase();
      var level = m[2].toLowerCase().replace(/_/g, ".");
      var ms = Number(m[3]);
      if (R.levels.indexOf(level) < 0 || !isFinite(ms) || ms <= 0 || seen[metric]) return null;
      seen[metric] = 1;
      out.push({ metric: metric, level: level, ms: ms });
    }
    return out;
  }

  /* slo.Slo.spec: the limits as the address and the flag write them. */
  function sloSpec(limits) {
    return limits.map(function (l) {
      return l.metric + "_" + l.level.replace(".", "_") + "=" + l.ms;
    }).join(",");
  }

  /* slo.levels_meet: each limited percentile exists and is at most its limit;
     lv: {ttft: [value per level], tbt: [...]} (null: too few requests). */
  function meets(lv, limits) {
    if (!lv) return false;
    return limits.every(function (l) {
      var v = (lv[l.metric] || [])[R.levels.indexOf(l.level)];
      return v !== null && v !== undefined && v <= l.ms;
    });
  }

  /* slo.none_meets: why no cell of a run meets the limits. run.medians: an imported
     run (medians only); a cell with numbers has lv. */
  function noneMeets(run, limits) {
    var past = R.levels.slice(1).filter(function (lv) {
      return limits.some(function (l) { return l.level === lv; });
    });
    var names = past.join(" / ");
    if (past.length && run.medians) {
      return "no " + names + " published (medians only): set the limits at " + R.levels[0] +
        " to rank it";
    }
    var cells = run.cells.filter(function (c) { return c.lv; });
    var tooFew = cells.length && cells.every(function (c) {
      return limits.some(function (l) {
        var v = (c.lv[l.metric] || [])[R.levels.indexOf(l.level)];
        return v === null || v === undefined;
      });
    });
    if (past.length && tooFew) {
      return "too few requests for " + names + " in every cell: a lower level ranks it " +
        "(a longer --duration or --repeats fills it)";
    }
    return "no cell meets the limits";
  }

  function higher(by) { return !!R.higher[by]; }

  /* Ties between runs: by title, then slug (oppoint.rank, oppoint.slo_rank). */
  function byName(a, b) {
    var x = a.run.title, y = b.run.title;
    if (x !== y) return x < y ? -1 : 1;
    return a.run.slug < b.run.slug ? -1 : a.run.slug > b.run.slug ? 1 : 0;
  }

  /* oppoint.rank on the ranking data: choices[i] is run i's cell at the point
     (i >= 0 exact, -(i + 2) nearest, -1 none); value(cell, key) a cell's measure.
     Runs measured at the point first, then nearest cells, then runs without a value. */
  function rankAt(runs, choices, by, value) {
    var sign = higher(by) ? -1 : 1;
    var out = runs.map(function (run, i) {
      var c = choices[i];
      var cell = c === -1 ? null : run.cells[c >= 0 ? c : -c - 2];
      return { run: run, cell: cell, exact: c >= 0, value: cell ? value(cell, by) : null };
    });
    return out.sort(function (a, b) {
      var na = a.value === null, nb = b.value === null;
      if (na !== nb) return na ? 1 : -1;
      if (!na && a.exact !== b.exact) return a.exact ? -1 : 1;
      if (!na && a.value !== b.value) return sign * (a.value - b.value);
      return byName(a, b);
    });
  }

  /* slo.best_cell: a run's cell meeting the limits with the best value of `by` (ties:
     the first, the cells being sorted by context then requests); without a value for
     `by`, its best by total tok/s (oppoint.slo_rank). */
  function bestCell(cells, limits, by, value) {
    var pickBy = function (key) {
      var sign = higher(key) ? -1 : 1;
      var best = null, bestV = null;
      cells.forEach(function (c) {
        if (!c.lv || value(c, "total") === null || !meets(c.lv, limits)) return;
        var v = value(c, key);
        if (v === null) return;
        if (best === null || sign * (v - bestV) < 0) { best = c; bestV = v; }
      });
      return best;
    };
    return pickBy(by) || pickBy("total");
  }

  /* oppoint.slo_rank: each run's best meeting cell, best run first; then the runs with
     a meeting cell but no value for `by`, then those with none. A place is tied within
     noise when its interval and the one above overlap (interval(cell): [lo, hi] or null). */
  function rankSlo(runs, limits, by, value, interval) {
    var sign = higher(by) ? -1 : 1;
    var out = runs.map(function (run) {
      var cell = bestCell(run.cells, limits, by, value);
      return { run: run, cell: cell, value: cell ? value(cell, by) : null, tied: false };
    });
    var ranked = out.filter(function (e) { return e.value !== null; }).sort(function (a, b) {
      return a.value !== b.value ? sign * (a.value - b.value) : byName(a, b);
    });
    var rest = out.filter(function (e) { return e.value === null; }).sort(function (a, b) {
      return (a.cell === null) - (b.cell === null) || byName(a, b);
    });
    ranked.forEach(function (e, k) {
      if (!k) return;
      var a = interval(ranked[k - 1].cell), b = interval(e.cell);
      e.tied = !!(a && b && a[0] <= b[1] && b[0] <= a[1]);
    });
    return ranked.concat(rest);
  }

  /* explore.pareto_front: indices of the [x, y] no other beats on both (higher is
     better on both), ordered by x; equal points are all kept. */
  function paretoFront(pts) {
    var order = pts.map(function (_, i) { return i; }).sort(function (a, b) {
      return (pts[b][0] - pts[a][0]) || (pts[b][1] - pts[a][1]);
    });
    var front = [], bestY = -Infinity;
    order.forEach(function (i) {
      var y = pts[i][1], last = front.length ? pts[front[front.length - 1]] : null;
      if (y > bestY || (y === bestY && last && last[0] === pts[i][0] && last[1] === y)) {
        front.push(i);
        bestY = y;
      }
    });
    return front.sort(function (a, b) { return (pts[a][0] - pts[b][0]) || (pts[b][1] - pts[a][1]); });
  }

  /* chartkit.Template.fill: a template's JSON with every hole ("@name@", or ["@name@"]
     for a list) filled with values[name] and the rows put in `datasets`; the values
     must name exactly the template's holes. */
  function fill(text, values, datasets) {
    var slot = /\["@(\w+)@"\]|"@(\w+)@"/g, holes = {}, m;
    while ((m = slot.exec(text)) !== null) holes[m[1] || m[2]] = 1;
    var want = Object.keys(holes).sort(), given = Object.keys(values).sort();
    if (want.join(",") !== given.join(",")) {
      throw new Error("template holes " + want.join(", ") + ", given " + given.join(", "));
    }
    var spec = JSON.parse(text.replace(slot, function (_, a, b) {
      return JSON.stringify(values[a || b]);
    }));
    spec.datasets = datasets;
    return spec;
  }

  return { use: use, levels: levels, slo: slo, sloParse: sloParse, sloSpec: sloSpec, meets: meets,
           noneMeets: noneMeets, higher: higher, rankAt: rankAt, bestCell: bestCell,
           rankSlo: rankSlo, paretoFront: paretoFront, fill: fill };
});
