"""``morl fl`` from the command line: a run writes its files; bad values give one line and write nothing."""

from morl.runners.cli import main as morl


def test_cli_writes_a_run_and_rejects_bad_config(tmp_path, capsys):
    args = [
        "configs/fl_synthetic_most.yaml",
        "train.rounds=2",
        "train.eval_every=1",
        "data.num_clients=5",
        "train.local_steps=2",
        "device=cpu",
        "strategy.most.warmup_rounds=1",
    ]
    assert morl(["fl", *args, f"out_dir={tmp_path}", "--no-progress"]) == 0
    run_dir = next(tmp_path.iterdir())
    for name in ("config.yaml", "metrics.jsonl", "final_metrics.json", "run.json", "checkpoints/last.pt"):
        assert (run_dir / name).is_file()
    assert any((run_dir / "tb").iterdir())
    for bad, msg in [
        ("strategy.most.tau=-1", "tau"),
        ("strategy.name=fedsgd", "allowed"),
        ("train.rounds=0", "rounds"),
    ]:
        capsys.readouterr()
        assert morl(["fl", *args, f"out_dir={tmp_path}/x", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("morl: error:") and "\n" not in err and msg in err
    assert not (tmp_path / "x").exists()  # nothing half-written
