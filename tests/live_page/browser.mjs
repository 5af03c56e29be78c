// A real headless Chromium (Debian's, /usr/bin/chromium) driven through
// playwright-core, one JSON command per stdin line, one JSON answer per
// stdout line ({"result": ...} or {"error": "..."}). Driven by browser.py;
// run as
//
//   PLAYWRIGHT_DIR=<dir holding node_modules/playwright-core> node browser.mjs
//
// Commands: {"op": "open", "url", "width", "height", "timezone"?,
// "credentials"?: {"username", "password"}}; {"op": "goto", "url"};
// {"op": "eval", "expr"} (an expression; its JSON value comes back);
// {"op": "wait", "expr", "timeout_ms"}; {"op": "mouse", "x", "y"};
// {"op": "type", "selector", "text", "enter"}; {"op": "screenshot", "path"};
// {"op": "errors"} (the page's uncaught errors and console errors so far).
import { createRequire } from "node:module";
import readline from "node:readline";

const require = createRequire(process.env.PLAYWRIGHT_DIR + "/");
const { chromium } = require("playwright-core");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
let context = null, page = null;
const errors = [];

async function run(cmd) {
  switch (cmd.op) {
    case "open":
      if (context) await context.close();
      context = await browser.newContext({
        viewport: { width: cmd.width || 1400, height: cmd.height || 1000 },
        timezoneId: cmd.timezone || undefined,
        httpCredentials: cmd.credentials || undefined,
      });
      page = await context.newPage();
      page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
      page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
      return (await page.goto(cmd.url)).status();
    case "goto":
      return (await page.goto(cmd.url)).status();
    case "eval":
      return await page.evaluate(cmd.expr);
    case "wait":
      await page.waitForFunction(cmd.expr, null, { timeout: cmd.timeout_ms || 20000, polling: 50 });
      return true;
    case "mouse":
      await page.mouse.move(cmd.x, cmd.y, { steps: 3 });
      return true;
    case "type":
      await page.fill(cmd.selector, cmd.text);
      if (cmd.enter) await page.press(cmd.selector, "Enter");
      return true;
    case "screenshot":
      await page.screenshot({ path: cmd.path });
      return cmd.path;
    case "errors":
      return errors.splice(0);
    default:
      throw new Error("unknown op " + cmd.op);
  }
}

const lines = readline.createInterface({ input: process.stdin });
try {
  for await (const line of lines) {
    if (!line.trim()) continue;
    let answer;
    try {
      answer = { result: (await run(JSON.parse(line))) ?? null };
    } catch (e) {
      answer = { error: String((e && e.stack) || e) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
} finally {
  await browser.close();
}
