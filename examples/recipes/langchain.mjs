// Lockstep's MCP server through LangChain's MCP adapters
// (@langchain/mcp-adapters), the tools a LangGraph agent gets.
//
//   LOCKSTEP_URL=http://127.0.0.1:7070 LOCKSTEP_KEY=lsk_… LOCKSTEP_REPO=demo node langchain.mjs
//
// It loads the tools and invokes two of them directly (no model needed).
// With a model, hand them to a LangGraph agent:
//
//   import { createReactAgent } from "@langchain/langgraph/prebuilt";
//   const agent = createReactAgent({ llm, tools });
import { MultiServerMCPClient } from "@langchain/mcp-adapters";

const url = (process.env.LOCKSTEP_URL ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
const repo = process.env.LOCKSTEP_REPO ?? "demo";

const client = new MultiServerMCPClient({
  mcpServers: {
    lockstep: {
      transport: "http",
      url: `${url}/mcp`,
      headers: { Authorization: `Bearer ${process.env.LOCKSTEP_KEY}` },
    },
  },
});
try {
  const tools = await client.getTools();
  console.log(`tools: ${tools.map((t) => t.name).sort().join(" ")}`);
  const tool = (name) => {
    const t = tools.find((x) => x.name === name);
    if (!t) throw new Error(`no tool ${name}`);
    return t;
  };

  const repos = await tool("repo_list").invoke({});
  console.log(`repo_list: ${typeof repos === "string" ? repos : JSON.stringify(repos)}`);

  const file = await tool("file_read").invoke({ workspace: repo, path: "README.md" });
  console.log(`file_read: ${typeof file === "string" ? file : JSON.stringify(file)}`);
} finally {
  await client.close();
}
