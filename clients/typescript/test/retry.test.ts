// Retries and idempotency against a local stand-in server (a real one
// cannot be made to answer 503 on demand).

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Lockstep, NotConfigured, RefConflict, Unavailable } from "../src/index.js";

type Answer = [number, Record<string, string>, unknown];

async function stand(answers: Answer[]) {
  const seen: Array<string | undefined> = [];
  const bodies: string[] = [];
  const srv = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push(req.headers["idempotency-key"] as string | undefined);
      bodies.push(Buffer.concat(chunks).toString());
      const [status, headers, body] = answers.shift() ?? [500, {}, {}];
      res.writeHead(status, { "Content-Type": "application/json", ...headers });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const delays: number[] = [];
  const c = new Lockstep({
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, key: "k", retries: 3, backoffMs: 10, maxBackoffMs: 50,
    sleep: async (ms) => { delays.push(ms); },
  });
  return { c, seen, bodies, delays, close: () => new Promise<void>((r) => srv.close(() => r())) };
}

const unavailable = { error: { code: "unavailable", message: "down" } };

test("retries 503 and 429 with one Idempotency-Key, honouring Retry-After", async () => {
  const s = await stand([[503, { "Retry-After": "2" }, unavailable], [429, {}, unavailable], [201, {}, { name: "r", default_branch: "main" }]]);
  try {
    assert.equal((await s.c.createRepo("r")).name, "r");
    assert.equal(s.seen.length, 3);
    assert.equal(new Set(s.seen).size, 1, "one Idempotency-Key per logical write");
    assert.ok(s.seen[0]);
    assert.deepEqual(s.bodies, Array(3).fill('{"name":"r"}'), "the body is resent whole");
    assert.ok(s.delays[0]! >= 2000, "Retry-After is honoured");
    assert.ok(s.delays[1]! <= 50, "backoff is capped");
  } finally { await s.close(); }
});

test("gives up after retries with the answer's code", async () => {
  const s = await stand(Array(4).fill([503, {}, unavailable]));
  try {
    await assert.rejects(s.c.createRepo("r"), Unavailable);
    assert.equal(s.seen.length, 4);
  } finally { await s.close(); }
});

test("client errors are not retried and carry their details", async () => {
  const s = await stand([[409, {}, { error: { code: "ref_conflict", message: "moved", details: { expected: "a", actual: "b" } } }]]);
  try {
    await assert.rejects(s.c.rollback("r", "HEAD", { expectOid: "a".repeat(40) }), (e: unknown) => {
      assert.ok(e instanceof RefConflict);
      assert.deepEqual([e.expected, e.actual, e.status], ["a", "b", 409]);
      return true;
    });
    assert.equal(s.seen.length, 1);
  } finally { await s.close(); }
});

test("not_configured is final, whatever the status", async () => {
  const off = { error: { code: "not_configured", message: "database branching is off" } };
  for (const status of [501, 503]) {
    const s = await stand(Array(4).fill([status, { "Retry-After": "5" }, off]));
    try {
      await assert.rejects(s.c.createRepo("r"), NotConfigured);
      assert.equal(s.seen.length, 1, `${status} not_configured was retried`);
      assert.deepEqual(s.delays, []);
    } finally { await s.close(); }
  }
});

test("a refused connection is retried, then unavailable", async () => {
  const delays: number[] = [];
  const c = new Lockstep({ url: "http://127.0.0.1:9", key: "k", retries: 2, backoffMs: 1, sleep: async (ms) => { delays.push(ms); } });
  await assert.rejects(c.whoami(), (e: unknown) => e instanceof Unavailable && e.code === "unavailable");
  assert.equal(delays.length, 2);
});

test("GETs carry no Idempotency-Key", async () => {
  const s = await stand([[200, {}, { key_id: "k", name: "n", role: "admin" }]]);
  try {
    await s.c.whoami();
    assert.deepEqual(s.seen, [undefined]);
  } finally { await s.close(); }
});
