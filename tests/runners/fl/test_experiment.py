"""``morl fl`` on the experiment shell: a run stopped (in process, by SIGTERM, or by a crash) and
resumed ends bitwise equal to the uninterrupted run; bad input gives one line and exit 2;
``morl eval`` evaluates a finished run; MosT beats FedAvg, the baselines learn, the official round runs."""

import json
from pathlib import Path

import pytest
import torch

from morl.agents.federated import simulator
from morl.agents.federated import strategies as S
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.fl.config import FLConfig
from morl.runners.fl.experiment import FLExperiment
from morl.runners.interrupts import Interrupted
from morl.runners.shell.commands import resume, start
from tests.agents.federated.fl_fixtures import run_fl, spy_federation
from tests.runners.shell_resume_checks import morl_resume, sigterm_after_first_record
from tests.state_equality import assert_state_equal

ROOT = Path(__file__).resolve().parents[3]


CONFIG = str(ROOT / "configs" / "fl_most_official.yaml")


# The official round exercises every piece of resumable state: pair sampling with cached stale
# deltas, the cumulative Γ average, the switch's avg_S, the curriculum, the OT warm start.
TINY = [
    "device=cpu",
    "data.num_clients=8",
    "strategy.num_models=3",
    "train.local_steps=3",
    "strategy.most.warmup_rounds=1",
    "strategy.most.sample_fraction=0.25",
    "strategy.most.gamma_average_start=4",
]


ARGS = [*TINY, "train.rounds=9", "train.eval_every=2", "train.checkpoint_every=3"]


# wall-clock: differ between any two runs
TIMING = ("time", "perf/client_seconds", "perf/server_seconds", "perf/eval_seconds")


def _state(run_dir: Path, skip_rngs: tuple[str, ...] = ()) -> dict:
    state = torch_load(run_dir / "checkpoints" / "last.pt")
    state["rng"] = {k: v for k, v in state["rng"].items() if k not in skip_rngs}
    return {k: v for k, v in state.items() if k not in ("seconds", "logged_seconds")}  # timers: wall-clock


def _records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def _assert_same_run(a: Path, b: Path, rounds: int, skip_rngs: tuple[str, ...] = ()) -> None:
    sa, sb = _state(a, skip_rngs), _state(b, skip_rngs)
    assert sa["round"] == sb["round"] == sa["position"] == rounds
    assert_state_equal(sa, sb, "last.pt")
    assert _records(a) == _records(b)
    fa, fb = (json.loads((d / "final_metrics.json").read_text()) for d in (a, b))
    assert fa["final"] == fb["final"] and fa["best_val"] == fb["best_val"] and fa["rounds"] == rounds
    assert json.loads((b / "run.json").read_text())["status"] == "finished"


def test_stopped_and_resumed_in_process_equals_the_uninterrupted_run(tmp_path):
    cfg = lambda: FLExperiment.load_config(CONFIG, ARGS)  # noqa: E731
    full = start("fl", cfg(), run_dir=tmp_path / "full", progress=False)
    # Round 7: neither an evaluation (every 2) nor a periodic checkpoint (every 3) is due there.
    with pytest.raises(Interrupted, match="morl resume"):
        start("fl", cfg(), run_dir=tmp_path / "stopped", progress=False, stop_at=7)
    stopped = tmp_path / "stopped"
    assert torch_load(stopped / "checkpoints" / "last.pt")["round"] == 7
    assert json.loads((stopped / "run.json").read_text())["status"] == "interrupted"
    resume(stopped, progress=False)
    _assert_same_run(full, stopped, 9)
    strategy = _state(full)["federation"]["strategy"]
    assert len(strategy["branches"]) == 8 and strategy["cache_deltas"] is not None and strategy["gamma_count"] > 0
    assert [(r["kind"], r["step"]) for r in _records(full)] == [
        (k, s) for s in (2, 4, 6, 8, 9) for k in ("train", "eval")
    ]


def test_crashed_run_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    cfg = lambda: FLExperiment.load_config(CONFIG, ARGS)  # noqa: E731
    full = start("fl", cfg(), run_dir=tmp_path / "full", progress=False)
    orig = simulator.Federation.run_round

    def crash_in_round_8(self, engine):  # the last checkpoint is round 6, the last evaluation too
        if self.round == 7:
            raise RuntimeError("simulated crash")
        orig(self, engine)

    monkeypatch.setattr(simulator.Federation, "run_round", crash_in_round_8)
    with pytest.raises(RuntimeError, match="simulated crash"):
        start("fl", cfg(), run_dir=tmp_path / "crashed", progress=False)
    monkeypatch.setattr(simulator.Federation, "run_round", orig)
    crashed = tmp_path / "crashed"
    assert (
        torch_load(crashed / "checkpoints" / "last.pt")["round"] == 6 and not (crashed / "final_metrics.json").exists()
    )
    assert morl(["resume", str(crashed), "--no-progress"]) == 0  # dispatches on run.json
    _assert_same_run(full, crashed, 9)  # the records of round 7 (written before the crash) are not repeated


@pytest.mark.integration  # a subprocess stopped by SIGTERM
def test_sigterm_checkpoints_and_morl_resume_finishes_the_run(tmp_path):
    # Long enough (80 rounds, ~2 s of CPU) that the signal arrives mid-run.
    args = [CONFIG, *TINY, "train.rounds=80", "train.eval_every=4", "train.checkpoint_every=1000"]
    start(
        "fl", FLExperiment.load_config(args[0], args[1:]), run_dir=tmp_path / "full", progress=False
    )  # the reference, in process
    run_dir = tmp_path / "stopped"
    sigterm_after_first_record(["fl", *args], run_dir)
    assert 0 < torch_load(run_dir / "checkpoints" / "last.pt")["round"] < 80
    morl_resume(run_dir)
    _assert_same_run(tmp_path / "full", run_dir, 80)


@pytest.mark.parametrize(
    "bad, says",
    [
        ("train.epochs=3", "unknown config key 'train.epochs'"),
        ("train.rounds=0", "train.rounds must be >= 1"),
        ("strategy.most.sample_fraction=1.5", "sample_fraction must be in (0, 1]"),
        ("train.checkpoint_minutes=0", "train.checkpoint_minutes must be > 0 or null"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(bad, says, tmp_path, capsys):
    assert morl(["fl", CONFIG, *ARGS, bad, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morl: error:") and "\n" not in err and says in err, err
    assert not (tmp_path / "run").exists()


def test_resume_rejects_learner_overrides_and_extends_rounds(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert morl(["fl", CONFIG, *TINY, "train.rounds=4", "--run-dir", str(run_dir), "--no-progress"]) == 0
    config = (run_dir / "config.yaml").read_text()
    capsys.readouterr()
    assert morl(["resume", str(run_dir), "strategy.most.sample_fraction=0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "strategy.most.sample_fraction" in err and "train.rounds" in err
    assert (run_dir / "config.yaml").read_text() == config  # nothing rewritten
    assert morl(["resume", str(tmp_path / "nope")]) == 2
    assert morl(["fl", "--resume", str(run_dir), "train.rounds=6", "--no-progress"]) == 0
    assert torch_load(run_dir / "checkpoints" / "last.pt")["round"] == 6
    assert json.loads((run_dir / "final_metrics.json").read_text())["rounds"] == 6


def test_morl_eval_on_a_finished_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert morl(["fl", CONFIG, *TINY, "train.rounds=3", "--run-dir", str(run_dir), "--no-progress"]) == 0
    final = json.loads((run_dir / "final_metrics.json").read_text())
    capsys.readouterr()
    assert morl(["eval", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "evaluation of" in out and "round 3" in out and "test_mean:" in out
    written = json.loads((run_dir / "eval" / "round_000000003.json").read_text())
    assert written["kind"] == "fl" and written["round"] == 3
    # the checkpoint's models evaluated again give the run's own last evaluation
    assert written["headline"] == written["test_mean"] == final["final"]["test_mean"] == final["headline"]


@pytest.mark.integration  # Flower's Simulation Runtime on Ray
def test_flower_engine_steps_one_round_at_a_time_and_resumes_bitwise(tmp_path):
    # Flower's loop runs in a thread parked between rounds (runners/fl/flower_rounds.py): a stop
    # after round 2 and a resume (a new Flower simulation) end where the straight run does.
    # Three Ray start-ups: about 1 min of wall-clock on 2 CPUs.
    pytest.importorskip("flwr")

    args = [
        "configs/fl_synthetic_most_flower.yaml",
        "device=cpu",
        "data.num_clients=4",
        "strategy.num_models=2",
        "train.local_steps=2",
        "train.rounds=4",
        "train.eval_every=2",
        "train.checkpoint_every=10",
        "strategy.most.warmup_rounds=1",
        "engine.num_cpus=2",
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ClientApps: the server's reductions round the same in every run
    try:
        cfg = lambda: FLExperiment.load_config(str(ROOT / args[0]), args[1:])  # noqa: E731
        full = start("fl", cfg(), run_dir=tmp_path / "full", progress=False)
        with pytest.raises(Interrupted):
            start("fl", cfg(), run_dir=tmp_path / "stopped", progress=False, stop_at=3)
        assert torch_load(tmp_path / "stopped" / "checkpoints" / "last.pt")["round"] == 3
        resume(tmp_path / "stopped", progress=False)
    finally:
        torch.set_num_threads(threads)
    # Flower and Ray draw from Python's global RNG themselves (ids of runs and messages), as often
    # as there are simulations: that one state cannot match; nothing of the run draws from it.
    _assert_same_run(full, tmp_path / "stopped", 4, skip_rngs=("python",))


def test_non_finite_models_stop_with_exit_3_before_the_checkpoint(tmp_path, monkeypatch, capsys):
    orig = simulator.Federation.run_round

    def nan_in_round_3(self, engine):
        orig(self, engine)
        if self.round == 3:
            self.thetas[0, 0] = float("nan")

    monkeypatch.setattr(simulator.Federation, "run_round", nan_in_round_3)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        morl(
            [
                "fl",
                CONFIG,
                *TINY,
                "train.rounds=6",
                "train.checkpoint_every=1",
                "--run-dir",
                str(run_dir),
                "--no-progress",
            ]
        )
    assert stop.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        "morl: error: training diverged at round 3/6: a global model has non-finite (NaN/inf) parameters; "
        f"last good checkpoint {run_dir / 'checkpoints' / 'last.pt'} (round 2); try a lower learning rate"
    )
    assert torch_load(run_dir / "checkpoints" / "last.pt")["round"] == 2  # the diverged state never replaced it
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"


def _cfg(strategy, rounds=15, **most):
    cfg = FLConfig(device="cpu")
    cfg.strategy.name = strategy
    for k, v in most.items():
        setattr(cfg.strategy.most, k, v)
    cfg.train.rounds, cfg.train.eval_every, cfg.train.local_steps = rounds, rounds, 6
    return cfg


def test_most_beats_fedavg_on_synthetic():
    # Syn(0.5, 0.5), 30 clients, m = 5, val-picked test accuracy (MosT Table 1's protocol).
    fedavg = run_fl(_cfg("fedavg"))["final"]
    most = run_fl(_cfg("most", combine="linear"))["final"]
    assert most["test_mean"] > fedavg["test_mean"] + 0.01
    assert most["test_worst20"] > fedavg["test_worst20"] + 0.02
    assert min(most["model_share"]) >= 2  # every model is some clients' best: no collapse


@pytest.mark.integration  # four learning runs
@pytest.mark.parametrize("strategy", ["fedprox", "fedmgda", "mgda", "linearization"])
def test_baselines_learn(strategy):
    res = run_fl(_cfg(strategy, rounds=10))["final"]
    assert res["test_mean"] > 0.6


def test_most_switch_takes_both_branches_and_is_deterministic():
    # The official code's rule: MGDA when S = Σ Γ_ij L_ij drops below its EMA, else linear.
    def once():
        fed = {}
        orig = S.MosTStrategy.aggregate

        def spy(self, *a):
            fed["strategy"] = self
            return orig(self, *a)

        S.MosTStrategy.aggregate = spy
        try:
            cfg = _cfg("most", rounds=8, combine="switch", warmup_rounds=1)
            cfg.data.num_clients, cfg.train.local_steps = 10, 3
            res = run_fl(cfg)["final"]
        finally:
            S.MosTStrategy.aggregate = orig
        return res, fed["strategy"]

    res, strat = once()
    # Round 1 compares with avg_S = 0, so it is linear; falling losses then pass the test.
    assert strat.branches[0] == "linear" and "mgda" in strat.branches and len(strat.branches) == 7
    assert strat.avg_objective > 0 and strat.state_dict()["avg_objective"] == strat.avg_objective
    again, strat2 = once()
    assert strat2.branches == strat.branches and again == res
    fresh = S.MosTStrategy(strat.most, combine="switch")
    fresh.load_state_dict(strat.state_dict())
    assert fresh.avg_objective == strat.avg_objective
    with pytest.raises(ValueError, match="allowed: mgda, linear, switch"):
        S.MosTStrategy(strat.most, combine="avg")


def test_official_round_runs_end_to_end(monkeypatch):
    seen = spy_federation(monkeypatch)
    overrides = [
        "device=cpu",
        "train.rounds=8",
        "train.eval_every=8",
        "data.num_clients=10",
        "train.local_steps=3",
        "strategy.most.warmup_rounds=1",
        "strategy.most.gamma_average_start=3",
        "strategy.most.sample_fraction=0.2",
    ]
    cfg = FLExperiment.load_config("configs/fl_most_official.yaml", overrides)
    res = run_fl(cfg)["final"]
    strat = seen["fed"].strategy
    assert len(strat.branches) == 7 and strat.branches[0] == "linear"
    assert strat.gamma_count > 0 and strat.cache_deltas.shape == (5, 10, seen["fed"].thetas.shape[1])
    assert res["test_mean"] > 0.5
