// The official TypeScript SDK client as an imp in a box: one scripted
// session through impgw at the URL argv[2] names, each step's outcome
// one JSON line on stdout ({"step":...,"ok":...} or
// {"step":...,"error":{"code":...,"message":...}}), which the box's log
// keeps. It reaches the door as any box reaches anything: HTTPS_PROXY
// with the run's token, NODE_EXTRA_CA_CERTS the yard's CA, both given
// by impsup.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ProxyAgent, fetch as ufetch } from "undici";

const proxy = new URL(process.env.HTTPS_PROXY);
const agent = new ProxyAgent({
  uri: proxy.origin,
  token: "Basic " + Buffer.from(decodeURIComponent(proxy.username) + ":" + decodeURIComponent(proxy.password)).toString("base64"),
  requestTls: { ca: readFileSync(process.env.NODE_EXTRA_CA_CERTS) },
});
const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]), {
  fetch: (url, init) => ufetch(url, { ...init, dispatcher: agent }),
});
const client = new Client({ name: "impyard-box", version: "1.0.0" });

function out(v) {
  process.stdout.write(JSON.stringify(v) + "\n");
}

async function step(name, f) {
  const start = Date.now();
  try {
    out({ step: name, ok: await f(), ms: Date.now() - start });
  } catch (e) {
    out({ step: name, error: { code: e.code ?? null, message: String(e.message ?? e) }, ms: Date.now() - start });
  }
}

const call = (name, args, opts = {}) => client.callTool({ name, arguments: args }, undefined, { timeout: 30000, ...opts });

await step("connect", async () => {
  await client.connect(transport);
  return client.getServerVersion();
});
await step("list", () => client.listTools());
await step("allowed", () => call("echo", { message: "hello from the box" }));
await step("denied", () => call("get-tiny-image", {}));
await step("outside", () => call("echo", { message: "exfiltrate" }));
await step("gated", () => call("get-sum", { a: 2, b: 3 }));
await step("progress", async () => {
  const progress = [];
  const r = await call("trigger-long-running-operation", { duration: 1, steps: 4 }, { onprogress: (p) => progress.push(p) });
  return { result: r, progress };
});
await step("cancel", async () => {
  const ac = new AbortController();
  const p = call("trigger-long-running-operation", { duration: 50, steps: 50 }, {
    signal: ac.signal,
    onprogress: () => ac.abort("enough"),
  });
  return await p;
});
// The test kills the server once it has this call: the 59 marks it.
await step("crash", () => call("trigger-long-running-operation", { duration: 59, steps: 59 }));
await step("after", () => call("echo", { message: "hello again" }));
await client.close();
