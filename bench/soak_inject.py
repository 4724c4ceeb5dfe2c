#!/usr/bin/python3
"""bench/soak_inject.py: the hostile peer of bench/soak.sh.

Until --seconds pass, every --every seconds it injects one fault of a
rotating mix against a running learner, and prints what it injected:

  model      a wire-valid segment the model cannot take (an image of too
             many patches, an expert id past the model's, a token past
             the vocabulary)
  collision  a segment of an episode id another sender already used
  late_end   an EpisodeEnd claiming more segments than will ever arrive
  garbage    bytes that are not an Envelope, and an oversized message
  unread     50 weights requests for the whole version, never read
  names      a Hello whose name holds a newline and an escape sequence
  stop       SIGSTOP to one of --stop-pids for 3 s, then SIGCONT
  window_flood  a peer that ignores its back-pressure window: whole
             episodes of new ids for 2 s as fast as the socket takes them,
             every Ack unread
  spoof_heartbeats  heartbeats in a running actor's name (--actor-names)
             from other connections, one without a Hello and one that said
             Hello as itself, marked policy_version 4242424: none may be
             stored

The learner takes a name's segments, ends and heartbeats only from the
connection that said Hello under it, so the faults that test what lies
behind that (model, collision, late_end) say Hello first.

Needs pyzmq and the generated longhaul_pb2 (BUILD/envs/python on
PYTHONPATH). Every socket it opens it closes; it never waits on a reply.
"""
import argparse
import os
import random
import signal
import sys
import time

import zmq
import longhaul_pb2 as pb

PROTOCOL = 1


def envelope(sender, msg_id):
    e = pb.Envelope()
    e.protocol = PROTOCOL
    e.msg_id = msg_id
    e.sender = sender
    return e


def segment(env, episode, seq, tokens, sender):
    s = env.segment
    s.episode_id = episode
    s.seq = seq
    s.actor = sender
    s.env = "calc"
    s.start_offset = seq * len(tokens)
    s.tokens.extend(tokens)
    s.loss_mask = bytes([1] * len(tokens))
    s.behavior_logp.extend([-3.0] * len(tokens))
    s.policy_version.extend([0] * len(tokens))
    s.group_id = episode
    s.task_seed = episode
    return s


class Injector:
    def __init__(self, ingest, weights, stop_pids, seed, actor_names=()):
        self.ctx = zmq.Context()
        self.actor_names = list(actor_names)
        self.ingest = ingest
        self.weights = weights
        self.stop_pids = stop_pids
        self.rng = random.Random(seed)
        self.msg = 1 << 40
        self.counts = {}

    def dealer(self, endpoint):
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(endpoint)
        return d

    def send(self, endpoint, env_or_bytes, hello=None):
        """One message on a connection of its own, after a Hello under
        hello when given."""
        d = self.dealer(endpoint)
        if hello:
            self.hello(d, hello)
        data = env_or_bytes if isinstance(env_or_bytes, bytes) else env_or_bytes.SerializeToString()
        d.send(data)
        time.sleep(0.05)  # let the connection carry it before the close
        d.close()

    def hello(self, d, name):
        """A Hello under name on DEALER d."""
        e = envelope(name, self.next_id())
        e.hello.role = "actor"
        e.hello.name = name
        d.send(e.SerializeToString())

    def next_id(self):
        self.msg += 1
        return self.msg

    def model(self):
        e = envelope("soak-model", self.next_id())
        kind = self.rng.randrange(3)
        s = segment(e, self.rng.getrandbits(62) | 1, 0, [40] * 8, "soak-model")
        if kind == 0:
            im = s.images.add()
            im.width, im.height, im.channels, im.offset = 96, 96, 3, 0
            im.pixels = bytes(96 * 96 * 3)
        elif kind == 1:
            s.routed_layers, s.routed_topk = 4, 2
            s.routed_experts.extend([4000] * (8 * 4 * 2))
        else:
            s.tokens[3] = 263 + 1000
        self.send(self.ingest, e, hello="soak-model")

    def collision(self):
        episode = self.rng.getrandbits(62) | 1
        for sender in ("soak-a", "soak-b"):
            e = envelope(sender, self.next_id())
            segment(e, episode, 0, [41] * 8, sender)
            self.send(self.ingest, e, hello=sender)

    def late_end(self):
        e = envelope("soak-end", self.next_id())
        end = e.episode_end
        end.episode_id = self.rng.getrandbits(62) | 1
        end.actor = "soak-end"
        end.env = "calc"
        end.segment_count = 5
        end.total_tokens = 40
        end.outcome = pb.OUTCOME_SUCCESS
        self.send(self.ingest, e, hello="soak-end")

    def garbage(self):
        self.send(self.ingest, os.urandom(self.rng.randrange(1, 4096)))
        self.send(self.ingest, bytes(20 << 20))  # over max_message_bytes: the peer is cut off

    def unread(self):
        d = self.dealer(self.weights)
        for _ in range(50):
            e = envelope("soak-unread", self.next_id())
            e.weights_request.version = 0
            d.send(e.SerializeToString())
        time.sleep(0.2)
        d.close()

    def names(self):
        e = envelope("evil\n\x1b[2J", self.next_id())
        e.hello.role = "actor"
        e.hello.name = "evil\n\x1b[2J"
        self.send(self.ingest, e)

    def stop(self):
        if not self.stop_pids:
            return
        pid = self.rng.choice(self.stop_pids)
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(3)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def window_flood(self, seconds=2.0):
        d = self.dealer(self.ingest)
        d.setsockopt(zmq.SNDHWM, 1000)
        self.hello(d, "soak-flood")
        end = time.time() + seconds
        sent = 0
        while time.time() < end:
            episode = self.rng.getrandbits(62) | 1
            e = envelope("soak-flood", self.next_id())
            s = segment(e, episode, 0, [42] * 8, "soak-flood")
            s.group_id = s.task_seed = episode >> 2
            x = envelope("soak-flood", self.next_id())
            x.episode_end.episode_id = episode
            x.episode_end.actor = "soak-flood"
            x.episode_end.env = "calc"
            x.episode_end.segment_count = 1
            x.episode_end.total_tokens = 8
            x.episode_end.outcome = pb.OUTCOME_SUCCESS
            x.episode_end.group_id = x.episode_end.task_seed = episode >> 2
            try:
                d.send(e.SerializeToString(), zmq.NOBLOCK)
                d.send(x.SerializeToString(), zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.001)
            while d.poll(0):  # the Acks dropped: the window is ignored
                d.recv()
        d.close()
        self.counts["window_flood_episodes"] = self.counts.get("window_flood_episodes", 0) + sent

    def spoof_heartbeats(self):
        if not self.actor_names:
            return
        victim = self.rng.choice(self.actor_names)
        for own_hello in (False, True):
            d = self.dealer(self.ingest)
            if own_hello:
                self.hello(d, "soak-spoof")
            for _ in range(5):
                e = envelope(victim, self.next_id())
                e.heartbeat.role = "actor"
                e.heartbeat.policy_version = 4242424
                d.send(e.SerializeToString())
            time.sleep(0.05)
            d.close()

    def run(self, seconds, every):
        faults = ["model", "collision", "late_end", "garbage", "unread", "names", "stop", "window_flood",
                  "spoof_heartbeats"]
        end = time.time() + seconds
        i = 0
        while time.time() < end:
            name = faults[i % len(faults)]
            getattr(self, name)()
            self.counts[name] = self.counts.get(name, 0) + 1
            i += 1
            time.sleep(every)
        self.ctx.term()
        print("soak injected: " + " ".join("%s=%d" % kv for kv in sorted(self.counts.items())), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ingest", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--every", type=float, default=2.0)
    p.add_argument("--stop-pids", default="")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--actor-names", default="")
    a = p.parse_args()
    pids = [int(x) for x in a.stop_pids.split(",") if x]
    names = [x for x in a.actor_names.split(",") if x]
    Injector(a.ingest, a.weights, pids, a.seed, names).run(a.seconds, a.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
