// The overview's opt-in auto-refresh: while the box is ticked, the page's numbers
// (#outbox-live) are fetched again every data-every seconds and swapped in place.
// The choice is kept in the address (?refresh=1), so a reload or a link keeps it.
"use strict";
(function () {
  const box = document.getElementById("outbox-refresh");
  const note = document.getElementById("outbox-refreshed");
  if (!box || !note) {
    return;
  }
  const every = 1000 * Number(box.dataset.every || 5);
  let timer = null;

  function address(on) {
    const url = new URL(window.location.href);
    if (on) {
      url.searchParams.set("refresh", "1");
    } else {
      url.searchParams.delete("refresh");
    }
    return url;
  }

  function stop(why) {
    box.checked = false;
    window.clearTimeout(timer);
    window.history.replaceState(null, "", address(false));
    note.textContent = why;
  }

  function reload() {
    fetch(address(true), {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
      .then(function (answer) {
        if (!answer.ok) {
          throw new Error("HTTP " + answer.status);
        }
        return answer.text();
      })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("outbox-live");
        if (!fresh) {
          throw new Error("the answer is not the overview (signed out?)");
        }
        document.getElementById("outbox-live").replaceWith(fresh);
        note.textContent = "updated at " + new Date().toLocaleTimeString();
        if (box.checked) {
          timer = window.setTimeout(reload, every);
        }
      })
      .catch(function (error) {
        stop("refresh stopped: " + error.message);
      });
  }

  box.addEventListener("change", function () {
    window.clearTimeout(timer);
    if (box.checked) {
      window.history.replaceState(null, "", address(true));
      note.textContent = "every " + every / 1000 + " s";
      timer = window.setTimeout(reload, every);
    } else {
      stop("");
    }
  });
  if (box.checked) {
    note.textContent = "every " + every / 1000 + " s";
    timer = window.setTimeout(reload, every);
  }
})();
