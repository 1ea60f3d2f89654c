"""The update schedule: warm-up without updates, and mtrl's catch-up at the first learning step."""

import pytest

from morl.runners.rl.schedule import step_of_update, updates_at, updates_done


def test_mtrl_catch_up_gives_mtrls_update_count():
    # mtrl's loop (0-based step i): no update while i < 1500, 1500 updates at i == 1500, then 1 per step;
    # so by the end of its iteration i it made i updates, i.e. n - 1 after n env steps (n = i + 1)
    mtrl_total, ours_total = 0, 0
    for i in range(3000):
        mtrl_total += 0 if i < 1500 else (1500 if i == 1500 else 1)
        ours_total += updates_at(i + 1, 1500, 1, True)
        assert ours_total == mtrl_total
    assert updates_done(3000, 1500, 1, True) == 2999


def test_without_catch_up_the_schedule_is_the_plain_warm_up():
    assert [updates_at(s, 3, 2, False) for s in range(1, 7)] == [0, 0, 0, 2, 2, 2]
    assert [updates_at(s, 3, 2, True) for s in range(1, 7)] == [0, 0, 0, 6, 2, 2]
    assert updates_at(1, 0, 2, True) == 2  # no warm-up: nothing to catch up


@pytest.mark.parametrize(
    "warmup, per_step, catch_up", [(0, 1, True), (5, 1, True), (5, 2, True), (5, 2, False), (3, 3, False), (1, 1, True)]
)
def test_step_of_update_inverts_the_schedule(warmup, per_step, catch_up):
    index = 0
    for step in range(1, 40):
        for _ in range(updates_at(step, warmup, per_step, catch_up)):
            assert step_of_update(index, warmup, per_step, catch_up) == step
            index += 1
        assert updates_done(step, warmup, per_step, catch_up) == index


def test_without_catch_up_step_of_update_is_the_loops_old_formula():
    for index in range(50):
        assert step_of_update(index, 7, 3, False) == 7 + 1 + index // 3
