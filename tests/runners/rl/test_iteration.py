"""The RL loop's collect-and-store step (runners/rl/iteration.py) against what the environment did.

A scripted env (tests/scripted_env.py) ends episodes by termination (task 0 at step 3), by the
time limit alone (task 1: truncated at 5) and by termination on the time limit's step (task 2 at
5). Every stored transition must carry the real next observation of its own episode (the env's
``final_obs``, not the reset observation the same-step autoreset returns) and ``terminated``
exactly where the env terminated: a truncation is not terminal, so the critic bootstraps there.
"""

import numpy as np
import torch

import morl
from morl.agents.rl.replay import MultiTaskReplay
from morl.runners.rl.config import RLConfig
from morl.runners.rl.iteration import iterate
from morl.runners.rl.metrics import AggregationTimer, LoopStats, SectionTimer
from morl.runners.rl.session import Session
from tests.scripted_env import EPISODE, STEP, ScriptedEnv, check_transitions

STEPS = 12  # task 0: 4 episodes (3 terminated), task 1: 2 truncated, task 2: 2 terminated on the limit


def _run_loop() -> tuple[ScriptedEnv, MultiTaskReplay, Session]:
    env = ScriptedEnv()
    cfg = RLConfig()
    cfg.run.warmup_steps = STEPS + 1  # random actions throughout: the loop stores, nothing updates
    replay = MultiTaskReplay(env.num_tasks, 64, env.single_observation_space.shape[0], 1)
    aggregator = morl.build("mean")
    s = Session(
        cfg=cfg,
        device=torch.device("cpu"),
        env=env,
        eval_env=None,
        agent=None,
        aggregator=aggregator,
        replay=replay,
        sample_gen=torch.Generator().manual_seed(0),
        action_rng=np.random.default_rng(0),
        obs=env.reset(seed=0)[0],
        stats=LoopStats(env.num_tasks),
    )
    timer, agg_timer = SectionTimer(), AggregationTimer(aggregator, s.device)
    for _ in range(STEPS):
        iterate(s, timer, agg_timer)
    return env, replay, s


def test_the_replay_holds_each_episodes_final_observation_and_its_true_terminations():
    env, replay, s = _run_loop()
    assert replay.sizes().tolist() == [STEPS] * env.num_tasks and s.step == STEPS
    data = {k: v[:, :STEPS].numpy() for k, v in replay.storage.items()}
    for task in range(env.num_tasks):
        check_transitions(data["obs"][task], data["next_obs"][task], data["terminated"][task], env.terminate_at[task])
    # the script's episode ends, by hand: where the next observation is an episode's last step
    ends = data["next_obs"][..., STEP]
    assert (ends[0] == 3).sum() == 4 and data["terminated"][0].sum() == 4
    assert (ends[1] == 5).sum() == 2 and data["terminated"][1].sum() == 0  # truncated: never terminal
    assert (ends[2] == 5).sum() == 2 and data["terminated"][2].sum() == 2  # terminated on the limit's step
    np.testing.assert_array_equal(data["reward"], 10.0 * np.arange(env.num_tasks)[:, None] + ends)
    # and the loop acts next on what the env returned: the same episode's next step, or a fresh one
    last = np.array([3, 5, 5])[:, None]
    ended = ends[:, :-1] == last
    following, previous = data["obs"][:, 1:], data["next_obs"][:, :-1]
    np.testing.assert_array_equal(following[~ended], previous[~ended])
    assert (following[ended][:, STEP] == 0).all()
    np.testing.assert_array_equal(following[ended][:, EPISODE], previous[ended][:, EPISODE] + 1)
