/* django_sqlq: keep parts of an admin page fresh without reloading it.
 *
 * An element with data-sqlq-refresh="URL" gets its content replaced by the HTML fragment
 * at URL every data-sqlq-interval seconds (default 5; 0: once), while the tab is visible.
 * data-sqlq-load="now" fetches once right after the page loads. data-sqlq-reload-on-final
 * reloads the whole page when the fragment holds an element with data-sqlq-final (the job
 * on this page has finished, so its result and error are worth showing).
 * Same-origin fetches only; no external requests.
 */
(function () {
  "use strict";

  function start(el) {
    var url = el.getAttribute("data-sqlq-refresh");
    var interval = parseFloat(el.getAttribute("data-sqlq-interval"));
    if (isNaN(interval)) {
      interval = 5;
    }
    var busy = false;

    function schedule() {
      if (interval > 0) {
        window.setTimeout(tick, interval * 1000);
      }
    }

    function tick(force) {
      if (busy || (document.hidden && !force)) {
        schedule();
        return;
      }
      busy = true;
      window
        .fetch(url, {
          credentials: "same-origin",
          headers: { "X-Requested-With": "XMLHttpRequest" },
        })
        .then(function (response) {
          // A redirect means the session ended (the login page): keep what is shown.
          if (!response.ok || response.redirected) {
            throw new Error("HTTP " + response.status);
          }
          return response.text();
        })
        .then(function (html) {
          busy = false;
          el.innerHTML = html;
          el.classList.remove("sqlq-stale");
          el.setAttribute("data-sqlq-updated", String(Date.now()));
          if (el.hasAttribute("data-sqlq-reload-on-final") && el.querySelector("[data-sqlq-final]")) {
            window.location.reload();
            return;
          }
          schedule();
        })
        .catch(function () {
          busy = false;
          el.classList.add("sqlq-stale");
          schedule();
        });
    }

    if (el.getAttribute("data-sqlq-load") === "now") {
      tick(true);
    } else {
      schedule();
    }
  }

  function init() {
    var elements = document.querySelectorAll("[data-sqlq-refresh]");
    for (var i = 0; i < elements.length; i++) {
      start(elements[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
