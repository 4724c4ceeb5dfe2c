// The official openai npm package against an actor's agent endpoint
// (docs/agents.md): n = 2 opens a group's two members in one request, each
// choice naming its member, and each member is then rewarded by name.
// Run by test_agent_endpoint node, from the folder where the package is
// installed: OPENAI_BASE_URL=... node agent_n.mjs
import OpenAI from "openai";

const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY ?? "none" });
const r = await client.chat.completions.create(
  { model: "longhaul", messages: [{ role: "user", content: "node: n opens a group" }], n: 2, max_tokens: 4 },
  { headers: { "X-Longhaul-Episode": "node-n" } },
);
const names = r.choices.map((c) => c.longhaul?.episode);
if (r.choices.length !== 2 || names[0] !== "node-n.0" || names[1] !== "node-n.1" || r.longhaul?.episodes?.length !== 2)
  throw new Error(`n = 2: ${JSON.stringify(r)}`);
for (const [i, name] of names.entries())
  await client.post(`/episodes/${name}/reward`, { body: { reward: i === 0 ? 1 : 0 } });
console.log(`agent_n: ${names.join(", ")} opened by one request and rewarded`);
