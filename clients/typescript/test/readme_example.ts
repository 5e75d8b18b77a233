// The README's example, compiled (never run) so it stays true to the API.
import { Lockstep } from "../src/index.js";

export async function readmeExample(key: string): Promise<void> {
  const c = new Lockstep({ url: "http://127.0.0.1:7070", key });   // or $LOCKSTEP_URL, $LOCKSTEP_KEY
  await c.fork("web", "fix-login", "fix the login redirect");
  const r = await c.pushDir("fix-login", "./checkout", { expectCurrent: true });   // incremental
  const cp = await c.checkpoint("fix-login", "green");
  await c.restore("fix-login", cp.id, await c.head("fix-login"));
  await c.preflight("fix-login"); await c.promote("fix-login");     // GateFailed(.reasons) if refused
  const { data } = await c.api.GET("/api/v1/repos/{repo}/commits", { params: { path: { repo: "web" } } });
  console.log(r.commit, data?.commits.length);
}
