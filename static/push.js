// The queue's doorbell (a static file: the Content-Security-Policy allows no inline script).
// Listens to the events process's stream (reviews/doorbell.py) and fires "queueChanged" on
// <body>, which the queue's poll answers at once: at most one every 2 s, however many cards ring,
// a moment later than the ring (up to 400 ms, at random) so that the pages' polls do not come
// all at once; <body data-ring="due"> meanwhile.
// A "cards" event is let pass when the page has every card it names at that version already
// (its own action's echo) and the others cannot appear on it: a first page with more reviews
// after it shows the longest waiting, so not a card that waits since after its last one (on a
// later page a card gone before it shifts it). The count of waiting reviews then waits for the
// slow poll. While the stream is up <body data-push="live"> slows the poll down; EventSource
// reconnects by itself, and its first event (the clock) resyncs the page.
(function () {
  "use strict";
  var url = document.currentScript && document.currentScript.getAttribute("data-events-url");
  if (!url || !window.EventSource || !window.htmx) { return; }
  var EVERY = 2000;
  var SPREAD = 400;  // every page hears a ring at the same moment: their polls spread over this
  var last = -EVERY;
  var due = null;

  function ring() {
    if (due !== null) { return; }  // a poll is coming: it reads whatever rang since
    var wait = Math.max(last + EVERY - Date.now(), 0) + Math.random() * SPREAD;
    document.body.dataset.ring = "due";
    due = setTimeout(function () {
      due = null;
      delete document.body.dataset.ring;
      last = Date.now();
      window.htmx.trigger(document.body, "queueChanged");
    }, wait);
  }

  function concerns(cards) {
    var foot = document.querySelector("#queue-foot [data-clock]");
    var more = foot !== null && foot.hasAttribute("data-more");
    var last = Math.max.apply(null, Array.prototype.map.call(
      document.querySelectorAll("#queue-rows .age[data-since]"),
      function (age) { return Date.parse(age.getAttribute("data-since")); }));
    return cards.some(function (card) {
      var row = document.querySelector('#queue-rows [data-card="' + card[0] + '"]');
      if (!row) { return !more || card[2] === null || !(card[2] > last); }
      var shown = parseInt(row.getAttribute("data-version"), 10);  // NaN: a decided line
      return !(shown >= card[1]);
    });
  }

  var source = new EventSource(url, { withCredentials: true });
  source.addEventListener("open", function () { document.body.dataset.push = "live"; });
  source.addEventListener("error", function () { delete document.body.dataset.push; });
  source.addEventListener("clock", ring);
  source.addEventListener("cards", function (event) {
    var cards = null;
    try { cards = JSON.parse(event.data).cards; } catch (e) { /* rung anyway, below */ }
    if (!Array.isArray(cards) || concerns(cards)) { ring(); }
  });
})();
