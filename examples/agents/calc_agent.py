"""A calc agent in plain Python: it plays longhaul's calc task through any
OpenAI-compatible endpoint (OPENAI_BASE_URL), a group of episodes per task.
    python3 calc_agent.py [TASKS]     (0 or none: until stopped)"""
import ast, http.client, json, os, random, re, sys, threading, time, urllib.parse
from fractions import Fraction

BASE = urllib.parse.urlsplit(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8700/v1"))
KEY, GROUP = os.environ.get("OPENAI_API_KEY", "none"), int(os.environ.get("LONGHAUL_GROUP_SIZE", "8"))
OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}

class Ended(Exception): pass  # 409: the actor ended the episode (its context is full)
local = threading.local()  # one kept-alive connection a thread

def post(path, body, headers=None, tries=60):  # a minute for an actor that is starting
    h = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY, **(headers or {})}
    try:
        if not getattr(local, "conn", None): local.conn = http.client.HTTPConnection(BASE.hostname, BASE.port, timeout=3600)
        local.conn.request("POST", BASE.path + path, json.dumps(body), h)
        r = local.conn.getresponse()
        data = json.loads(r.read())
    except (OSError, http.client.HTTPException):
        local.conn = None
        if tries <= 1: raise
        time.sleep(1)
        return post(path, body, headers, tries - 1)
    if r.status == 409: raise Ended(data)
    if r.status != 200: raise RuntimeError(f"{r.status} {data}")
    return data

def value(node):  # exact arithmetic: integers, + - * /, parentheses
    if isinstance(node, ast.Constant) and type(node.value) is int: return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub): return -value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPS: return OPS[type(node.op)](value(node.left), value(node.right))
    raise ValueError("not arithmetic")

def text(q): return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"

def task(rng, stages=1):  # the prompt of longhaul's calc, stages=1 digits=1
    lines, x = [], Fraction(rng.randint(2, 9))
    for k in range(stages):
        while True:
            a, b, o1, o2 = rng.randint(2, 9), rng.randint(2, 9), rng.choice("+-*/"), rng.choice("+-*/")
            form = rng.choice(["({} %s %d) %s %d" % (o1, a, o2, b), "%d %s ({} %s %d)" % (a, o1, o2, b)])
            try: x, prev = value(ast.parse(form.format(f"({x})"), mode="eval").body), (chr(96 + k) if k else str(x))
            except ZeroDivisionError: continue
            break
        lines.append(f"  {chr(97 + k)} = " + form.format(prev))
    return ("The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, + - * /, parentheses; at most 3 "
            "operators; it knows no variables). Answer with an integer or a fraction p/q, then <eos>.\nVariables:\n"
            + "\n".join(lines) + f"\nWhat is {chr(96 + stages)}?"), x

def play(episode, name, prompt, answer):
    try: run(episode, name, prompt, answer)
    except Ended: pass

def run(episode, name, prompt, answer):
    msgs, reward = [{"role": "user", "content": prompt}], 0.0
    for _ in range(4):
        out = post("/chat/completions", {"model": "longhaul", "messages": msgs},
                   {"X-Longhaul-Episode": episode, "X-Longhaul-Task": name})["choices"][0]["message"]["content"]
        msgs.append({"role": "assistant", "content": out})
        call = re.fullmatch(r"(?s).*?<call>calc\((.*)\)</call>\s*", out)
        if not call:
            final = re.fullmatch(r"\s*(-?\d+)(?:/(\d+))?\s*<eos>\s*", out)
            reward = float(bool(final) and Fraction(int(final[1]), int(final[2] or 1)) == answer)
            break
        try:
            tree = ast.parse(call.group(1), mode="eval")
            ops = sum(isinstance(n, (ast.BinOp, ast.UnaryOp)) for n in ast.walk(tree))
            result = "= " + text(value(tree.body)) if ops <= 3 else "error: calc: more than 3 operators"
        except (ValueError, SyntaxError, ZeroDivisionError) as e: result = f"error: calc: {e}"
        msgs.append({"role": "tool", "content": result})
    post(f"/episodes/{episode}/reward", {"reward": reward, "terms": {"correct": reward}})

def main(tasks=0):  # GROUP workers, no barrier: every GROUP episodes opened share a task
    rng, lock, opened, current = random.Random(os.getpid()), threading.Lock(), [0], [None]
    def worker():
        while True:
            with lock:
                k = opened[0]
                if tasks and k >= tasks * GROUP: return
                opened[0], current[0] = k + 1, current[0] if k % GROUP else task(rng)
                (prompt, answer), name = current[0], f"calc-{os.getpid()}-{k // GROUP}"
            play(f"{name}-{k % GROUP}", name, prompt, answer)
    workers = [threading.Thread(target=worker) for _ in range(GROUP)]
    [w.start() for w in workers]
    [w.join() for w in workers]

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
