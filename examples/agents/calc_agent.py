"""A calc agent in plain Python: it plays longhaul's calc task through any OpenAI-compatible
endpoint (OPENAI_BASE_URL), a group of episodes per task.  python3 calc_agent.py [TASKS] (0: for ever)"""
import http.client, itertools, json, os, random, re, sys, threading, time, urllib.parse
from fractions import Fraction

BASE = urllib.parse.urlsplit(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8700/v1"))
KEY, GROUP = os.environ.get("OPENAI_API_KEY", "none"), int(os.environ.get("LONGHAUL_GROUP_SIZE", "8"))
PROMPT = ("The tool <call>calc(EXPR)</call> evaluates EXPR exactly (integers, + - * /, parentheses; at most 3 "
          "operators; it knows no variables). Answer with an integer or a fraction p/q, then <eos>.\n"
          "Variables:\n  a = {}\nWhat is a?")
local = threading.local()  # one kept-alive connection a thread: a connection a turn would fill the ports

def post(path, body, headers={}):  # (status, answer); retried for a minute while the actor starts
    for _ in range(60):
        try:
            if not getattr(local, "conn", None): local.conn = http.client.HTTPConnection(BASE.hostname, BASE.port)
            h = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY, **headers}
            local.conn.request("POST", BASE.path + path, json.dumps(body), h)
            r = local.conn.getresponse()
            return r.status, json.loads(r.read())
        except (OSError, http.client.HTTPException):
            local.conn = None
            time.sleep(1)
    raise ConnectionError(f"{BASE.geturl()} does not answer")

def exact(expr, most=99):  # integers, + - * / and parentheses, in fractions; never ** or //
    if not re.fullmatch(r"[\d+\-*/() ]+", expr) or re.search(r"\*\*|//", expr): raise ValueError("not arithmetic")
    if sum(map(expr.count, "+-*/")) > most: raise ValueError(f"more than {most} operators")
    return Fraction(eval(re.sub(r"\d+", r"Fraction(\g<0>)", expr), {"Fraction": Fraction, "__builtins__": {}}))

def task(rng):  # the prompt of longhaul's calc (stages 1, digits 1) and its answer
    x = rng.randint(2, 9)
    while True:
        a, b, o1, o2 = rng.randint(2, 9), rng.randint(2, 9), rng.choice("+-*/"), rng.choice("+-*/")
        form = rng.choice([f"({{}} {o1} {a}) {o2} {b}", f"{a} {o1} ({{}} {o2} {b})"]).format(x)
        try: return PROMPT.format(form), exact(form)
        except ZeroDivisionError: pass

def play(episode, task_name, prompt, answer):  # up to 4 turns, then the reward, which ends the episode
    msgs, reward = [{"role": "user", "content": prompt}], 0.0
    ids = {"X-Longhaul-Episode": episode, "X-Longhaul-Task": task_name}
    for _ in range(4):
        status, data = post("/chat/completions", {"model": "longhaul", "messages": msgs}, ids)
        if status == 409: return  # the actor ended the episode (its context is full)
        if status != 200: raise RuntimeError(f"{status} {data}")
        msgs.append({"role": "assistant", "content": (out := data["choices"][0]["message"]["content"])})
        if call := re.fullmatch(r"(?s).*?<call>calc\((.*)\)</call>\s*", out):
            try: msgs.append({"role": "tool", "content": f"= {exact(call[1], 3)}"})
            except Exception as e: msgs.append({"role": "tool", "content": f"error: calc: {e}"})
            continue
        final = re.fullmatch(r"\s*(-?\d+)(?:/(\d+))?\s*<eos>\s*", out)
        try: reward = float(Fraction(int(final[1]), int(final[2] or 1)) == answer)
        except (TypeError, ZeroDivisionError): pass  # no answer, or p/0
        break
    post(f"/episodes/{episode}/reward", {"reward": reward, "terms": {"correct": reward}})

def main(tasks=0):  # GROUP workers, no barrier: every GROUP episodes opened share a task
    rng, lock, opened, current = random.Random(os.getpid()), threading.Lock(), itertools.count(), [None]
    def worker():
        while True:
            with lock:
                if (k := next(opened)) >= tasks * GROUP > 0: return
                current[0] = current[0] if k % GROUP else task(rng)
                (prompt, answer), name = current[0], f"calc-{os.getpid()}-{k // GROUP}"
            play(f"{name}-{k % GROUP}", name, prompt, answer)
    for w in (workers := [threading.Thread(target=worker) for _ in range(GROUP)]): w.start()
    for w in workers: w.join()

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
