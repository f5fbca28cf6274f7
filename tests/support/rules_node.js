/* Runs templates/static/rules.js under node for tests/site/test_page_rules.py: one JSON
   request a line on stdin ({fn, args}), one JSON answer a line on stdout ({ok} or
   {error}). The first request is the build's rules ({fn: "use", args: [rules]}).
   "rankSlo" and "rankAt" take the ranking data of rankings.client_data and answer
   what the page's rows show, the values read as oppoint.js reads them at the median. */
"use strict";
var path = require("path");
var readline = require("readline");
var rules = require(path.join(__dirname, "..", "..", "templates", "static", "rules.js"));

function valueOf(data) {
  var index = {};
  data.metrics.forEach(function (m, i) { index[m.key] = i; });
  return { index: index, value: function (cell, key) { return cell.values[index[key]]; } };
}

var calls = {
  use: rules.use,
  sloParse: rules.sloParse,
  sloSpec: rules.sloSpec,
  meets: rules.meets,
  paretoFront: rules.paretoFront,
  fill: rules.fill,
  rankSlo: function (data, limits, by) {
    var v = valueOf(data);
    return rules.rankSlo(data.runs, limits, by, v.value, function (cell) {
      return cell && cell.ci ? cell.ci[v.index[by]] : null;
    }).map(function (e) {
      return [e.run.slug, e.cell ? e.cell.label : rules.noneMeets(e.run, limits), e.tied];
    });
  },
  rankAt: function (data, at, by) {
    return rules.rankAt(data.runs, data.choices[at], by, valueOf(data).value).map(function (e) {
      return [e.run.slug, e.cell ? e.cell.label : null, e.cell ? e.exact : false];
    });
  }
};

readline.createInterface({ input: process.stdin }).on("line", function (line) {
  var req = JSON.parse(line), out;
  try {
    var got = calls[req.fn].apply(null, req.args);
    out = { ok: got === undefined ? null : got };
  } catch (err) {
    out = { error: String(err.message || err) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
