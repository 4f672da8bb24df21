// The pending list follows the server: a request decided elsewhere leaves, a new one appears.
(function () {
  if (document.body.dataset.live !== "1" || !window.EventSource) return;
  var base = document.querySelector("base").getAttribute("href");
  var source = new EventSource(base + "events");
  source.addEventListener("pending", function () {
    fetch(base + "?fragment=1" + window.location.search.replace(/^\?/, "&"),
          {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (rows) { if (rows !== null) document.getElementById("pending").innerHTML = rows; });
  });
})();
