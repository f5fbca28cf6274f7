/* The compare page's prefix-reuse, conversation and request-rate tables (sites
   with traffic or rate cells only: the build writes this file and #ab-traffic
   only there). Rate cells: per offered rate both runs measured on the same curve
   (context, cap, reuse), each run's achieved rate, TTFT p90 and status. For the
   two runs picked in compare.js's controls: per cell both runs measured at the
   same context, requests at once and reuse asked (prefix cells), or turn
   (conversation cells), each run's achieved reuse, TTFT, uncached prefill tok/s
   and status, side by side. Every number and word arrives formatted by the
   build (runs/<slug>/data.js "traffic" and "rate", site_builder/trafficpage.py and
   raterank.py), and "spec" (speculative decoding, site_builder/spec.py). */
(function () {
  "use strict";
  var index = window.SPEED_MATRIX_INDEX;
  var box = document.getElementById("ab-traffic");
  var selA = document.getElementById("ab-a");
  var selB = document.getElementById("ab-b");
  if (!index || !box || !selA || !selB) return;
  var STATUS = JSON.parse(document.getElementById("status-rules").textContent);
  var DASH = JSON.parse(document.getElementById("ab-rules").textContent).missing;
  var bySlug = {};
  index.runs.forEach(function (r) { bySlug[r.slug] = r; });
  var shown = 0; /* the latest render: an older one's late data is dropped */

  /* A run's data.js: the one compare.js loads (or has loaded), else loaded here. */
  function loadRun(slug) {
    window.SPEED_MATRIX_RUNS = window.SPEED_MATRIX_RUNS || {};
    if (window.SPEED_MATRIX_RUNS[slug]) return Promise.resolve(window.SPEED_MATRIX_RUNS[slug]);
    return new Promise(function (resolve, reject) {
      var src = bySlug[slug].data_js;
      var s = document.querySelector('script[src="' + src + '"]');
      if (!s) {
        s = document.createElement("script");
        s.src = src;
        document.head.appendChild(s);
      }
      s.addEventListener("load", function () { resolve(window.SPEED_MATRIX_RUNS[slug]); });
      s.addEventListener("error", function () { reject(new Error("cannot load " + src)); });
    });
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (tag === "th") e.scope = "col";
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* A run's traffic cells of one phase by their key, and the keys in the run's order. */
  function cellsOf(run, phase) {
    var out = { cells: {}, keys: [] };
    var t = run && (phase === "rate" ? run.rate : run.traffic);
    if (!t) return out;
    t.cells.forEach(function (row) {
      var c = {};
      t.fields.forEach(function (name, i) { c[name] = row[i]; });
      if (phase !== "rate" && c.phase !== phase) return;
      var key = phase === "rate" ? [c.context, c.concurrency, c.reuse, c.rate_target].join("x")
        : [c.context, c.concurrency, phase === "prefix" ? c.target : c.turn].join("x");
      out.cells[key] = c;
      out.keys.push(key);
    });
    return out;
  }

  /* One side's figure: its text where its status carries numbers, else a dash. */
  function figure(c, name) {
    return STATUS.numbers.indexOf(c.status) >= 0 && c[name] !== null ? c[name + "_text"] : DASH;
  }

  function pairCell(ca, cb, name) {
    var td = el("td", "cell num");
    td.appendChild(el("span", "pair", "A " + figure(ca, name)));
    td.appendChild(el("span", "pair", "B " + figure(cb, name)));
    return td;
  }

  /* Each side's status word as a badge in its colours (the stylesheet's .badge.st-<code>),
     linked to its methodology entry where it has one; its reason on hover. */
  function statusCell(ca, cb, anchors) {
    var td = el("td", "cell ab-status");
    [["A", ca], ["B", cb]].forEach(function (x) {
      var span = el("span", "pair");
      span.appendChild(document.createTextNode(x[0] + " "));
      var badge = el("span", "badge st-" + x[1].status);
      var anchor = anchors[x[1].status];
      var word = anchor ? el("a", null, x[1].status_label) : document.createTextNode(x[1].status_label);
      if (anchor) word.href = "methodology.html#" + anchor;
      badge.appendChild(word);
      if (x[1].reason) badge.title = x[1].reason;
      span.appendChild(badge);
      td.appendChild(span);
    });
    return td;
  }

  /* Tables of the cells both runs have, one per context and requests at once. */
  function tables(pa, pb, anchors, spec) {
    var groups = {}, order = [];
    pa.keys.forEach(function (key) {
      if (!pb.cells[key]) return;
      var c = pa.cells[key], g = c.context + "x" + c.concurrency + (spec.group ? "x" + c.reuse : "");
      if (!groups[g]) { groups[g] = []; order.push(g); }
      groups[g].push(key);
    });
    return order.map(function (g) {
      var first = pa.cells[groups[g][0]];
      var caption = spec.group ? first.heading : first.context_label + " context, " + first.concurrency + spec.atOnce;
      var table = el("table", "traffic ab " + spec.cls);
      table.appendChild(el("caption", null, caption));
      var head = table.createTHead().insertRow();
      spec.headers.forEach(function (h) { head.appendChild(el("th", null, h)); });
      var body = table.createTBody();
      groups[g].forEach(function (key) {
        var ca = pa.cells[key], cb = pb.cells[key];
        var tr = body.insertRow();
        var th = el("th", null, spec.rowLabel(ca));
        th.scope = "row";
        tr.appendChild(th);
        spec.figures.forEach(function (name) { tr.appendChild(pairCell(ca, cb, name)); });
        tr.appendChild(statusCell(ca, cb, anchors));
      });
      var scroll = el("div", "table-scroll");
      scroll.setAttribute("role", "region");
      scroll.setAttribute("tabindex", "0");
      scroll.setAttribute("aria-label", spec.title + ", " + caption + ", A and B");
      scroll.appendChild(table);
      return scroll;
    });
  }

  var PREFIX = { cls: "prefix-reuse", title: "Prefix reuse", atOnce: " at once",
                 headers: ["Reuse asked", "Achieved (requests)", "TTFT", "Uncached prefill tok/s", "Status"],
                 figures: ["achieved", "ttft_ms", "uncached_tok_s"],
                 rowLabel: function (c) { return c.target + "%"; },
                 none: "The two runs share no prefix-reuse cell (the same context, requests at once and reuse asked)." };
  var TURNS = { cls: "conversations", title: "Conversations", atOnce: " conversations at once",
                headers: ["Turn", "Cached (requests)", "TTFT", "Status"],
                figures: ["achieved", "ttft_ms"],
                rowLabel: function (c) { return String(c.turn); },
                none: "The two runs share no conversation turn (the same context, conversations at once and turn)." };

  var RATE = { cls: "request-rate", title: "Request rate", group: true,
               headers: ["Offered", "Achieved", "TTFT p90", "Status"],
               figures: ["achieved", "ttft_p90"],
               rowLabel: function (c) { return c.rate_text; },
               none: "The two runs share no request-rate cell (the same context, cap on requests in flight, reuse and offered rate)." };

  function section(runs, phase, spec, id) {
    var pa = cellsOf(runs[0], phase), pb = cellsOf(runs[1], phase);
    if (!pa.keys.length && !pb.keys.length) return null;
    var field = phase === "rate" ? "rate" : "traffic";
    var anchors = (runs[0][field] || runs[1][field]).anchors || {};
    var sec = el("section", "ab-traffic-part");
    sec.id = id;
    sec.appendChild(el("h2", null, spec.title + ", A and B"));
    var parts = tables(pa, pb, anchors, spec);
    if (!parts.length) sec.appendChild(el("p", "note", spec.none));
    parts.forEach(function (p) { sec.appendChild(p); });
    if (phase === "prefix" && parts.length) {
      sec.appendChild(el("p", "note", "Achieved: the share of prompt tokens the requests report " +
        "cached, never the reuse asked for; a status other than Valid says where the two differ."));
    }
    if (phase === "rate" && parts.length) {
      sec.appendChild(el("p", "note", "Achieved: the requests each run sent ÷ the window, with the " +
        "schedule's chance spread; TTFT p90 from send. Each run's page has every figure and its knee."));
    }
    return sec;
  }

  /* Speculative decoding: per decode cell (context x streams) either run has an acceptance
     for, each run's tokens per step (client, server) and per-request tok/s, A and B; a run
     without drafts shows dashes for the acceptance and its own per-request tok/s. */
  function specOf(run) {
    var out = {};
    if (!run || !run.spec) return out;
    run.spec.cells.forEach(function (row) {
      var c = {};
      run.spec.fields.forEach(function (name, i) { c[name] = row[i]; });
      out[c.context + "x" + c.concurrency] = c;
    });
    return out;
  }

  function decodeOf(run) {
    var out = {};
    (run && run.cells || []).forEach(function (row) {
      var c = {};
      run.fields.forEach(function (name, i) { c[name] = row[i]; });
      if (c.phase === "decode") out[c.context + "x" + c.concurrency] = c;
    });
    return out;
  }

  function specSection(runs) {
    var sa = specOf(runs[0]), sb = specOf(runs[1]);
    var da = decodeOf(runs[0]), db = decodeOf(runs[1]);
    var keys = Object.keys(sa).concat(Object.keys(sb).filter(function (k) { return !sa[k]; }));
    if (!keys.length) return null;
    keys.sort(function (x, y) {
      var p = x.split("x").map(Number), q = y.split("x").map(Number);
      return p[0] - q[0] || p[1] - q[1];
    });
    var sec = el("section", "ab-traffic-part");
    sec.id = "ab-speculative-decoding";
    sec.appendChild(el("h2", null, "Speculative decoding, A and B"));
    var table = el("table", "traffic ab speculative");
    var head = table.createTHead().insertRow();
    ["Context", "Streams", "Tokens per step (client)", "Tokens per step (server)",
     "Per-request tok/s"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    var body = table.createTBody();
    keys.forEach(function (key) {
      var ref = da[key] || db[key] || {};
      var tr = body.insertRow();
      var th = el("th", null, (ref.context_label || key.split("x")[0]));
      th.scope = "row";
      tr.appendChild(th);
      tr.appendChild(el("td", "cell num", key.split("x")[1]));
      [["client_text", true], ["server_text", false]].forEach(function (f) {
        var td = el("td", "cell num");
        [["A", sa[key]], ["B", sb[key]]].forEach(function (x) {
          var s = x[1], text = s ? s[f[0]] : DASH;
          if (f[1] && s && s.disagrees) text += " \u2260";
          var span = el("span", "pair", x[0] + " " + text);
          if (s && s.note && f[1]) span.title = s.note;
          td.appendChild(span);
        });
        tr.appendChild(td);
      });
      var td = el("td", "cell num");
      [["A", da[key]], ["B", db[key]]].forEach(function (x) {
        td.appendChild(el("span", "pair", x[0] + " " + (x[1] ? figure(x[1], "per_request_tok_s") : DASH)));
      });
      tr.appendChild(td);
    });
    var scroll = el("div", "table-scroll");
    scroll.setAttribute("role", "region");
    scroll.setAttribute("tabindex", "0");
    scroll.setAttribute("aria-label", "Speculative decoding, A and B");
    scroll.appendChild(table);
    sec.appendChild(scroll);
    sec.appendChild(el("p", "note", "Tokens a request received per verification step: from the " +
      "stream's chunks (client) and the engine's counters (server); \u2260 marks a client figure " +
      "more than 2% from the server's. Per-request tok/s rises with it."));
    return sec;
  }

  function render() {
    var a = selA.value, b = selB.value, mine = ++shown;
    box.textContent = "";
    if (!a || !b || !bySlug[a] || !bySlug[b]) return;
    Promise.all([loadRun(a), loadRun(b)]).then(function (runs) {
      if (mine !== shown) return;
      [section(runs, "prefix", PREFIX, "ab-prefix-reuse"),
       section(runs, "conversation", TURNS, "ab-conversations"),
       section(runs, "rate", RATE, "ab-request-rate"), specSection(runs)].forEach(function (s) {
        if (s) box.appendChild(s);
      });
    }).catch(function (err) { console.error(err); });
  }

  /* compare.js's listeners run first (registered first): the pickers hold the new pair. */
  [selA, selB].forEach(function (s) { s.addEventListener("change", render); });
  document.getElementById("ab-swap").addEventListener("click", render);
  window.addEventListener("hashchange", render);
  render();
})();
