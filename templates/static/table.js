/* The index of runs: sorting, filtering and search over ALL runs, kept in the
   address's hash (#q=…&engine=…&sort=…&dir=…&page=…) so a view can be shared.

   The page holds one static page of rows (index.html, index-2.html, …). The first
   time a reader sorts, filters or searches (or opens an address that does), this
   script loads every run's row from the lean rows file named by the table's
   data-rows (a script, so it works from file:// too; site_builder/indexpages.py
   writes it with every text already formatted) and draws the matching rows from
   it, a page at a time. Until then nothing beyond this page is loaded. */
(function () {
  "use strict";
  var table = document.getElementById("runs-table");
  var form = document.getElementById("run-filters");
  if (!table || !form) return;
  /* The filters and the sort hint work only with this script: shown by it. */
  Array.prototype.forEach.call(document.querySelectorAll("[data-needs-js]"), function (e) {
    e.hidden = false;
  });
  table.classList.add("is-live");
  var GLOBAL = "SPEED_MATRIX_RUNS_TABLE";
  var tbody = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var labels = heads.map(function (th) { return th.textContent.trim(); });
  var output = document.getElementById("run-count");
  var pager = document.getElementById("runs-pages");
  var range = document.getElementById("runs-range");
  var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
  var search = form.querySelector("input[name=q]");
  var keys = ["q", "sort", "dir", "page"].concat(selects.map(function (s) { return s.name; }));
  var total = parseInt(table.getAttribute("data-total"), 10) || 0;
  var staticPage = parseInt(table.getAttribute("data-page"), 10) || 1;
  var root = (table.getAttribute("data-rows") || "").replace(/data\/[^/]*$/, "");
  var state = {};
  var data = null;      /* {fields, cell_fields, page_size, rows} once loaded */
  var loading = null;   /* callbacks waiting for the rows */
  var touched = false;  /* the reader (or the address) asked for a view of all runs */

  function readHash() {
    var params = window.SpeedMatrixAddress.params();
    keys.forEach(function (k) { state[k] = params.get(k) || ""; });
  }

  function asksForView() {
    return keys.some(function (k) { return !!state[k]; });
  }

  function writeHash() {
    /* Other keys in the address (the operating point chooser's) are kept. */
    var params = window.SpeedMatrixAddress.params();
    keys.forEach(function (k) { if (state[k]) params.set(k, state[k]); else params.delete(k); });
    window.SpeedMatrixAddress.replace(params);
  }

  function hashFor(page) {
    var params = window.SpeedMatrixAddress.params();
    if (page > 1) params.set("page", String(page)); else params.delete("page");
    return "#" + params.toString();
  }

  function syncControls() {
    search.value = state.q;
    selects.forEach(function (s) {
      var v = state[s.name];
      if (v && !Array.prototype.some.call(s.options, function (o) { return o.value === v; })) {
        var opt = document.createElement("option");
        opt.value = v;
        opt.textContent = v;
        s.appendChild(opt);
      }
      s.value = v;
    });
  }

  function load(done) {
    if (data) { done(); return; }
    if (loading) { loading.push(done); return; }
    loading = [done];
    output.textContent = "Loading all " + total + " runs…";
    var script = document.createElement("script");
    script.src = table.getAttribute("data-rows");
    script.onload = function () {
      data = window[GLOBAL] || null;
      if (data) data.records = data.rows.map(record);
      var waiting = loading;
      loading = null;
      if (!data) { output.textContent = "Could not read the list of runs"; return; }
      waiting.forEach(function (f) { f(); });
    };
    script.onerror = function () {
      loading = null;
      output.textContent = "Could not load the list of runs (" + script.src + ")";
    };
    document.head.appendChild(script);
  }

  /* A row of the rows file as an object: {page, model, …, cells: [[value, text, …]]}. */
  function record(list) {
    var r = {};
    data.fields.forEach(function (f, i) { r[f] = list[i]; });
    return r;
  }

  function words(parent, text) {
    text.split(" ").forEach(function (w, i) {
      if (i) parent.appendChild(document.createTextNode(" "));
      var s = document.createElement("span");
      s.className = "nowrap";
      s.textContent = w;
      parent.appendChild(s);
    });
  }

  function badge(tag, cls, title, text) {
    var b = document.createElement(tag);
    b.className = cls;
    if (title) b.title = title;
    b.textContent = text;
    return b;
  }

  /* The same markup as templates/index.html draws for a row. */
  function drawRow(r) {
    var tr = document.createElement("tr");
    selects.forEach(function (s) { tr.setAttribute("data-" + s.name, r["f_" + s.name] || ""); });
    tr.setAttribute("data-search", r.search);
    r.cells.forEach(function (c, i) {
      var td = document.createElement("td");
      var cls = c[3] || "";
      if (cls) td.className = cls;
      td.setAttribute("data-label", labels[i]);
      td.setAttribute("data-value", c[0] === null ? "" : String(c[0]));
      if (c[2]) td.title = c[2];
      var classes = cls.split(" ");
      if (i === 0) {
        var a = document.createElement("a");
        a.href = root + r.page;
        words(a, c[1]);
        td.appendChild(a);
        if (r.imported) {
          td.appendChild(document.createTextNode(" "));
          td.appendChild(badge("span", "badge", "Imported from a published page; no raw data",
                               "imported"));
        }
        if (r.regression) {  /* [text, title, classes]: a regression, or a change not established */
          var reg = badge("a", r.regression[2], r.regression[1], r.regression[0]);
          reg.href = root + r.series_page;
          td.appendChild(document.createTextNode(" "));
          td.appendChild(reg);
        }
      } else if (classes.indexOf("name") !== -1) {
        words(td, c[1]);
      } else if (classes.indexOf("clip") !== -1) {
        var clip = document.createElement("span");
        clip.className = "clip";
        clip.textContent = c[1];
        td.appendChild(clip);
      } else {
        td.textContent = c[1];
      }
      if (c[4]) {
        td.appendChild(document.createTextNode(" "));
        td.appendChild(badge("span", "status", "", c[4]));
      }
      tr.appendChild(td);
    });
    return tr;
  }

  function matches(r, q) {
    if (q && r.search.indexOf(q) === -1) return false;
    return selects.every(function (s) { return !state[s.name] || r["f_" + s.name] === state[s.name]; });
  }

  function compare(index, kind, sign) {
    function value(r) {
      var v = r.cells[index][0];
      if (v === "" || v === null || v === undefined) return null;
      return kind === "num" ? parseFloat(v) : String(v);
    }
    return function (a, b) {
      var va = value(a), vb = value(b);
      if (va === null && vb === null) return 0;
      if (va === null) return 1;
      if (vb === null) return -1;
      if (kind === "num") return sign * (va - vb);
      return sign * va.localeCompare(vb);
    };
  }

  function drawPager(page, pages, first, shown, count) {
    if (!pager) return;
    var list = pager.querySelector("ul");
    list.textContent = "";
    function item(n, text, rel) {
      var li = document.createElement("li");
      if (n === null || n < 1 || n > pages) {
        li.appendChild(badge("span", "muted", "", text));
      } else {
        var a = document.createElement("a");
        a.href = hashFor(n);
        a.textContent = text;
        if (rel) a.rel = rel;
        if (n === page && !rel) a.setAttribute("aria-current", "page");
        li.appendChild(a);
      }
      list.appendChild(li);
    }
    item(page - 1, "← Previous", "prev");
    var last = 0;
    for (var n = 1; n <= pages; n++) {
      if (n === 1 || n === pages || Math.abs(n - page) <= 2) {
        item(n, String(n));
        last = n;
      } else if (last !== -1) {
        item(null, "…");
        last = -1;
      }
    }
    item(page + 1, "Next →", "next");
    list.hidden = pages < 2;
    if (range) {
      range.textContent = count ? "Runs " + (first + 1) + "–" + (first + shown) + " of " + count
        + (count === total ? "" : " matching") : "No run matches";
    }
  }

  function sortInfo() {
    var index = -1, kind = "text";
    heads.forEach(function (th, i) {
      var on = th.getAttribute("data-key") === state.sort;
      if (on) { index = i; kind = th.getAttribute("data-kind"); }
      if (on) th.setAttribute("aria-sort", state.dir === "desc" ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
    return {index: index, kind: kind};
  }

  /* Draws the view the state asks for, over every run. */
  function apply() {
    var q = state.q.toLowerCase().trim();
    var rows = data.records.filter(function (r) { return matches(r, q); });
    var s = sortInfo();
    if (s.index >= 0) rows.sort(compare(s.index, s.kind, state.dir === "desc" ? -1 : 1));
    var size = data.page_size || 50;
    var pages = Math.max(1, Math.ceil(rows.length / size));
    var page = parseInt(state.page, 10) || (asksForView() ? 1 : staticPage);
    page = Math.min(Math.max(page, 1), pages);
    var first = (page - 1) * size;
    var shown = rows.slice(first, first + size);
    tbody.textContent = "";
    var frag = document.createDocumentFragment();
    shown.forEach(function (r) { frag.appendChild(drawRow(r)); });
    tbody.appendChild(frag);
    drawPager(page, pages, first, shown.length, rows.length);
    output.textContent = rows.length + " of " + data.rows.length + " runs";
  }

  function update() {
    /* The headers say the asked-for order at once; the rows follow once loaded. */
    sortInfo();
    if (!touched && !asksForView()) return;
    touched = true;
    load(apply);
  }

  form.addEventListener("input", function () {
    state.q = search.value;
    selects.forEach(function (s) { state[s.name] = s.value; });
    state.page = "";
    touched = true;
    update();
    writeHash();
  });
  form.addEventListener("focusin", function () { load(function () {}); });  /* ready by the first key */
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  form.addEventListener("reset", function () {
    window.setTimeout(function () {
      keys.forEach(function (k) { state[k] = ""; });
      syncControls();
      update();
      writeHash();
    }, 0);
  });
  heads.forEach(function (th) {
    if (!th.getAttribute("data-key")) return;
    /* Headers are plain text without JavaScript; here they become sort buttons. */
    var button = document.createElement("button");
    button.type = "button";
    while (th.firstChild) button.appendChild(th.firstChild);
    th.appendChild(button);
    button.addEventListener("click", function () {
      var key = th.getAttribute("data-key");
      if (state.sort === key) {
        state.dir = state.dir === "desc" ? "asc" : "desc";
      } else {
        state.sort = key;
        state.dir = th.getAttribute("data-kind") === "num" ? "desc" : "asc";
      }
      state.page = "";
      touched = true;
      update();
      writeHash();
    });
  });
  window.addEventListener("hashchange", function () {
    readHash();
    syncControls();
    update();
  });

  readHash();
  syncControls();
  update();
})();
