// gRPC failures become the client's errors with the status and the server's message; TLS with a
// token or a client certificate; the session id travels as metadata too.

import assert from "node:assert/strict";
import { createServer } from "node:http2";
import { createServer as createNetServer } from "node:net";
import { after, before, test } from "node:test";

import {
  DeadlineExceeded, InputError, InvalidRequest, NotFound, SESSION_HEADER, ToolGate, ToolGateError, Unauthenticated,
  Unavailable,
} from "@toolgate/client";

import * as sdk from "./sdk.mjs";
import { AGENT_TOKEN, BASE, certs, start, tlsConfig } from "./server.mjs";

const ECHO = [{ id: "e1", name: "echo", arguments: { text: "over tls" } }];
let plain;
let secure;
let c;
before(async () => {
  c = certs();
  [plain, secure] = await Promise.all([start(), start(tlsConfig(c), { TG_AGENT: AGENT_TOKEN })]);
});
after(() => {
  plain.stop();
  secure.stop();
});

const using = async (options, body) => {
  const tg = new ToolGate(options);
  try {
    return await body(tg);
  } finally {
    tg.close();
  }
};

test("a request the server refuses is InvalidRequest with its message", () => using({ address: plain.addr }, async (tg) => {
  await assert.rejects(tg.dispatch({ role: "assistant" }), (e) =>
    e instanceof InvalidRequest && e.code === "INVALID_ARGUMENT" && /no tool call/.test(e.details));
}));

test("unknown and malformed approval ids", () => using({ address: plain.addr }, async (tg) => {
  await assert.rejects(tg.resolveApproval("0123456789abcdef0123456789abcdef", true), (e) => e instanceof NotFound);
  await assert.rejects(tg.resolveApproval("nope", true), (e) => e instanceof InvalidRequest);
}));

test("a deadline that passes is DeadlineExceeded", () => using({ address: plain.addr }, async (tg) => {
  await assert.rejects(tg.dispatch([{ id: "s1", name: "sleep", arguments: { ms: 3000 } }], { timeoutMs: 300 }),
    (e) => e instanceof DeadlineExceeded);
}));

test("no server is Unavailable", async () => {
  const port = await new Promise((resolve) => {
    const s = createNetServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  await using({ address: `127.0.0.1:${port}`, timeoutMs: 5000 }, async (tg) => {
    await assert.rejects(tg.dispatch(ECHO), (e) => e instanceof Unavailable && e instanceof ToolGateError);
  });
});

test("TLS with a token, and with the server name picked", async () => {
  await using({ address: secure.addr, token: AGENT_TOKEN, tls: { ca: c.read("ca.pem") } }, async (tg) => {
    const out = await tg.dispatch(ECHO, { sessionId: "ts-tls" });
    assert.equal(out.results[0].content, '{"text":"over tls"}');
    assert.ok((await tg.tools()).some((t) => t.function.name === "echo"));
  });
  await using({ address: secure.addr, token: AGENT_TOKEN, tls: { ca: c.read("ca.pem"), serverName: "toolgate.test" } },
    async (tg) => assert.ok((await tg.dispatch(ECHO)).allSucceeded));
});

test("TLS with a client certificate", () => using({
  address: secure.addr, tls: { ca: c.read("ca.pem"), cert: c.read("client.pem"), key: c.read("client.key") },
}, async (tg) => assert.ok((await tg.dispatch(ECHO)).allSucceeded)));

test("TLS without or with a wrong token is Unauthenticated", async () => {
  for (const token of [undefined, "not-the-token"]) {
    await using({ address: secure.addr, token, tls: { ca: c.read("ca.pem") } }, async (tg) => {
      await assert.rejects(tg.dispatch(ECHO), (e) => e instanceof Unauthenticated && e.code === "UNAUTHENTICATED");
    });
  }
});

test("TLS against the wrong CA is Unavailable", () => using({
  address: secure.addr, token: AGENT_TOKEN, tls: { ca: c.read("other-ca.pem") }, timeoutMs: 10_000,
}, async (tg) => {
  await assert.rejects(tg.dispatch(ECHO), (e) => e instanceof Unavailable);
}));

test("half a client certificate is refused at once", () => {
  assert.throws(() => new ToolGate({ tls: { key: "k" } }), InputError);
});

test("the session id goes as metadata too, for balancers", async () => {
  const seen = [];
  const recorder = createServer((req, res) => {
    seen.push(req.headers);
    res.writeHead(200, { "content-type": "application/grpc", "grpc-status": "12", "grpc-message": "recorder" });
    res.end();
  });
  await new Promise((resolve) => recorder.listen(0, "127.0.0.1", resolve));
  try {
    await using({ address: `127.0.0.1:${recorder.address().port}`, token: "t0k" }, async (tg) => {
      for (const sessionId of ["s-balanced", undefined]) {
        await assert.rejects(tg.dispatch(await sdk.message(), { sessionId }), (e) => e.code === "UNIMPLEMENTED");
      }
    });
  } finally {
    recorder.close();
  }
  const [named, unnamed] = seen;
  assert.equal(named[SESSION_HEADER], "s-balanced");
  assert.equal(named.authorization, "Bearer t0k");
  assert.equal(unnamed[SESSION_HEADER], undefined);
});

test("a name providers refuse is given as an alias that runs its tool", async () => {
  const { createServer: createHttpServer } = await import("node:http");
  const weather = createHttpServer((req, res) => {
    let body = "";
    req.on("data", (d) => { body += d; });
    req.on("end", () => {
      // toolgate POSTs {call_id, session_id, name, input, metadata}.
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ city: JSON.parse(body).input.city, sky: "clear" }));
    });
  });
  await new Promise((resolve) => weather.listen(0, "127.0.0.1", resolve));
  const remote = await start(`${BASE}
[[remotes]]
name = "py"
kind = "http"
prefix = "py."
url = "http://127.0.0.1:${weather.address().port}/weather"
required = true
[remotes.definition]
name = "get_weather"
input_schema = { type = "object", properties = { city = { type = "string" } } }
`);
  try {
    await using({ address: remote.addr }, async (tg) => {
      assert.ok((await tg.listTools()).some((t) => t.name === "py.get_weather"));
      for (const format of ["openai", "openai_responses", "anthropic", "gemini"]) {
        const text = JSON.stringify(await tg.tools(format));
        assert.ok(text.includes('"py_get_weather"') && !text.includes('"py.get_weather"'), format);
      }
      const out = await tg.dispatch([{ id: "w1", name: "py_get_weather", arguments: { city: "Oslo" } }], { format: "anthropic" });
      assert.ok(out.allSucceeded, JSON.stringify(out.failed));
      assert.deepEqual([out.results[0].name, out.results[0].tool], ["py_get_weather", "py.get_weather"]);
      assert.deepEqual(out.results[0].result, { city: "Oslo", sky: "clear" });
    });
  } finally {
    remote.stop();
    weather.close();
  }
});

test("aliases are made anew from each tool list", async () => {
  // After a real tool `x_y` appears, the model's call to `x_y` runs it, not `x.y` (whose alias
  // `x_y` was once).
  const { createServer: createHttpServer } = await import("node:http");
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const pb = await import("../dist/gen/toolgate/v1/toolgate_pb.js");
  const named = createHttpServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ served: req.url }));
    });
  });
  await new Promise((resolve) => named.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${named.address().port}`;
  const remote = await start(`${BASE}
[auth]
anonymous_roles = ["agent", "admin"]
[remote_registration]
enabled = true
egress_allow = ["127.0.0.0/8"]
[[remotes]]
name = "x"
kind = "http"
prefix = "x."
url = "${base}/dotted"
required = true
[remotes.definition]
name = "y"
description = "The dotted tool."
`);
  try {
    await using({ address: remote.addr }, async (tg) => {
      const names = async () => (await tg.tools("openai")).map((t) => t.function.name).filter((n) => n.startsWith("x"));
      assert.deepEqual(await names(), ["x_y"]);
      const admin = createClient(pb.ToolGate, createGrpcTransport({ baseUrl: `http://${remote.addr}` }));
      await admin.registerRemote({
        definition: {
          name: "x-plain", kind: "http", url: `${base}/plain`,
          definition: { name: "x_y", description: "The plain tool." },
        },
      });
      assert.deepEqual((await names()).sort(), ["x_y", "x_y_2"]);
      const out = await tg.dispatch([{ id: "a", name: "x_y", arguments: {} }, { id: "b", name: "x_y_2", arguments: {} }]);
      assert.ok(out.allSucceeded, JSON.stringify(out.failed));
      assert.deepEqual(out.results.map((r) => [r.name, r.tool, r.result]), [
        ["x_y", "x_y", { served: "/plain" }],
        ["x_y_2", "x.y", { served: "/dotted" }],
      ]);
    });
  } finally {
    remote.stop();
    named.close();
  }
});
