// The real toolgate binary on a free port (plaintext, and TLS with tokens and client
// certificates from a CA made by openssl at test time), for the tests.

import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const REPO = new URL("../../../", import.meta.url).pathname;
export const AGENT_TOKEN = "tg-agent-5c07d2e1";

/** TOOLGATE_BIN, else the repository's release build, else its debug build. */
export function binary() {
  if (process.env.TOOLGATE_BIN) return process.env.TOOLGATE_BIN;
  for (const profile of ["release", "debug"]) {
    const path = join(REPO, "target", profile, "toolgate");
    if (existsSync(path)) return path;
  }
  throw new Error("no toolgate binary: build it (cargo build --release) or set TOOLGATE_BIN");
}

export const BASE = `
[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[approvals]
timeout = "20s"
# The opt-in setup the approve callbacks serve: the agent asks the person at its terminal.
requester_may_answer = true
[[hooks.rules]]
id = "risky"
tools = "echo"
action = "ask"
reason = "a risky echo"
[[hooks.rules.when]]
pointer = "/text"
regex = "^risky"
`;

/** Starts toolgate from `config`; resolves to { addr, stop }. */
export async function start(config = BASE, env = {}) {
  const dir = mkdtempSync(join(tmpdir(), "toolgate-ts-"));
  writeFileSync(join(dir, "toolgate.toml"), config);
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("TOOLGATE_")));
  const child = spawn(binary(), ["--config", join(dir, "toolgate.toml")], {
    env: { ...clean, ...env }, stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (d) => { log += d; });
  const lines = createInterface({ input: child.stdout });
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`toolgate did not start: ${log}`)), 60_000);
    lines.on("line", (line) => {
      if (line.startsWith("listening on ")) { clearTimeout(timer); resolve(line.split(" ").pop()); }
    });
    child.on("exit", (code) => { clearTimeout(timer); reject(new Error(`toolgate exited ${code}: ${log}`)); });
  });
  return {
    addr,
    stop() {
      child.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function openssl(cwd, ...args) {
  execFileSync("openssl", args, { cwd, stdio: "pipe" });
}

function ca(dir, name) {
  openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
    "-subj", `/CN=${name}`, "-keyout", `${name}.key`, "-out", `${name}.pem`,
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
}

function leaf(dir, name, san, usage) {
  openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", `/CN=${name}`,
    "-keyout", `${name}.key`, "-out", `${name}.csr`);
  writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\nextendedKeyUsage=${usage}\nbasicConstraints=CA:FALSE\n`);
  openssl(dir, "x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-days", "2", "-out", `${name}.pem`, "-extfile", `${name}.ext`);
}

/** A test CA, another CA, a server certificate (127.0.0.1, toolgate.test) and a client one. */
export function certs() {
  const dir = mkdtempSync(join(tmpdir(), "toolgate-ts-certs-"));
  ca(dir, "ca");
  ca(dir, "other-ca");
  leaf(dir, "server", "IP:127.0.0.1,DNS:toolgate.test", "serverAuth");
  leaf(dir, "client", "DNS:agent-7.clients.test", "clientAuth");
  return { dir, read: (name) => readFileSync(join(dir, name)), path: (name) => join(dir, name) };
}

/** TLS only; callers need the token or the client certificate. */
export function tlsConfig(c) {
  return BASE + `
[tls]
cert_file = "${c.path("server.pem")}"
key_file = "${c.path("server.key")}"
client_ca_file = "${c.path("ca.pem")}"
require_client_cert = false
[auth]
anonymous = "none"
[[auth.tokens]]
id = "bot"
tenant = "acme"
roles = ["agent"]
env = "TG_AGENT"
[[auth.certificates]]
name = "agent-7.clients.test"
tenant = "acme"
roles = ["agent"]
`;
}
