"""A deep Q-learning loop shaped as PyTorch's DQN tutorial trains CartPole
(intermediate_source/reinforcement_q_learning.py): each environment step
pushes a transition of small device tensors (state, action, next state,
reward) into a replay memory, a ``deque(maxlen=...)`` of namedtuples; each
step draws a batch of transitions at random with ``random.sample``,
concatenates them, takes one optimizer step, and moves the target network a
little toward the policy network. A transition's tensors are used when it is
made and then whenever a draw picks it, and wait between draws and after the
last one until the deque evicts them: no leak (`check` once flagged every
transition as lingering under `run --track`, and the full memory's blocks as
never freed under `run`). The environment is a pole on a cart of a few lines
(gymnasium's CartPole-v1 equations), no gymnasium needed; its state is seen
through 2048 random Fourier features (8 KiB a state, where the tutorial's 4
numbers would keep a leak of them under `check`'s floor of minor findings).

Its exploration decays as the tutorial's (epsilon-greedy, from 90% to 5%):
a transition's action is made at the random line less and less, at the
policy's line more and more, so each line's share of the full memory moves
while the memory stays flat (`check` once called the policy's line growth).

``fixed``: the memory holds 64 transitions, full after the first 64 steps.
``leak``: every transition is also appended to ``seen`` (kept "for
statistics"), so an evicted one stays alive, never drawn again.
Prints "transitions N" last."""

from __future__ import annotations

import math
import random
import sys
from collections import deque, namedtuple

import torch
from torch import nn

Transition = namedtuple("Transition", "state action next_state reward")
STEPS, CAPACITY, BATCH, FEATURES, EPS_DECAY = 250, 64, 32, 2048, 80
# the script's globals, as the tutorial's: alive when the run ends
memory = deque(maxlen=CAPACITY)
seen = []


class CartPole:
    """The pole's angle and the cart's place after each push, Euler steps
    of 20 ms; an episode ends when the pole leans past 12 degrees or the
    cart leaves the track."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.reset()

    def reset(self):
        self.s = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.s)

    def step(self, push_right: int):
        x, v, a, w = self.s
        force = 10.0 if push_right else -10.0
        tmp = (force + 0.05 * w * w * math.sin(a)) / 1.1
        acc_a = (9.8 * math.sin(a) - math.cos(a) * tmp) / (
            0.5 * (4.0 / 3.0 - 0.1 * math.cos(a) ** 2 / 1.1))
        acc_x = tmp - 0.05 * acc_a * math.cos(a) / 1.1
        self.s = [x + 0.02 * v, v + 0.02 * acc_x, a + 0.02 * w, w + 0.02 * acc_a]
        return list(self.s), abs(self.s[2]) > 0.2095 or abs(self.s[0]) > 2.4


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 2)).cuda()


def main(leak: bool) -> int:
    torch.manual_seed(0)
    rng = random.Random(0)
    env = CartPole(rng)
    policy, target = q_network(), q_network()
    target.load_state_dict(policy.state_dict())
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-4, amsgrad=True)

    project = torch.randn(4, FEATURES) * 2
    phase = torch.rand(FEATURES) * 6.283

    def observe(s):
        seen_as = torch.cos(torch.tensor(s) @ project + phase)   # on the host
        return seen_as.to("cuda").unsqueeze(0)

    def learn():
        if len(memory) < BATCH:
            return
        batch = Transition(*zip(*rng.sample(memory, BATCH)))
        # the tutorial masks the final states with a bool tensor; the
        # simulated device runs no kernel, so nonzero() would read none: the
        # indices of the others instead, made on the host
        going = torch.tensor([i for i, s in enumerate(batch.next_state) if s is not None],
                             dtype=torch.long, device="cuda")
        q = policy(torch.cat(batch.state)).gather(1, torch.cat(batch.action))
        later = torch.zeros(BATCH, device="cuda")
        with torch.no_grad():
            later[going] = target(torch.cat([s for s in batch.next_state if s is not None])
                                  ).max(1).values
        goal = later * 0.99 + torch.cat(batch.reward)
        loss = nn.functional.smooth_l1_loss(q, goal.unsqueeze(1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(policy.parameters(), 100)
        opt.step()

    state = observe(env.reset())
    for step in range(STEPS):
        # explore less and less, as the tutorial's epsilon-greedy policy
        if rng.random() > 0.05 + 0.85 * math.exp(-step / EPS_DECAY):
            with torch.no_grad():
                action = policy(state).max(1).indices.view(1, 1)
        else:
            action = torch.tensor([[rng.randrange(2)]], device="cuda")
        s, over = env.step(int(action.item()))
        reward = torch.tensor([1.0], device="cuda")
        after = None if over else observe(s)
        memory.append(Transition(state, action, after, reward))
        if leak:
            seen.append(memory[-1])
        state = observe(env.reset()) if over else after
        learn()
        with torch.no_grad():   # the target follows the policy by 0.5 %
            for p, q in zip(target.parameters(), policy.parameters()):
                p.mul_(0.995).add_(q, alpha=0.005)
    print(f"transitions {len(memory) + len(seen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(len(sys.argv) > 1 and sys.argv[1] == "leak"))
