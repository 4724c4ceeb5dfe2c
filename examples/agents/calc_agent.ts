// A calc agent in TypeScript with the official openai package: it plays longhaul's calc task
// through any OpenAI-compatible endpoint (OPENAI_BASE_URL), a group of episodes per task.
//   npm ci && npx tsc && node calc_agent.js [TASKS]     (0 or none: until stopped)
import OpenAI from "openai";

const base = process.env.OPENAI_BASE_URL ?? "http://127.0.0.1:8700/v1", key = process.env.OPENAI_API_KEY ?? "none";
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 3_600_000 });
const group = Number(process.env.LONGHAUL_GROUP_SIZE ?? "8");
type Q = [bigint, bigint]; // an exact fraction
const gcd = (a: bigint, b: bigint): bigint => (b ? gcd(b, a % b) : a < 0n ? -a : a);
function q(n: bigint, d: bigint): Q {
  if (d === 0n) throw new Error("division by zero");
  const g = gcd(n, d) * (d < 0n ? -1n : 1n);
  return [n / g, d / g];
}
const op: Record<string, (a: Q, b: Q) => Q> = {
  "+": (a, b) => q(a[0] * b[1] + b[0] * a[1], a[1] * b[1]), "-": (a, b) => q(a[0] * b[1] - b[0] * a[1], a[1] * b[1]),
  "*": (a, b) => q(a[0] * b[0], a[1] * b[1]), "/": (a, b) => q(a[0] * b[1], a[1] * b[0]) };
const show = (v: Q) => (v[1] === 1n ? `${v[0]}` : `${v[0]}/${v[1]}`);
function evaluate(s: string, maxOps = 3): Q { // integers, + - * /, parentheses
  if (/[^\d\s+\-*/()]/.test(s)) throw new Error("not arithmetic");
  const t = s.match(/\d+|[-+*/()]/g) ?? [];
  let i = 0, ops = 0;
  const atom = (): Q => {
    const x = t[i++];
    if (x === "(") { const v = sum(); if (t[i++] !== ")") throw new Error("syntax"); return v; }
    if (x === "-") { ops++; const v = atom(); return [-v[0], v[1]]; }
    if (!/^\d+$/.test(x ?? "")) throw new Error("syntax");
    return [BigInt(x), 1n];
  };
  const product = (): Q => { let v = atom(); while (t[i] === "*" || t[i] === "/") { ops++; v = op[t[i++]](v, atom()); } return v; };
  const sum = (): Q => { let v = product(); while (t[i] === "+" || t[i] === "-") { ops++; v = op[t[i++]](v, product()); } return v; };
  const v = sum();
  if (i !== t.length) throw new Error("syntax");
  if (ops > maxOps) throw new Error(`more than ${maxOps} operators`);
  return v;
}
function task(): [string, Q] { // the prompt of longhaul's calc, stages=1 digits=1
  const r = (n: number) => 2 + Math.floor(Math.random() * n), o = () => "+-*/"[Math.floor(Math.random() * 4)];
  for (;;) {
    const [x, a, b] = [r(8), r(8), r(8)], line = Math.random() < 0.5 ? `(${x} ${o()} ${a}) ${o()} ${b}` : `${a} ${o()} (${x} ${o()} ${b})`;
    try {
      return [`The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, + - * /, parentheses; at most 3 operators; ` +
        `it knows no variables). Answer with an integer or a fraction p/q, then <eos>.\nVariables:\n  a = ${line}\nWhat is a?`, evaluate(line, 9)];
    } catch { /* divided by zero: draw again */ }
  }
}
async function play(episode: string, name: string, prompt: string, answer: Q) {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: prompt }];
  let reward = 0;
  for (let step = 0; step < 4; step++) {
    const r = await client.chat.completions.create({ model: "longhaul", messages },
      { headers: { "X-Longhaul-Episode": episode, "X-Longhaul-Task": name } }).catch((e) => {
        if (e instanceof OpenAI.APIError && e.status === 409) return null; // the actor ended it: its context is full
        throw e;
      });
    if (!r) return;
    const out = r.choices[0].message.content ?? "", call = out.match(/^[\s\S]*?<call>calc\(([\s\S]*)\)<\/call>\s*$/);
    messages.push({ role: "assistant", content: out });
    if (!call) {
      const m = out.match(/^\s*(-?\d+)(?:\/(\d+))?\s*<eos>\s*$/);
      reward = m && show(q(BigInt(m[1]), BigInt(m[2] ?? "1"))) === show(answer) ? 1 : 0;
      break;
    }
    let result: string;
    try { result = "= " + show(evaluate(call[1])); } catch (e) { result = `error: calc: ${(e as Error).message}`; }
    messages.push({ role: "tool", content: result, tool_call_id: "calc" });
  }
  await fetch(`${base}/episodes/${episode}/reward`, { method: "POST", body: JSON.stringify({ reward, terms: { correct: reward } }),
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` } });
}
(async () => {
  const tasks = Number(process.argv[2] ?? "0") || Infinity;
  for (let t = 0; t < tasks; t++) {
    const [prompt, answer] = task(), name = `calc-ts-${process.pid}-${t}`;
    await Promise.all(Array.from({ length: group }, (_, m) => play(`${name}-${m}`, name, prompt, answer)));
  }
})();
