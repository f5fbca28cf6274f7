/* Sorts and filters the runs table in place. The state lives in the address's
   hash (#q=…&engine=…&sort=…&dir=…) so a filtered view can be shared. */
(function () {
  "use strict";
  var table = document.getElementById("runs-table");
  var form = document.getElementById("run-filters");
  if (!table || !form) return;
  /* The filters and the sort hint work only with this script: shown by it. */
  Array.prototype.forEach.call(document.querySelectorAll("[data-needs-js]"), function (e) {
    e.hidden = false;
  });
  var tbody = table.tBodies[0];
  var rows = Array.prototype.slice.call(tbody.rows);
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var output = document.getElementById("run-count");
  var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
  var search = form.querySelector("input[name=q]");
  var keys = ["q", "sort", "dir"].concat(selects.map(function (s) { return s.name; }));
  var state = {};

  function readHash() {
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    keys.forEach(function (k) { state[k] = params.get(k) || ""; });
  }

  function writeHash() {
    /* Other keys in the address (the operating point chooser's) are kept. */
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    keys.forEach(function (k) { if (state[k]) params.set(k, state[k]); else params.delete(k); });
    var text = params.toString();
    var base = window.location.href.split("#")[0];
    window.history.replaceState(null, "", text ? base + "#" + text : base);
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

  function cellValue(row, index, kind) {
    var raw = row.cells[index].getAttribute("data-value") || "";
    if (kind === "num") return raw === "" ? null : parseFloat(raw);
    return raw === "" ? null : raw;
  }

  function apply() {
    var q = state.q.toLowerCase().trim();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = !q || (row.getAttribute("data-search") || "").indexOf(q) !== -1;
      selects.forEach(function (s) {
        if (state[s.name] && row.getAttribute("data-" + s.name) !== state[s.name]) ok = false;
      });
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    var index = -1;
    var kind = "text";
    heads.forEach(function (th, i) {
      var on = th.getAttribute("data-key") === state.sort;
      if (on) { index = i; kind = th.getAttribute("data-kind"); }
      if (on) th.setAttribute("aria-sort", state.dir === "desc" ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
    if (index >= 0) {
      var sign = state.dir === "desc" ? -1 : 1;
      var sorted = rows.slice().sort(function (a, b) {
        var va = cellValue(a, index, kind);
        var vb = cellValue(b, index, kind);
        if (va === null && vb === null) return 0;
        if (va === null) return 1;
        if (vb === null) return -1;
        if (kind === "num") return sign * (va - vb);
        return sign * String(va).localeCompare(String(vb));
      });
      sorted.forEach(function (row) { tbody.appendChild(row); });
    }
    output.textContent = shown + " of " + rows.length + " runs";
  }

  form.addEventListener("input", function () {
    state.q = search.value;
    selects.forEach(function (s) { state[s.name] = s.value; });
    apply();
    writeHash();
  });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  form.addEventListener("reset", function () {
    window.setTimeout(function () {
      keys.forEach(function (k) { state[k] = ""; });
      rows.forEach(function (row) { tbody.appendChild(row); });
      syncControls();
      apply();
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
      apply();
      writeHash();
    });
  });
  window.addEventListener("hashchange", function () {
    readHash();
    syncControls();
    apply();
  });

  readHash();
  syncControls();
  apply();
})();
