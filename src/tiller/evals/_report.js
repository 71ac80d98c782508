// The report's behaviour: draw the plots, jump from a plot's point to its run, open the
// run the address names, and filter the runs table. No network: plotly.js is inlined.
(function () {
  "use strict";

  // A run's section is a closed <details>: open the one the address names and bring it
  // into view (on load, and whenever a link or a plot's point changes the hash).
  function openTarget() {
    var id;
    try {
      id = decodeURIComponent(window.location.hash.slice(1));
    } catch (error) {
      return; // an address typed by hand with a stray "%": nothing on the page to open
    }
    if (!id) return;
    var target = document.getElementById(id);
    if (!target) return;
    if (target.tagName === "DETAILS") target.open = true;
    target.scrollIntoView({ block: "start" });
  }

  function anchorOf(point) {
    if (typeof point.customdata === "string") return point.customdata;
    // A histogram's bar is many runs: its first run.
    var data = point.data && point.data.customdata;
    if (data && point.pointNumbers && point.pointNumbers.length) {
      return data[point.pointNumbers[0]];
    }
    return null;
  }

  function drawPlots() {
    var figures = JSON.parse(document.getElementById("tiller-figures").textContent);
    var drawn = figures.map(function (figure) {
      var element = document.getElementById(figure.id);
      return window.Plotly.newPlot(element, figure.figure.data, figure.figure.layout, {
        responsive: true,
        displaylogo: false,
        modeBarButtonsToRemove: ["select2d", "lasso2d"],
      }).then(function () {
        element.on("plotly_click", function (event) {
          var anchor = event.points.length ? anchorOf(event.points[0]) : null;
          if (anchor) window.location.hash = anchor;
        });
      });
    });
    Promise.all(drawn).then(function () {
      document.body.setAttribute("data-plots", "drawn");
    });
  }

  function filterRuns() {
    var buttons = document.querySelectorAll(".filters button");
    buttons.forEach(function (button) {
      button.addEventListener("click", function () {
        var wanted = button.getAttribute("data-filter");
        buttons.forEach(function (other) {
          other.setAttribute("aria-pressed", String(other === button));
        });
        document.querySelectorAll("table.runs tbody tr").forEach(function (row) {
          var standing = row.getAttribute("data-standing");
          row.hidden = !(wanted === "all" || standing === wanted);
        });
      });
    });
  }

  window.addEventListener("hashchange", openTarget);
  filterRuns();
  drawPlots();
  openTarget();
})();
