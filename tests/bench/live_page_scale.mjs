// Loads torchmond's live page in Debian's headless Chromium (playwright-core)
// and prints, as one JSON line: the time to the first full render (the
// series table and the charts drawn), the tab's JS heap and DOM node count
// after 3 refreshes, and the bytes the /api/* answers of the first refresh
// carried. Run by tests/bench/live_page_scale.py.
//
//   node live_page_scale.mjs http://127.0.0.1:PORT/
import { chromium } from "playwright-core";

const url = process.argv[2];
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const apiBytes = {};
  page.on("response", async (r) => {
    const path = new URL(r.url()).pathname;
    if (!path.startsWith("/api/")) return;
    try {
      apiBytes[path] = (apiBytes[path] || 0) + (await r.body()).length;
    } catch (e) { /* the page moved on */ }
  });
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForFunction(() =>
    document.querySelectorAll("#series tr").length > 0 &&
    document.querySelectorAll("#charts .chart").length > 0 &&
    /series · updated/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  const firstRenderMs = Date.now() - t0;
  const firstBytes = { ...apiBytes };
  await page.waitForTimeout(6500);  // three more refreshes
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Performance.enable");
  const { metrics } = await cdp.send("Performance.getMetrics");
  const m = Object.fromEntries(metrics.map((x) => [x.name, x.value]));
  const shown = await page.evaluate(() => ({
    rows: document.querySelectorAll("#series tr").length,
    charts: document.querySelectorAll("#charts .chart").length,
    status: document.getElementById("status").textContent,
  }));
  console.log(JSON.stringify({
    first_render_ms: firstRenderMs,
    js_heap_used_mb: m.JSHeapUsedSize / 1e6,
    dom_nodes: m.Nodes,
    first_refresh_api_bytes: firstBytes,
    ...shown,
  }));
} finally {
  await browser.close();
}
