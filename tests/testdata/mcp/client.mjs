// An MCP client built on the official TypeScript SDK, driven line by
// line: each JSON command read from stdin ({"op":"list"},
// {"op":"call","name":...,"arguments":{...}}, with "progress":true to
// answer {"result":...,"progress":[...]}, or {"op":"logs"}: the log
// messages the server sent so far) is answered with one JSON line on
// stdout, {"ok":...} or {"error":{"code":...,"message":...}}.
// It reaches the server through impgw as a box does: HTTPS_PROXY with
// the run's token as proxy credentials, trusting the yard's CA.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
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
const client = new Client({ name: "impyard-e2e", version: "1.0.0" });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));

function out(v) {
  process.stdout.write(JSON.stringify(v) + "\n");
}

try {
  await client.connect(transport);
  out({ ok: { connected: client.getServerVersion() } });
} catch (e) {
  out({ error: { code: e.code ?? null, message: String(e.message ?? e) } });
  process.exit(1);
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const cmd = JSON.parse(line);
  try {
    if (cmd.op === "list") {
      out({ ok: await client.listTools() });
    } else if (cmd.op === "logs") {
      out({ ok: logs });
    } else if (cmd.progress) {
      const progress = [];
      const result = await client.callTool({ name: cmd.name, arguments: cmd.arguments ?? {} }, undefined, {
        timeout: 30000,
        onprogress: (p) => progress.push(p),
      });
      out({ ok: { result, progress } });
    } else {
      out({ ok: await client.callTool({ name: cmd.name, arguments: cmd.arguments ?? {} }, undefined, { timeout: 30000 }) });
    }
  } catch (e) {
    out({ error: { code: e.code ?? null, message: String(e.message ?? e) } });
  }
}
await client.close();
