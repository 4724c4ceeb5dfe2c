"""One client's session of an Env: checks options and call order, and
turns what the Env returns into what the protocol sends."""
import math

from .errors import EnvError, LH_EENVS_BAD_OPTION, LH_EENVS_NOT_RESET, LH_EUNSUPPORTED


class Session:
    def __init__(self, cls, options):
        self.env = cls()
        known = dict(getattr(cls, "options", None) or {})
        unknown = sorted(k for k in options if k not in known)
        if unknown:
            raise EnvError(LH_EENVS_BAD_OPTION, f"{cls.name}: unknown option '{unknown[0]}'; options: "
                                                f"{','.join(sorted(known)) or '(none)'}")
        known.update(options)
        self.options = {k: str(v) for k, v in known.items()}
        self.ready = False
        self.last_request = 0
        self.owner = self.last_used = None

    def reset(self, seed):
        obs = self.env.reset(seed, dict(self.options))
        self.ready = True
        return text_of(obs)

    def step(self, action):
        """(text, reward, done, terms): reward terms from info["terms"], or
        the reward itself when the Env returns a dict (their sum)."""
        if not self.ready:
            raise EnvError(LH_EENVS_NOT_RESET, f"{self.env.name}: reset first")
        out = self.env.step(action)
        if not isinstance(out, tuple) or len(out) != 4:
            raise EnvError(LH_EUNSUPPORTED, f"{self.env.name}: step must return (obs, reward, done, info)")
        obs, reward, done, info = out
        terms = dict((info or {}).get("terms", {}))
        if isinstance(reward, dict):
            terms = dict(reward)
            reward = sum(reward.values())
        reward = float(reward)
        if not math.isfinite(reward) or not all(math.isfinite(float(v)) for v in terms.values()):
            raise EnvError(LH_EUNSUPPORTED, f"{self.env.name}: a reward that is not finite")
        if done:
            self.ready = False
        return text_of(obs), reward, bool(done), {str(k): float(v) for k, v in terms.items()}

    def expert(self):
        if not self.ready:
            raise EnvError(LH_EENVS_NOT_RESET, f"{self.env.name}: reset first")
        action = self.env.expert()
        if action is None:
            raise EnvError(LH_EUNSUPPORTED, f"{self.env.name}: no expert")
        return action

    def describe(self):
        return self.env.describe()


def text_of(obs):
    if isinstance(obs, str):
        return obs
    raise EnvError(LH_EUNSUPPORTED, "an observation must be text (str)")
