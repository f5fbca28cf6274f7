/* The page's state in its address, read and written here only: the keys after the #
   (#at=32K-8&pct=p99&slo=…), each script owning its own and keeping the others'.
   Loaded on every page before the other scripts (templates/base.html). */
(function () {
  "use strict";
  function base() { return window.location.href.split("#")[0]; }

  /* The address's keys, as URLSearchParams (a copy: change it, then `replace` it). */
  function params() { return new URLSearchParams(window.location.hash.replace(/^#/, "")); }

  /* One key's value, or null. */
  function get(key) { return params().get(key); }

  /* The address with these keys (URLSearchParams or its text), in place: no history
     entry. Returns the text after the #. */
  function replace(p) {
    var text = typeof p === "string" ? p : p.toString();
    window.history.replaceState(null, "", text ? base() + "#" + text : base());
    return text;
  }

  /* A new history entry with this hash ("#…"), unless the address has it already. */
  function push(hash) {
    if (hash !== window.location.hash) window.history.pushState(null, "", base() + hash);
  }

  /* The hash as it is now ("#…" or ""), to tell whether it changed. */
  function hash() { return window.location.hash; }

  window.SpeedMatrixAddress = { params: params, get: get, replace: replace, push: push,
                                hash: hash };
})();
