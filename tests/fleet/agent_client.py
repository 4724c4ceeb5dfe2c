"""Drives an actor's agent endpoint with Python's http.client (docs/agents.md).

Run by test_agent_endpoint with: PORT TOKEN_FILE LONGHAUL_BINARY STORE.
Each scenario asserts what the endpoint answers and, once the episode is
stored, what the store recorded (read with `longhaul replay export`).
Exit 0 when every scenario held; a failed one prints why and exits 1.
"""
import http.client
import json
import socket
import subprocess
import sys
import threading
import time

PORT, TOKEN, LONGHAUL, STORE = int(sys.argv[1]), open(sys.argv[2]).read().strip(), sys.argv[3], sys.argv[4]
SPECIAL = {256: "<bos>", 257: "<eos>", 258: "<call>", 259: "</call>", 260: "<obs>", 261: "</obs>", 262: "<img>", 263: "<pad>"}


def request(method, path, body=None, headers=None, token=True, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + TOKEN
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, data, h)
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, json.loads(text) if text else None


def chat(episode, messages, task=None, role=None, **params):
    h = {"X-Longhaul-Episode": episode}
    if task:
        h["X-Longhaul-Task"] = task
    if role:
        h["X-Longhaul-Role"] = role
    return request("POST", "/v1/chat/completions", dict(model="longhaul", messages=messages, **params), h)


def expect(status, got, what):
    if got[0] != status:
        raise AssertionError(f"{what}: expected {status}, got {got[0]} {got[1]}")
    return got[1]


def decode(tokens):
    """Tokens as the text the endpoint answers with (markers for specials)."""
    out, run = [], bytearray()
    for t in tokens:
        if t < 256:
            run.append(t)
            continue
        out.append(run.decode("utf-8", "replace"))
        run = bytearray()
        out.append(SPECIAL[t])
    out.append(run.decode("utf-8", "replace"))
    return "".join(out).replace("\x00", "\ufffd")


def stored(episode_content, timeout=60, env="agent"):
    """The stored episode whose text holds episode_content, once ended."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([LONGHAUL, "replay", "export", "--db", STORE, "--env", env], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            ep = json.loads(line)
            text = "".join(s["text"] for s in ep["segments"])
            if ep["ended"] and episode_content in text and ep["segments_received"] == ep["segment_count"]:
                return ep
        time.sleep(0.2)
    raise AssertionError(f"no stored episode holding {episode_content!r}")


def turns(ep):
    """The runs of trained (loss_mask 1) and untrained tokens, in order."""
    toks = [t for s in ep["segments"] for t in s["tokens"]]
    mask = [m for s in ep["segments"] for m in s["loss_mask"]]
    runs, cur, kind = [], [], None
    for t, m in zip(toks, mask):
        if m != kind and cur:
            runs.append((kind, cur))
            cur = []
        kind = m
        cur.append(t)
    runs.append((kind, cur))
    return runs


def exact():
    """Three turns: the store holds the tokens the answers were made from."""
    prompt = "exact: the first prompt, verbatim"
    msgs = [{"role": "user", "content": prompt}]
    answers = []
    for i in range(3):
        d = expect(200, chat("exact", msgs, task="t-exact", max_tokens=12), f"turn {i}")
        a = d["choices"][0]["message"]["content"]
        assert d["longhaul"]["turn"] == i + 1 and not d["longhaul"]["rewritten"], d
        assert d["usage"]["completion_tokens"] <= 12, d
        assert d["choices"][0]["finish_reason"] in ("stop", "length"), d
        answers.append(a)
        msgs += [{"role": "assistant", "content": a}, {"role": "tool", "content": f"result {i}"}]
    expect(200, request("POST", "/v1/episodes/exact/reward", {"reward": 1.0, "terms": {"correct": 1.0, "style": 0.5}}), "reward")
    ep = stored(prompt)
    runs = turns(ep)
    assert decode(runs[0][1]) == "<bos>" + prompt, runs[0]
    policy = [decode(t) for m, t in runs if m == 1]
    assert policy == answers, (policy, answers)
    obs = [decode(t) for m, t in runs[1:] if m == 0]
    assert obs[:2] == ["<obs>result 0</obs>", "<obs>result 1</obs>"], obs
    assert ep["outcome"] == "success" and ep["reward"] == 1.0, ep
    assert sorted((t["name"], t["value"]) for t in ep["terms"]) == [("correct", 1.0), ("style", 0.5)], ep["terms"]
    expect(409, chat("exact", msgs, task="t-exact"), "a turn after the end")


def rewrite():
    """An earlier turn rewritten: counted, answered, and nothing after it trained."""
    msgs = [{"role": "user", "content": "rewrite: first"}]
    d = expect(200, chat("rewrite", msgs, task="t-rewrite", max_tokens=8), "turn 1")
    msgs += [{"role": "assistant", "content": "not what the policy wrote"}, {"role": "user", "content": "next"}]
    d = expect(200, chat("rewrite", msgs, task="t-rewrite", max_tokens=8), "rewritten turn")
    assert d["longhaul"]["rewritten"], d
    expect(200, request("POST", "/v1/episodes/rewrite/reward", {"reward": 0.0}), "reward")
    runs = turns(stored("rewrite: first"))
    trained = [m for m, _ in runs].count(1)
    assert trained == 1, f"only the turn before the rewrite is trained: {runs}"
    assert "not what the policy wrote" in "".join(decode(t) for m, t in runs if m == 0)


def group():
    """Two episodes of one task form a group; a third opens the next."""
    out = {}

    def play(name):
        d = expect(200, chat(name, [{"role": "user", "content": "group: same task " + name}], task="t-group", max_tokens=4), name)
        expect(200, request("POST", f"/v1/episodes/{name}/reward", {"reward": 1.0 if name == "g1" else 0.0}), name)
        out[name] = stored("group: same task " + name)
    threads = [threading.Thread(target=play, args=(n,)) for n in ("g1", "g2")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    play("g3")
    assert out["g1"]["group_id"] == out["g2"]["group_id"] != out["g3"]["group_id"], out
    assert out["g1"]["task_seed"] == out["g3"]["task_seed"], out


def fan():
    """n = 2 opens two members of a group at once, answered together; each
    then plays on under its own name."""
    prompt = "fan: n opens a group"
    # a single request of the task first: its group is left to single requests
    expect(200, chat("fanpre", [{"role": "user", "content": "fan: a single first"}], task="t-fan", max_tokens=2), "single")
    d = expect(200, chat("fan", [{"role": "user", "content": prompt}], task="t-fan", n=2, max_tokens=6), "n = 2")
    assert d["longhaul"]["episodes"] == ["fan.0", "fan.1"], d
    assert [c["index"] for c in d["choices"]] == [0, 1], d
    assert [c["longhaul"]["episode"] for c in d["choices"]] == ["fan.0", "fan.1"], d
    assert 2 <= d["usage"]["completion_tokens"] <= 12, d  # the two members' turns, 6 tokens at most each
    expect(400, chat("fan.0", [{"role": "user", "content": prompt}], n=2), "n = 2 on an open member")
    expect(409, chat("fan", [{"role": "user", "content": prompt}], n=2), "n = 2 again: its members are open")
    first = d["choices"][0]["message"]["content"]
    msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": first}, {"role": "tool", "content": "fan result"}]
    d2 = expect(200, chat("fan.0", msgs, max_tokens=4), "a member's second turn")
    assert d2["longhaul"]["episode"] == "fan.0" and d2["longhaul"]["turn"] == 2 and not d2["longhaul"]["rewritten"], d2
    expect(200, request("POST", "/v1/episodes/fan.0/reward", {"reward": 1.0}), "reward 0")
    expect(200, request("POST", "/v1/episodes/fan.1/reward", {"reward": 0.0}), "reward 1")
    a, b = stored("fan result"), None
    deadline = time.time() + 60
    while b is None and time.time() < deadline:  # the other member: the same prompt, no second turn
        out = subprocess.run([LONGHAUL, "replay", "export", "--db", STORE, "--env", "agent"], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            ep = json.loads(line)
            if ep["ended"] and ep["id"] != a["id"] and ep["group_id"] == a["group_id"]:
                b = ep
        time.sleep(0.2)
    assert b is not None, "the second member was not stored in the first's group"
    assert a["task_seed"] == b["task_seed"] and a["outcome"] == "success" and b["outcome"] == "failure", (a, b)
    assert decode(turns(b)[0][1]).startswith("<bos>" + prompt), b
    expect(200, request("POST", "/v1/episodes/fanpre/end"), "the single's end")
    single = stored("fan: a single first")
    assert single["group_id"] != a["group_id"] and single["task_seed"] == a["task_seed"], (single, a)


def roles():
    """An episode of two roles: each role's turns are a sample of its own
    (its env agent:ROLE, a group with the same role of the other members),
    and the episode's reward ends them all, a role's own where given."""
    for member in ("duo", "duo2"):
        expect(200, chat(member, [{"role": "user", "content": f"roles: plan [{member}]"}], task="t-duo", role="planner", max_tokens=4), member + " planner")
        d = expect(200, chat(member, [{"role": "user", "content": f"roles: code [{member}]"}], task="t-duo", role="coder", max_tokens=4), member + " coder")
        assert d["longhaul"]["role"] == "coder" and d["longhaul"]["episode"] == member, d
    expect(400, request("POST", "/v1/episodes/duo/reward", {"reward": 1, "roles": {"tester": 0.5}}), "a role the episode lacks")
    expect(400, chat("duo", [{"role": "user", "content": "x"}], task="t-duo", role="bad role!"), "a bad role name")
    expect(200, request("POST", "/v1/episodes/duo/reward", {"reward": 1.0, "roles": {"coder": 0.25}}), "duo's reward")
    expect(200, request("POST", "/v1/episodes/duo2/reward", {"reward": 0.0}), "duo2's reward")
    expect(409, chat("duo", [{"role": "user", "content": "late"}], task="t-duo", role="tester"), "a role after the end")
    plan, code = stored("roles: plan [duo]", env="agent:planner"), stored("roles: code [duo]", env="agent:coder")
    plan2, code2 = stored("roles: plan [duo2]", env="agent:planner"), stored("roles: code [duo2]", env="agent:coder")
    assert plan["reward"] == 1.0 and code["reward"] == 0.25 and plan2["reward"] == 0.0 == code2["reward"], (plan, code)
    assert plan["group_id"] == plan2["group_id"] != code["group_id"] == code2["group_id"], (plan, code, plan2, code2)
    assert plan["task_seed"] == code["task_seed"] == plan2["task_seed"], (plan, code, plan2)


def role_waits():
    """A role waits past agent_timeout_ms (3 s) while another plays: the
    episode is not silent, so the waiting role is not aborted."""
    expect(200, chat("wait", [{"role": "user", "content": "role waits: [judge]"}], task="t-wait", role="judge", max_tokens=2), "judge")
    msgs = [{"role": "user", "content": "role waits: [worker]"}]
    t0 = time.time()
    while time.time() - t0 < 4.5:  # past the judge's timeout, the worker busy throughout
        d = expect(200, chat("wait", msgs, task="t-wait", role="worker", max_tokens=2), "worker")
        msgs += [{"role": "assistant", "content": d["choices"][0]["message"]["content"]}, {"role": "tool", "content": "k"}]
        time.sleep(0.5)
    expect(200, request("POST", "/v1/episodes/wait/reward", {"reward": 1.0}), "reward")
    judge = stored("role waits: [judge]", env="agent:judge")
    assert judge["outcome"] == "success", judge


def vanished_and_unrewarded():
    expect(200, chat("quiet", [{"role": "user", "content": "vanished: an agent that goes away"}], task="t-quiet", max_tokens=4), "quiet")
    expect(200, chat("noreward", [{"role": "user", "content": "unrewarded: ended without one"}], task="t-quiet", max_tokens=4), "end")
    expect(200, request("POST", "/v1/episodes/noreward/end"), "end")
    ep = stored("unrewarded: ended without one")
    assert ep["outcome"] == "aborted" and "without a reward" in ep["error"], ep
    ep = stored("vanished: an agent that goes away", timeout=90)  # agent_timeout_ms later
    assert ep["outcome"] == "aborted" and "silent" in ep["error"], ep
    expect(409, request("POST", "/v1/episodes/quiet/reward", {"reward": 1}), "a reward too late")


def completions():
    h = {"X-Longhaul-Episode": "cmpl", "X-Longhaul-Task": "t-cmpl"}
    p = "completions: a prompt"
    d = expect(200, request("POST", "/v1/completions", {"prompt": p, "max_tokens": 3}, h), "completion")
    assert d["object"] == "text_completion" and d["choices"][0]["finish_reason"] in ("length", "stop"), d
    p2 = p + d["choices"][0]["text"] + " more"
    d = expect(200, request("POST", "/v1/completions", {"prompt": p2, "max_tokens": 3, "stop": ["\n", "zz"]}, h), "extend")
    assert not d["longhaul"]["rewritten"], d
    expect(200, request("POST", "/v1/episodes/cmpl/reward", {"reward": 0}), "reward")
    runs = turns(stored(p))
    assert decode(runs[2][1]) == " more", runs


def context():
    """A turn that fills max_context (400) is answered with what it has; a
    prompt past it ends the episode at once."""
    msgs = [{"role": "user", "content": "c" * 390}]
    d = expect(200, chat("ctx", msgs, task="t-ctx"), "a turn at the context's end")
    assert d["usage"]["completion_tokens"] <= 9, d
    if d["choices"][0]["finish_reason"] == "length":
        msgs += [{"role": "assistant", "content": d["choices"][0]["message"]["content"]}, {"role": "tool", "content": "x"}]
        got = expect(409, chat("ctx", msgs, task="t-ctx"), "a turn after the context filled")
        assert "has ended" in got["error"]["message"], got
    else:
        expect(200, request("POST", "/v1/episodes/ctx/end"), "end")
    got = expect(400, chat("ctx2", [{"role": "user", "content": "d" * 500}], task="t-ctx"), "a prompt past the context")
    assert "max_context" in got["error"]["message"], got
    got = expect(400, chat("ctx3", [{"role": "user", "content": "d" * 500}], task="t-ctx", n=2), "n = 2 past the context")
    assert "max_context" in got["error"]["message"], got


def hostile():
    ok = [{"role": "user", "content": "hostile"}]
    expect(401, request("POST", "/v1/chat/completions", {"messages": ok}, {"X-Longhaul-Episode": "h"}, token=False), "no token")
    expect(400, request("POST", "/v1/chat/completions", raw="{not json", headers={"X-Longhaul-Episode": "h"}), "bad JSON")
    expect(400, chat("h", ok, task="t-h", frequency_penalty=1), "unknown field")
    expect(400, request("POST", "/v1/chat/completions", {"messages": ok}), "no episode name")
    expect(400, chat("bad name!", ok, task="t-h"), "a bad episode name")
    expect(400, chat("h", ok, task="t-h", temperature=0.2), "another temperature")
    for n in (0, 1.5, 3, "2"):
        expect(400, chat("h", ok, task="t-h", n=n), f"n = {n!r} (groups of 2)")
    expect(400, chat("h" * 63, ok, n=2), "n = 2 with a name too long for its members'")
    expect(400, chat("h", ok, task="t-h", stream=True), "stream")
    expect(400, chat("h", ok, task="t-h", stop=["a", "b", "c", "d", "e"]), "five stops")
    expect(400, chat("h", ok, task="t-h", max_tokens=10 ** 9), "max_tokens past the context")
    expect(400, chat("h", [{"role": "robot", "content": "x"}], task="t-h"), "a bad role")
    expect(400, chat("h", [{"role": "user", "content": "cut\u0000here"}], task="t-h"), "a NUL in content")
    expect(400, chat("h", [{"role": "user", "content": [{"type": "image_url"}]}], task="t-h"), "an image part")
    expect(400, chat("h", ok), "no task with groups of 2")
    expect(404, chat("h", ok + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}], task="t-h"), "history of an unknown episode")
    expect(404, request("POST", "/v1/episodes/nobody/reward", {"reward": 1}), "reward of an unknown episode")
    expect(400, request("POST", "/v1/episodes/nobody/reward", {"reward": "high"}), "a reward not a number")
    expect(400, request("POST", "/v1/episodes/nobody/reward", {"reward": 1, "terms": {"a\u0000b": 1}}), "a NUL in a term")
    expect(404, request("GET", "/v1/nothing"), "unknown path")
    expect(405, request("GET", "/v1/chat/completions"), "wrong method")
    expect(413, request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 200000}]}, {"X-Longhaul-Episode": "big"}), "too big")
    models = expect(200, request("GET", "/v1/models"), "models")
    assert models["data"][0]["id"] == "longhaul", models


def busy():
    """A turn in flight refuses another (409); past agent_max_episodes, 429;
    a client that sends half a request stalls no one else."""
    slow = socket.create_connection(("127.0.0.1", PORT))
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"mess")
    names = [f"full{i}" for i in range(8)]
    for n in names:  # agent_max_episodes = 8: each opened and answered
        expect(200, chat(n, [{"role": "user", "content": "busy " + n}], task="t-busy", max_tokens=2), n)
    expect(429, chat("full8", [{"role": "user", "content": "one too many"}], task="t-busy"), "past the cap")
    expect(200, request("POST", "/v1/episodes/full0/end"), "full0")
    expect(429, chat("fanbusy", [{"role": "user", "content": "two, one free"}], task="t-busy", n=2), "n = 2, one slot free")
    for n in names[1:]:
        expect(200, request("POST", f"/v1/episodes/{n}/end"), n)
    deadline = time.time() + 60  # an ended episode's slot is free once the actor's runner has let it go
    while (got := chat("fanbusy", [{"role": "user", "content": "two, all free"}], task="t-busy", n=2, max_tokens=2))[0] == 429 \
            and time.time() < deadline:
        time.sleep(0.1)
    d = expect(200, got, "n = 2 after the refusal")
    for name in d["longhaul"]["episodes"]:
        expect(200, request("POST", f"/v1/episodes/{name}/end"), name)
    slow.close()


for scenario in (hostile, exact, rewrite, group, fan, roles, role_waits, completions, context, busy, vanished_and_unrewarded):
    t0 = time.time()
    try:
        scenario()
    except Exception as e:  # noqa: BLE001 - the test prints whatever broke
        print(f"agent_client: {scenario.__name__} FAILED: {e!r}")
        sys.exit(1)
    print(f"agent_client: {scenario.__name__} ok ({time.time() - t0:.1f} s)")
