// The desk's small scripts (a static file: the Content-Security-Policy allows no inline script).
// 1. Tell the server the reviewer's time zone, so pages show times in it.
// 2. Keyboard shortcuts on the queue and the ticket page (shown on the page).
// 3. The ticket page's poll keeps the reader where they were on the page.
// 4. The queue's poll: when to poll (backoff, hidden tabs), what the page shows, and the ages.
(function () {
  "use strict";
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (zone && document.cookie.indexOf("tz=" + zone) === -1) {
      document.cookie = "tz=" + zone + "; path=/; max-age=31536000; SameSite=Lax";
    }
  } catch (e) { /* no Intl: the server's time zone it is */ }

  var currentId = null;
  var currentIndex = -1;

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-review]"));
  }

  function current() {
    var all = rows();
    if (all.length === 1) { return all[0]; }
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute("data-review") === currentId) { return all[i]; }
    }
    return null;
  }

  function select(row) {
    rows().forEach(function (r) { r.classList.remove("current"); });
    if (!row) { currentId = null; currentIndex = -1; return; }
    currentId = row.getAttribute("data-review");
    currentIndex = rows().indexOf(row);
    row.classList.add("current");
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) { return; }
    var at = all.indexOf(current());
    var next = at === -1 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
    select(all[next]);
  }

  function press(row, selector) {
    var button = row && row.querySelector(selector);
    if (button && !button.disabled) { button.click(); return true; }
    return false;
  }

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT" || target.isContentEditable);
    if (typing) {
      // In a reason box, Ctrl+Enter rejects with it.
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && target.classList.contains("reason")) {
        var form = target.form;
        var reject = form && form.querySelector("button[name=reject]");
        if (reject) { event.preventDefault(); reject.click(); }
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var row = current();
    switch (event.key) {
      case "j": case "n": move(1); break;
      case "k": case "p": move(-1); break;
      case "c": press(row, "button[name=claim]"); break;
      case "a": press(row, "button[name=approve]"); break;
      case "r":
        var reason = row && row.querySelector("textarea.reason");
        var box = reason && reason.closest("details");
        if (box) { box.open = true; }
        if (reason) { event.preventDefault(); reason.focus(); }
        break;
      case "o": press(row, "a.open-ticket"); break;
      default: return;
    }
  });

  // A swapped row is a new element: keep the reviewer's place in the queue. A review just
  // decided became a one-line outcome (or left): the selection moves on to the next review, so
  // `a` after `a` works with no `j` between.
  document.addEventListener("htmx:afterSettle", function () {
    if (currentId === null) { return; }
    var row = current();
    if (row) {
      if (rows().length > 1) { row.classList.add("current"); }
      currentIndex = rows().indexOf(row);
      return;
    }
    var gone = document.getElementById("review-" + currentId);
    var next = gone && gone.nextElementSibling;
    while (next && !next.hasAttribute("data-review")) { next = next.nextElementSibling; }
    var all = rows();
    if (!next && !gone && all.length) { next = all[Math.min(currentIndex, all.length - 1)]; }
    if (next) { select(next); }
  });

  // The ticket's region is drawn anew by each poll, and a field the reviewer is typing in is
  // kept (hx-preserve): moved back into the new region, the browser scrolls it into view, so
  // a reviewer who typed a quantity and scrolled down to "Approve" was taken back up every
  // 2 s. A swap of that region keeps the page where the reader left it.
  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    kept = event.detail.target && event.detail.target.id === "ticket-status" ? window.scrollY : null;
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (kept !== null && window.scrollY !== kept) { window.scrollTo(window.scrollX, kept); }
    kept = null;
  });

  // A queue card's orders, opened to answer them one by one, stay open when the card is drawn
  // anew (the rows' poll when a review comes or goes, an answer refused): the answers are kept
  // by hx-preserve, and must stay in view with "Save the answers per order".
  var openOrders = new Set();
  document.addEventListener("toggle", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("order-lines-box")) { return; }
    if (box.open) { openOrders.add(box.id); } else { openOrders.delete(box.id); }
  }, true);
  document.addEventListener("htmx:afterSwap", function () {
    openOrders.forEach(function (id) {
      var box = document.getElementById(id);
      if (box && !box.open) { box.open = true; }
    });
  });

  // The queue's foot polls (reviews/views/queue.py): it sends the change clock it last saw and
  // the cards it shows, and gets a 204 or the cards that changed. Every 2 s after a card
  // changed, slower while none does (up to 30 s), the slow pace while a push stream is live
  // (static/push.js rings queueChanged), never while the tab is hidden. An action or a push
  // polls at once and starts again at 2 s.
  var FAST = 2000, SLOW = 30000, delay = FAST, timer = null;
  function foot() { return document.getElementById("queue-foot"); }
  function schedule() {
    clearTimeout(timer);
    if (!foot() || document.hidden) { return; }
    var wait = document.body.dataset.push === "live" ? SLOW : delay;
    timer = setTimeout(function () { var f = foot(); if (f) { htmx.trigger(f, "queuePoll"); } }, wait);
  }
  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.elt.id !== "queue-foot") { return; }
    var shown = Array.prototype.map.call(document.querySelectorAll("#queue-rows [data-card]"), function (row) {
      return row.getAttribute("data-card") + ":" + (row.getAttribute("data-version") || "");
    });
    var clock = document.querySelector("#queue-foot [data-clock]");
    event.detail.parameters.clock = clock ? clock.getAttribute("data-clock") : "";
    event.detail.parameters.shown = shown.join(",");
  });
  // A poll that drew or took away cards rings ticketsChanged (its answer's HX-Trigger, before
  // this): the fast pace again. A 204, or a clock that moved for other queues' cards only, or a
  // failure: slower.
  var drew = false;
  document.body.addEventListener("ticketsChanged", function () { drew = true; });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt.id !== "queue-foot") { return; }
    delay = drew ? FAST : Math.min(delay * 2, SLOW);
    drew = false;
    schedule();
  });
  document.body.addEventListener("queueChanged", function () { delay = FAST; });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { clearTimeout(timer); return; }
    delay = FAST;
    var f = foot();
    if (f) { htmx.trigger(f, "queuePoll"); }
  });
  schedule();

  // How long each review has waited, kept current between the cards' redraws (as the server
  // words it: reviews/templatetags/desk.py, waited).
  function waited(since) {
    var minutes = Math.max(Math.floor((Date.now() - since) / 60000), 0);
    if (minutes < 60) { return minutes + " min"; }
    if (minutes < 48 * 60) { return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min"; }
    return Math.floor(minutes / (24 * 60)) + " days";
  }
  setInterval(function () {
    document.querySelectorAll("#queue-rows .age[data-since]").forEach(function (age) {
      var since = Date.parse(age.getAttribute("data-since"));
      if (!isNaN(since)) { age.textContent = waited(since); }
    });
  }, 20000);
})();
