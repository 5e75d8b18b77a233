// Lockstep's MCP server in the OpenAI Agents SDK (@openai/agents).
//
//   LOCKSTEP_URL=http://127.0.0.1:7070 LOCKSTEP_KEY=lsk_… LOCKSTEP_REPO=demo node openai-agents.mjs
//
// It connects to /mcp over streamable HTTP, lists the tools and calls two
// of them directly (no model needed). To give them to an agent instead:
//
//   const agent = new Agent({ name: "coder", instructions: "…", mcpServers: [server] });
//   const result = await run(agent, "Fix the failing test in workspace ws-1");
import { MCPServerStreamableHttp } from "@openai/agents";

const url = (process.env.LOCKSTEP_URL ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
const repo = process.env.LOCKSTEP_REPO ?? "demo";

const server = new MCPServerStreamableHttp({
  name: "lockstep",
  url: `${url}/mcp`,
  requestInit: { headers: { Authorization: `Bearer ${process.env.LOCKSTEP_KEY}` } },
});
await server.connect();
try {
  const tools = await server.listTools();
  console.log(`tools: ${tools.map((t) => t.name).sort().join(" ")}`);

  const repos = await server.callTool("repo_list", {});
  console.log(`repo_list: ${repos.map((c) => c.text ?? "").join("")}`);

  const file = await server.callTool("file_read", { workspace: repo, path: "README.md" });
  console.log(`file_read: ${file.map((c) => c.text ?? "").join("")}`);
} finally {
  await server.close();
}
