"""An actor-critic agent on a cart-pole (the shape of pytorch/examples'
reinforcement_learning/actor_critic.py, written again here with the pole's
physics in numpy: no gym). Every environment step runs the policy once and
keeps its log-probability and value for the episode's update.

``leak``: the critic's value of every step is also kept for a plot as the
tensor itself (``value_log.append(value)``), one 4-byte tensor a step, each
in a 512-byte block of PyTorch's cache, for the whole run; ``fixed`` keeps
``value.item()``. The graph each value came from is freed by the episode's
backward: what the leak keeps is the blocks, which grow with the run.

    actor_critic.py leak|fixed [EPISODES]      prints "episodes N, values M" last
"""

from __future__ import annotations

import math
import sys
from typing import List, NamedTuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The simulated device computes nothing (its values are whatever memory
# held): probabilities of zeros would fail Categorical's argument check.
torch.distributions.Distribution.set_default_validate_args(False)


class Pole:
    """A pole on a cart (the classic control problem's equations, Euler
    steps of 20 ms); an episode ends when the pole falls past 12 degrees or
    the cart leaves the track."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros(4)

    def reset(self) -> np.ndarray:
        self.state = self.rng.uniform(-0.05, 0.05, 4)
        return self.state.astype(np.float32)

    def step(self, push_right: bool):
        x, speed, angle, spin = self.state
        force = 10.0 if push_right else -10.0
        cos, sin = math.cos(angle), math.sin(angle)
        lever = (force + 0.05 * spin * spin * sin) / 1.1
        spin_acc = (9.8 * sin - cos * lever) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        acc = lever - 0.05 * spin_acc * cos / 1.1
        self.state = np.array([x + 0.02 * speed, speed + 0.02 * acc,
                               angle + 0.02 * spin, spin + 0.02 * spin_acc])
        fallen = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.2095
        return self.state.astype(np.float32), 1.0, fallen


class Choice(NamedTuple):
    log_prob: torch.Tensor
    value: torch.Tensor


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 128)
        self.actor = nn.Linear(128, 2)
        self.critic = nn.Linear(128, 1)
        self.choices: List[Choice] = []
        self.rewards: List[float] = []

    def forward(self, obs: torch.Tensor):
        h = F.relu(self.body(obs))
        return F.softmax(self.actor(h), dim=-1), self.critic(h)


def main(leak: bool, episodes: int) -> None:
    torch.manual_seed(0)
    env = Pole(0)
    agent = ActorCritic().cuda()
    opt = torch.optim.Adam(agent.parameters(), lr=3e-2)
    value_log: list = []

    def act(obs: np.ndarray) -> bool:
        probs, value = agent(torch.from_numpy(obs).cuda())
        dist = torch.distributions.Categorical(probs)
        action = dist.sample()
        agent.choices.append(Choice(dist.log_prob(action), value))
        value_log.append(value if leak else value.item())
        return bool(action.item())

    def update() -> None:
        ret, returns = 0.0, []
        for r in reversed(agent.rewards):
            ret = r + 0.99 * ret
            returns.insert(0, ret)
        target = torch.tensor(returns, device="cuda")
        target = (target - target.mean()) / (target.std() + 1e-6)
        actor_terms, critic_terms = [], []
        for (log_prob, value), r in zip(agent.choices, target):
            actor_terms.append(-log_prob * (r - value.item()))
            critic_terms.append(F.smooth_l1_loss(value, r.reshape(1)))
        opt.zero_grad()
        (torch.stack(actor_terms).sum() + torch.stack(critic_terms).sum()).backward()
        opt.step()
        agent.rewards.clear()
        agent.choices.clear()

    for _ in range(episodes):
        obs = env.reset()
        for _ in range(200):
            obs, reward, done = env.step(act(obs))
            agent.rewards.append(reward)
            if done:
                break
        update()
    print(f"episodes {episodes}, values {len(value_log)}")


if __name__ == "__main__":
    main(sys.argv[1] == "leak", int(sys.argv[2]) if len(sys.argv) > 2 else 60)
