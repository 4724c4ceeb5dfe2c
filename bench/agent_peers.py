"""The two peers of bench/agent.sh, playing the same calc task (the
functions of examples/agents/calc_agent.py) two ways:

    agent_peers.py server BIND LATENCY_FILE    an env server (longhaul_env)
    agent_peers.py agent LATENCY_FILE          an agent (calc_agent.main)

Each appends to LATENCY_FILE, as it goes (the env server's sessions run in
worker processes), one line per policy turn as the environment sees it: the milliseconds from handing the policy its
observation to having its action. The env server times it from its
answer to the step request that follows; the agent from its request to
the answer. Both include the transport of one request and one answer."""
import os
import signal
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "examples", "agents"), os.path.join(here, "..", "envs", "python")]
import calc_agent  # noqa: E402

def record(ms):
    fd = os.open(LATENCY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{ms:.3f}\n".encode())  # one write of a short line: whole under O_APPEND
    os.close(fd)


def stop(sig, frame):
    raise SystemExit(0)


signal.signal(signal.SIGTERM, stop)

LATENCY = sys.argv[3] if sys.argv[1] == "server" else sys.argv[2]
if sys.argv[1] == "server":
    from longhaul_env import Env, serve

    class Calc(Env):
        name = "calc_py"

        def reset(self, seed, options):
            import random
            self.prompt, self.answer = calc_agent.task(random.Random(seed))
            self.steps, self.last = 0, time.perf_counter()
            return self.prompt

        def step(self, action):
            record((time.perf_counter() - self.last) * 1000)
            self.steps += 1
            call = calc_agent.re.fullmatch(r"(?s).*?<call>calc\((.*)\)</call>\s*", action)
            if call:
                try:
                    obs = f"= {calc_agent.exact(call.group(1), 3)}"
                except Exception as e:  # as the agent's tool: anything that is not such arithmetic
                    obs = f"error: calc: {e}"
                self.last = time.perf_counter()
                return obs, {"correct": 0.0}, self.steps >= 4, {}
            self.last = time.perf_counter()
            return "done", {"correct": 0.0}, True, {}

    serve(Calc, bind=sys.argv[2])
else:
    post = calc_agent.post

    def timed(path, body, headers={}):
        t0 = time.perf_counter()
        r = post(path, body, headers)
        if path == "/chat/completions":
            record((time.perf_counter() - t0) * 1000)
        return r

    calc_agent.post = timed
    calc_agent.main()
