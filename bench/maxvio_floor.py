#!/usr/bin/env python3
"""bench/maxvio_floor.py LONGHAUL DB [EXPERTS TOPK BATCH GROUP]: how low a
learner step's MaxVio can go on a run's own episodes, whatever the router.

Identical contexts (the same tokens from the start) route alike under any
router, so a step's load comes in lumps: a prefix that every episode shares
(calc's instruction) lands on its experts once per episode. This reads the
run's episodes whole (`longhaul replay export`), draws steps of BATCH
episodes in groups of GROUP as the learner takes them (default 96 in 8, at
1,024 experts top 16), merges each step's episodes into a prefix tree (one
node a distinct context, weighted by the episodes through it) and prints
the step's MaxVio, mean over 20 drawn steps, for two routers:
  random: each context to TOPK experts drawn at random, a router that
          splits every context but knows nothing of the load;
  best:   contexts in decreasing weight, each to the TOPK experts least
          loaded so far (a greedy balanced assignment: about the lowest
          MaxVio any router reaches on these steps).
The share of the step's routed tokens that repeat a context routed before in
the same step is printed too; then, each distinct context routed once a step
as the learner's prefix tree trains it, at BATCH, 2 BATCH and 4 BATCH
episodes: the random router's MaxVio (the noise of a step's load alone, no
repeats), and that of a router that sends every context ending in the same
token to the same experts, its lumps placed as evenly as they go (how far a
first layer routing by the token would be from balance). Uses numpy
(python3-numpy)."""
import json
import subprocess
import sys

import numpy as np

binary, db = sys.argv[1], sys.argv[2]
sizes = [1024, 16, 96, 8]  # experts, top-k, a step's episodes, a group's
for i, a in enumerate(sys.argv[3:7]):
    sizes[i] = int(a)
E, K, BATCH, GROUP = sizes
out = subprocess.run([binary, "replay", "export", "--db", db, "--status", "complete,truncated"],
                     check=True, capture_output=True, text=True).stdout
groups = {}
for line in out.splitlines():
    ep = json.loads(line)
    toks = [t for seg in ep["segments"] for t in seg["tokens"]]
    groups.setdefault(ep["group_id"], []).append(toks)
full = [g[:GROUP] for g in groups.values() if len(g) >= GROUP]
if len(full) < BATCH // GROUP:
    sys.exit(f"maxvio_floor: {len(full)} whole groups of {GROUP} in {db}, {BATCH // GROUP} wanted")


def contexts(episodes, with_tokens=False):
    """The weights of a step's distinct contexts (prefix tree nodes), and
    with_tokens the token each ends with."""
    children, weight, last = [{}], [0], [0]
    for toks in episodes:
        node = 0
        for t in toks:
            nxt = children[node].get(t)
            if nxt is None:
                nxt = len(weight)
                children[node][t] = nxt
                children.append({})
                weight.append(0)
                last.append(t)
            weight[nxt] += 1
            node = nxt
    w = np.array(weight[1:], dtype=np.int64)
    return (w, np.array(last[1:], dtype=np.int64)) if with_tokens else w


rng = np.random.default_rng(1)


def random_maxvio(weights):
    """MaxVio when each of the weighted contexts goes to K random experts."""
    load = np.zeros(E)
    for x in weights:
        load[rng.choice(E, K, replace=False)] += x
    return load.max() / load.mean() - 1


def placed_maxvio(weights):
    """MaxVio when the weighted lumps go, heaviest first, each to the K
    experts least loaded so far."""
    load = np.zeros(E)
    for x in np.sort(weights)[::-1]:
        load[np.argpartition(load, K)[:K]] += x
    return load.max() / load.mean() - 1


rand, best, repeat = [], [], []
for _ in range(20):
    pick = rng.choice(len(full), BATCH // GROUP, replace=False)
    w = contexts([toks for i in pick for toks in full[i]])
    repeat.append(1 - len(w) / float(w.sum()))
    rand.append(random_maxvio(w))
    best.append(placed_maxvio(w))
print(f"maxvio_floor: {len(full)} groups of {GROUP} in {db}; steps of {BATCH} episodes, {E} experts top {K}, "
      f"20 steps drawn")
print(f"routed tokens that repeat a context routed before in the same step: {np.mean(repeat):.2f}")
print(f"step MaxVio, random router {np.mean(rand):.2f} (min {np.min(rand):.2f}, max {np.max(rand):.2f}), "
      f"best assignment {np.mean(best):.2f}")
# Each distinct context trained once a step (the learner's prefix tree,
# learner/train_tree.c) routes once: the random router's MaxVio on those
# alone, at this step size and larger; and a router that sends every
# context ending in the same token to the same experts (as a first layer,
# whose input is mostly the token's embedding, nearly does), its lumps
# (one a token) placed as evenly as they can be: the byte vocabulary's
# frequent tokens (the space, digits) are lumps no bias can split.
for scale in (1, 2, 4):
    groups_wanted = scale * BATCH // GROUP
    if len(full) < groups_wanted:
        break
    once, sizes, by_token, top_share = [], [], [], []
    for _ in range(20):
        pick = rng.choice(len(full), groups_wanted, replace=False)
        w, last = contexts([toks for i in pick for toks in full[i]], with_tokens=True)
        n = len(w)
        once.append(random_maxvio(np.ones(n)))
        sizes.append(n)
        lumps = np.bincount(last)
        top_share.append(lumps.max() / n)
        by_token.append(placed_maxvio(lumps[lumps > 0]))
    print(f"each distinct context routed once, steps of {scale * BATCH} episodes: {np.mean(sizes):.0f} tokens a "
          f"step, random router {np.mean(once):.2f}; routed by token alone, best placement {np.mean(by_token):.2f} "
          f"(the most frequent token {np.mean(top_share):.3f} of the contexts)")
print(f"floor: random={np.mean(rand):.2f} best={np.mean(best):.2f}")
