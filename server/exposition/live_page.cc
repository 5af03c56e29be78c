#include "server/exposition/live_page.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/selector.h"
#include "server/core/json_lines.h"
#include "torchmon/protocol/json.h"

namespace torchmon::server {
namespace {

using protocol::JsonString;

constexpr absl::string_view kHtml = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>torchmond</title>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
  header { background: #1d2330; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 16px; margin: 0; }
  #status { color: #9fb3c8; }
  main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(260px, 1fr); gap: 16px; padding: 16px; }
  section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 8px 12px; }
  h2 { font-size: 14px; margin: 4px 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #eef0f3; white-space: nowrap; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .drops { color: #b3261e; font-weight: 600; }
  #charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 12px; }
  .chart h3 { font-size: 13px; margin: 2px 0; }
  .legend span { margin-right: 10px; font-size: 11px; }
  .legend i { display: inline-block; width: 10px; height: 3px; margin-right: 3px; vertical-align: middle; }
  svg { width: 100%; height: 160px; background: #fbfcfd; border: 1px solid #eef0f3; }
  #events li { margin-bottom: 4px; list-style: none; }
  #events ul { padding: 0; margin: 0; }
  .muted { color: #6b7585; }
</style>
</head>
<body>
<header><h1>torchmond</h1>
  <input id="filter" placeholder="stat, e.g. train.* (Enter)" size="28">
  <select id="sort"><option value="drops">most drops first</option><option value="recent">most recent first</option></select>
  <span id="status">loading…</span></header>
<main>
  <div>
    <section><h2>Recent windows</h2><div id="charts"></div></section>
    <section style="margin-top:16px"><h2>Series <span id="shown" class="muted"></span></h2>
      <table><thead><tr><th>stat</th><th>labels</th><th>last window</th><th>accepted</th><th>dropped</th></tr></thead>
      <tbody id="series"></tbody></table>
    </section>
  </div>
  <section id="events"><h2>Events</h2><ul id="event-list"></ul></section>
</main>
<script>
"use strict";
// The daemon answers bounded lists whatever it holds: the LIMIT series that
// matter most (drops first) among those the filter matches, and the charts
// of the first MAX_CHARTS stats among them, CHART_SERIES series each.
const REFRESH_MS = 2000, WINDOWS = 60, MAX_CHARTS = 12, LIMIT = 100, CHART_SERIES = 16;
const params = new URLSearchParams(location.search);
const filter = document.getElementById("filter"), sort = document.getElementById("sort");
filter.value = params.get("stat") || "";
sort.value = params.get("sort") === "recent" ? "recent" : "drops";
const remember = () => {
  const p = new URLSearchParams();
  if (filter.value) p.set("stat", filter.value);
  if (sort.value !== "drops") p.set("sort", sort.value);
  history.replaceState(null, "", p.toString() ? "?" + p : location.pathname);
  refresh();
};
filter.addEventListener("change", remember);
sort.addEventListener("change", remember);
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const el = (tag, attrs = {}, text) => {
  const e = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};
const num = v => typeof v === "number" ? v : NaN;  // "NaN", "+Inf", "-Inf" are strings
const fmt = v => typeof v === "number" ? (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : +v.toPrecision(6)) : String(v);
const labelText = labels => Object.entries(labels).map(([k, v]) => k + "=" + v).join(",") || "-";
async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}
function renderSeries(series) {
  const body = document.getElementById("series");
  body.replaceChildren();
  for (const s of series) {
    const tr = el("tr", {"data-stat": s.stat});
    const last = s.last_window ? Object.entries(s.last_window.aggregates).map(([a, v]) => a + "=" + fmt(v)).join(" ") : "—";
    const c = s.counters, dropped = c.capped + c.late + c.skewed + c.client;
    tr.append(el("td", {}, s.stat), el("td", {}, labelText(s.labels)), el("td", {}, last),
              el("td", {class: "num"}, String(c.accepted)),
              el("td", {class: "num" + (dropped ? " drops" : "")}, String(dropped)));
    body.append(tr);
  }
}
function renderChart(stat, windows) {
  const box = el("div", {class: "chart", "data-chart": stat});
  box.append(el("h3", {}, stat));
  const bySeries = new Map();
  for (const w of windows) {
    const key = labelText(w.labels);
    if (!bySeries.has(key)) bySeries.set(key, []);
    bySeries.get(key).push(w);
  }
  const line = w => num(w.aggregates.mean ?? w.aggregates.value ?? w.aggregates.p50 ?? w.aggregates.sum ?? w.aggregates.max);
  // Quantile aggregates ("p50", "p99.9"), each drawn as a dashed line.
  const quantiles = w => Object.keys(w.aggregates).filter(a => /^p[0-9]/.test(a));
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const w of windows) {
    x0 = Math.min(x0, w.end_ms); x1 = Math.max(x1, w.end_ms);
    for (const v of [line(w), num(w.aggregates.min), num(w.aggregates.max), ...quantiles(w).map(q => num(w.aggregates[q]))]) {
      if (Number.isFinite(v)) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
    }
  }
  if (!(y1 >= y0)) { y0 = 0; y1 = 1; }
  if (y1 === y0) { y0 -= 1; y1 += 1; }
  if (x1 === x0) { x0 -= 1000; x1 += 1000; }
  const W = 400, H = 160, P = 4;
  const X = t => P + (t - x0) / (x1 - x0) * (W - 2 * P);
  const Y = v => H - P - (v - y0) / (y1 - y0) * (H - 2 * P);
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none"});
  const legend = el("div", {class: "legend"});
  let i = 0;
  for (const [key, ws] of bySeries) {
    const color = COLORS[i++ % COLORS.length];
    const band = ws.filter(w => Number.isFinite(num(w.aggregates.min)) && Number.isFinite(num(w.aggregates.max)));
    if (band.length > 1) {
      const pts = band.map(w => `${X(w.end_ms)},${Y(num(w.aggregates.max))}`)
        .concat(band.slice().reverse().map(w => `${X(w.end_ms)},${Y(num(w.aggregates.min))}`));
      svg.append(el("polygon", {svg: 1, points: pts.join(" "), fill: color, "fill-opacity": "0.15", stroke: "none"}));
    }
    const pts = ws.filter(w => Number.isFinite(line(w))).map(w => `${X(w.end_ms)},${Y(line(w))}`);
    if (pts.length) {
      svg.append(el("polyline", {svg: 1, points: pts.join(" "), fill: "none", stroke: color, "stroke-width": "2", "vector-effect": "non-scaling-stroke"}));
    }
    for (const q of [...new Set(ws.flatMap(quantiles))]) {
      const qpts = ws.filter(w => Number.isFinite(num(w.aggregates[q]))).map(w => `${X(w.end_ms)},${Y(num(w.aggregates[q]))}`);
      if (qpts.length) {
        svg.append(el("polyline", {svg: 1, "data-quantile": q, points: qpts.join(" "), fill: "none", stroke: color, "stroke-width": "1.5", "stroke-dasharray": "4 3", "vector-effect": "non-scaling-stroke"}));
      }
    }
    const item = el("span"); const swatch = el("i"); swatch.style.background = color;
    item.append(swatch, document.createTextNode(key)); legend.append(item);
  }
  svg.append(el("text", {svg: 1, x: 6, y: 14, "font-size": "11", fill: "#6b7585"}, fmt(y1)),
             el("text", {svg: 1, x: 6, y: H - 6, "font-size": "11", fill: "#6b7585"}, fmt(y0)));
  box.append(svg, legend);
  return box;
}
function renderEvents(events) {
  const list = document.getElementById("event-list");
  list.replaceChildren();
  for (const e of events.slice().reverse()) {
    const li = el("li", {"data-event": e.name});
    li.append(el("b", {}, e.name), document.createTextNode(" "),
              el("span", {class: "muted"}, e.timestamp.slice(11, 23) + " " + labelText(e.labels)),
              el("div", {}, Object.entries(e.data).map(([k, v]) => k + "=" + fmt(v)).join(" ")));
    list.append(li);
  }
  if (!events.length) list.append(el("li", {class: "muted"}, "no events yet"));
}
async function refresh() {
  try {
    const query = "limit=" + LIMIT + "&sort=" + sort.value +
                  (filter.value ? "&stat=" + encodeURIComponent(filter.value) : "");
    const {series, matched} = await get("/api/series?" + query);
    renderSeries(series);
    document.getElementById("shown").textContent =
      matched > series.length ? "(" + series.length + " of " + matched + ")" : "";
    const stats = [...new Set(series.map(s => s.stat))].slice(0, MAX_CHARTS);
    const charts = await Promise.all(stats.map(async s =>
      renderChart(s, (await get("/api/windows?stat=" + encodeURIComponent(s) + "&last=" + WINDOWS + "&series=" + CHART_SERIES)).windows)));
    document.getElementById("charts").replaceChildren(...charts);
    renderEvents((await get("/api/events?last=50")).events);
    document.getElementById("status").textContent =
      matched + " series · updated " + new Date().toLocaleTimeString();
  } catch (err) {
    document.getElementById("status").textContent = "error: " + err.message;
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
)html";

}  // namespace

absl::string_view LivePage::Html() { return kHtml; }

std::string LivePage::SeriesJson(const Selector& selector, size_t limit,
                                 Aggregator::SeriesOrder order) const {
  std::vector<std::string> elements;
  size_t matched = 0;
  for (const SeriesSnapshot& s :
       aggregator_.TopSeries(selector, std::clamp<size_t>(limit, 1, kMaxSeries), order, &matched)) {
    std::vector<std::string> aggregations;
    for (const std::string& name : s.spec.AggregationNames()) {
      aggregations.push_back(JsonString(name));
    }
    const SeriesCounters& c = s.counters;
    elements.push_back(absl::StrCat(
        "{\"stat\":", JsonString(s.key->stat), ",\"labels\":", LabelsJson(s.key->labels.get()),
        ",\"aggregations\":[", absl::StrJoin(aggregations, ","), "],\"window_ms\":",
        s.spec.window_ms, ",\"counters\":{\"accepted\":", c.accepted, ",\"capped\":", c.capped,
        ",\"late\":", c.late, ",\"skewed\":", c.skewed, ",\"client\":", c.client_dropped,
        "},\"last_window\":", s.has_last_window ? WindowJsonLine(s.last_window) : "null", "}"));
  }
  return absl::StrCat("{\"series\":[", absl::StrJoin(elements, ","), "],\"matched\":", matched,
                      "}\n");
}

std::string LivePage::WindowsJson(const std::string& stat, size_t last, size_t max_series) const {
  Selector selector;
  selector.name = stat;
  const Aggregator::WindowFilter filter{0, 0, std::clamp<size_t>(last, 1, 1000)};
  max_series = std::clamp<size_t>(max_series, 1, kMaxChartSeries);
  std::vector<std::string> elements;
  size_t series = 0;
  std::shared_ptr<const SeriesKey> previous;
  std::optional<Aggregator::WindowCursor> from;
  // Chunk by chunk, in key order, until max_series series had windows.
  do {
    Aggregator::WindowsChunk chunk =
        aggregator_.GetWindowsChunk(selector, filter, from ? &*from : nullptr, 1000);
    for (const ClosedWindow& w : chunk.windows) {
      if (w.series->stat != stat) continue;  // the name, not a glob
      if (previous == nullptr || !(*w.series == *previous)) {
        if (++series > max_series) {
          return absl::StrCat("{\"windows\":[", absl::StrJoin(elements, ","), "]}\n");
        }
        previous = w.series;
      }
      elements.push_back(WindowJsonLine(w));
    }
    from = std::move(chunk.resume);
  } while (from.has_value());
  return absl::StrCat("{\"windows\":[", absl::StrJoin(elements, ","), "]}\n");
}

std::string LivePage::EventsJson(size_t last) const {
  std::vector<std::string> elements;
  for (const EventRecord& e : events_.Get(Selector{}, 0, last)) {
    elements.push_back(EventJsonLine(e));
  }
  return absl::StrCat("{\"events\":[", absl::StrJoin(elements, ","), "]}\n");
}

}  // namespace torchmon::server
