// The queue's doorbell (a static file: the Content-Security-Policy allows no inline script).
// Listens to the events process's stream (reviews/doorbell.py) and, on each event, fires
// "queueChanged" on <body>, which the queue's poll answers at once: at most one every 500 ms,
// however many cards ring. While the stream is up <body data-push="live"> slows the poll down;
// EventSource reconnects by itself, and its first event (the clock) resyncs the page.
(function () {
  "use strict";
  var url = document.currentScript && document.currentScript.getAttribute("data-events-url");
  if (!url || !window.EventSource || !window.htmx) { return; }
  var last = 0;
  var due = null;

  function ring() {
    var wait = last + 500 - Date.now();
    if (wait > 0) {
      if (due === null) { due = setTimeout(function () { due = null; ring(); }, wait); }
      return;
    }
    last = Date.now();
    window.htmx.trigger(document.body, "queueChanged");
  }

  var source = new EventSource(url, { withCredentials: true });
  source.addEventListener("open", function () { document.body.dataset.push = "live"; });
  source.addEventListener("error", function () { delete document.body.dataset.push; });
  source.addEventListener("clock", ring);
  source.addEventListener("cards", ring);
})();
