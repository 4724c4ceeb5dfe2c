// A calc agent in TypeScript with the official openai package: it plays longhaul's calc task
// through any OpenAI-compatible endpoint (OPENAI_BASE_URL), a group of episodes per task.
//   npm ci && npx tsc && node calc_agent.js [TASKS]     (0 or none: until stopped)
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL ?? "http://127.0.0.1:8700/v1",
  apiKey: process.env.OPENAI_API_KEY ?? "none", maxRetries: 0, timeout: 3_600_000 });
const group = Number(process.env.LONGHAUL_GROUP_SIZE ?? "8");
const PROMPT = "The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, + - * /, parentheses; at most 3 " +
  "operators; it knows no variables). Answer with an integer or a fraction p/q, then <eos>.\nVariables:\n  a = ";

type Q = [bigint, bigint]; // an exact fraction n/d
const gcd = (a: bigint, b: bigint): bigint => (b ? gcd(b, a % b) : a < 0n ? -a : a);
const fail = (why: string): never => { throw new Error(why); };
const show = ([n, d]: Q, g = gcd(n, d) * (d < 0n ? -1n : 1n)) => (d === g ? `${n / g}` : `${n / g}/${d / g}`);
const op: Record<string, (x: Q, y: Q) => Q> = {
  "+": ([a, b], [c, d]) => [a * d + c * b, b * d], "-": ([a, b], [c, d]) => [a * d - c * b, b * d],
  "*": ([a, b], [c, d]) => [a * c, b * d], "/": ([a, b], [c, d]) => (c ? [a * d, b * c] : fail("division by zero")) };

function evaluate(s: string, most = 3): Q { // integers, + - * /, parentheses
  const t = s.match(/\d+|\S/g) ?? [];
  let i = 0, ops = 0;
  const atom = (): Q => t[i] === "(" ? (i++, ((v: Q) => (t[i++] === ")" ? v : fail("syntax")))(sum()))
    : t[i] === "-" ? (i++, ops++, ((v: Q): Q => [-v[0], v[1]])(atom()))
    : /^\d+$/.test(t[i] ?? "") ? [BigInt(t[i++]), 1n] : fail("not arithmetic");
  const level = (sub: () => Q, signs: string) => (): Q => { // left to right, over sub's terms
    for (let v = sub(); ; ops++, v = op[t[i++]](v, sub())) if (!signs.includes(t[i] ?? "?")) return v; };
  const product = level(atom, "*/"), sum = level(product, "+-"), v = sum();
  return i !== t.length ? fail("syntax") : ops > most ? fail(`more than ${most} operators`) : v;
}

function task(): [string, Q] { // the prompt of longhaul's calc (stages 1, digits 1) and its answer
  const r = () => 2 + Math.floor(Math.random() * 8), o = () => "+-*/"[Math.floor(Math.random() * 4)];
  for (const x = r(); ;) {
    const [a, b] = [r(), r()];
    const form = Math.random() < 0.5 ? `(${x} ${o()} ${a}) ${o()} ${b}` : `${a} ${o()} (${x} ${o()} ${b})`;
    try { return [`${PROMPT}${form}\nWhat is a?`, evaluate(form, 9)]; } catch { /* divided by zero: draw again */ }
  }
}

async function play(episode: string, name: string, prompt: string, answer: Q) { // up to 4 turns, then the reward
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: prompt }];
  let reward = 0;
  for (let turn = 0; turn < 4; turn++) {
    const r = await client.chat.completions.create({ model: "longhaul", messages },
      { headers: { "X-Longhaul-Episode": episode, "X-Longhaul-Task": name } })
      .catch((e) => (e instanceof OpenAI.APIError && e.status === 409 ? null : Promise.reject(e)));
    if (!r) return; // 409: the actor ended the episode (its context is full)
    const out = r.choices[0].message.content ?? "", call = out.match(/^[\s\S]*?<call>calc\(([\s\S]*)\)<\/call>\s*$/);
    messages.push({ role: "assistant", content: out });
    if (call) {
      let result: string;
      try { result = "= " + show(evaluate(call[1])); } catch (e) { result = `error: calc: ${(e as Error).message}`; }
      messages.push({ role: "tool", content: result, tool_call_id: "calc" });
      continue;
    }
    const m = out.match(/^\s*(-?\d+)(?:\/(\d+))?\s*<eos>\s*$/);
    try { reward = m && show([BigInt(m[1]), BigInt(m[2] ?? "1")]) === show(answer) ? 1 : 0; } catch { /* 0/0 */ }
    break;
  }
  await client.post(`/episodes/${episode}/reward`, { body: { reward, terms: { correct: reward } } });
}

(async () => { // a group of episodes at a time, all on one task
  const tasks = Number(process.argv[2] ?? "0") || Infinity;
  for (let t = 0; t < tasks; t++) {
    const [prompt, answer] = task(), name = `calc-ts-${process.pid}-${t}`;
    await Promise.all(Array.from({ length: group }, (_, m) => play(`${name}-${m}`, name, prompt, answer)));
  }
})();
