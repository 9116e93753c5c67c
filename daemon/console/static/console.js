// Live updates for the console's pages: one EventSource per page. The
// server sends the agents' table already rendered (and escaped) by its
// templates, and a fingerprint of the pending approvals.
"use strict";
(function () {
  if (!document.getElementById("pending-count")) {
    return; // not signed in
  }
  var page = document.body.getAttribute("data-page");
  var seenApprovals = null;
  var es = new EventSource("/events");
  es.addEventListener("agents", function (e) {
    var el = document.getElementById("agents");
    if (el) {
      el.innerHTML = e.data;
    }
  });
  es.addEventListener("approvals", function (e) {
    var parts = e.data.split(" ");
    document.getElementById("pending-count").textContent = parts[0];
    if (seenApprovals !== null && seenApprovals !== parts[1] && page === "approvals") {
      window.location.reload();
    }
    seenApprovals = parts[1];
  });
  es.addEventListener("ended", function () {
    es.close();
    window.location.reload();
  });
})();
