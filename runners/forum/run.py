"""``morl forum CONFIG [key=value ...]``: FORUM on data hyper-cleaning or multi-task loss weights.

One loop: every iteration is one FORUM step (inner loop -> ∇q̃ -> per-objective gradients ->
λ QP -> momentum -> step); every ``eval_every`` iterations the run logs its diagnostics and
evaluates. At the end the baselines are trained on the same data and everything goes to
``final_metrics.json`` (test metrics of FORUM and of the baselines) and ``checkpoints/last.pt``.
"""

from __future__ import annotations

import json
import time

from morl.runners.errors import UserError

FINAL_METRICS = "final_metrics.json"


def add_arguments(parser) -> None:
    parser.add_argument("config", help="YAML config (e.g. configs/forum_hypercleaning_digits.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. iterations=300 forum.rho=0.9")


def load(args):
    """Read and validate the config; nothing is written here."""
    from morl.runners.config import load_config
    from morl.runners.forum.config import ForumRunConfig

    cfg = load_config(ForumRunConfig, args.config, args.overrides)
    for key in ("iterations", "eval_every"):
        if getattr(cfg, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(cfg, key)}")
    f = cfg.forum
    if f.inner_steps < 1:
        raise UserError(f"forum.inner_steps must be >= 1, got {f.inner_steps}")
    for key, value in (("forum.inner_lr", f.inner_lr), ("hypercleaning.alpha_lr", cfg.hypercleaning.alpha_lr),
                       ("hypercleaning.omega_lr", cfg.hypercleaning.omega_lr), ("mtl.alpha_lr", cfg.mtl.alpha_lr),
                       ("mtl.lr", cfg.mtl.lr), ("mtl.batch_size", cfg.mtl.batch_size)):  # fmt: skip
        if not value > 0:
            raise UserError(f"{key} must be > 0, got {value}")
    if f.rho < 0 or f.beta_power < 0:
        raise UserError(f"forum.rho and forum.beta_power must be >= 0, got {f.rho} and {f.beta_power}")
    hc = cfg.hypercleaning
    if not 1 <= hc.datasets <= 4:
        raise UserError(f"hypercleaning.datasets must be between 1 and 4, got {hc.datasets}")
    if not 0 <= hc.noise < 1:
        raise UserError(f"hypercleaning.noise must be in [0, 1), got {hc.noise}")
    if hc.batch_size is not None and hc.batch_size < 1:
        raise UserError(f"hypercleaning.batch_size must be >= 1 or null, got {hc.batch_size}")
    if any(h < 1 for h in hc.hidden + cfg.mtl.hidden):
        raise UserError("hidden layer widths must be >= 1")
    return cfg


def main(args) -> int:
    import torch

    from morl.runners.device import resolve_device
    from morl.runners.run_dir import new_run_dir

    cfg = load(args)
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    problem = HyperCleaningRun(cfg, device) if cfg.problem == "hypercleaning" else MTLRun(cfg, device)
    run_dir = new_run_dir(cfg.out_dir, cfg.name)
    return run(cfg, problem, run_dir)


def run(cfg, problem, run_dir) -> int:
    from morl.runners.checkpoint import atomic_torch_save, atomic_write_text
    from morl.runners.config import save_config, to_dict
    from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT
    from morl.runners.tensorboard import RunLogger, flatten_config

    save_config(cfg, run_dir / "config.yaml")
    log = RunLogger(run_dir)
    start = time.time()
    try:
        for k in range(1, cfg.iterations + 1):
            diag = problem.step(k)
            if k % cfg.eval_every == 0 or k == cfg.iterations:
                metrics = problem.log(log, diag, k)
                metrics["time_per_iteration"] = (time.time() - start) / k
                log.record(k, **metrics)
                log.flush()
                print(f"[forum] iteration {k}/{cfg.iterations}: " + problem.summary(metrics), flush=True)
        final = {"forum": problem.final_metrics()}
        if problem.has_baselines:
            print("[forum] training the baselines on the same data ...", flush=True)
            final.update(problem.baselines())
        atomic_write_text(run_dir / FINAL_METRICS, json.dumps(final, indent=2))
        atomic_torch_save(problem.state_dict(), run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)
        log.hparams(flatten_config(to_dict(cfg)), {f"final/{k}": v for k, v in final["forum"].items() if isinstance(v, float)})
    finally:
        log.close()
    for method, values in final.items():
        print(f"[forum] {method}: " + ", ".join(f"{k}={v:.2f}" for k, v in values.items() if isinstance(v, float)))
    print(f"[forum] run directory: {run_dir}")
    return 0


class HyperCleaningRun:
    """FORUM hyper-cleaning on rotated digit shards (morl.agents.supervised.hypercleaning)."""

    has_baselines = True

    def __init__(self, cfg, device) -> None:
        from morl.agents.supervised.hypercleaning import HyperCleaner
        from morl.envs.data.hypercleaning import make_hypercleaning_data

        hc, f = cfg.hypercleaning, cfg.forum
        self.cfg = cfg
        try:
            self.data = make_hypercleaning_data(hc.datasets, hc.noise, cfg.seed).to(device)
        except ValueError as exc:
            raise UserError(f"hypercleaning: {exc}") from None
        self.cleaner = HyperCleaner(
            self.data, hidden=tuple(hc.hidden), alpha_lr=hc.alpha_lr, omega_lr=hc.omega_lr, inner_lr=f.inner_lr,
            inner_steps=f.inner_steps, rho=f.rho, beta_power=f.beta_power, alpha_init=hc.alpha_init,
            batch_size=hc.batch_size, seed=cfg.seed,
        )  # fmt: skip
        self.cleaner.forum.normalize_upper = f.normalize_upper
        self.cleaner.forum.warm_start = f.warm_start
        self.names = [f"dataset{i}" for i in range(self.data.m)]
        self.best_val2, self.best_test = -1.0, None

    def step(self, k: int):
        return self.cleaner.step()

    def log(self, log, diag, k: int) -> dict:
        from morl.agents.supervised.hypercleaning import evaluate

        val2 = evaluate(self.cleaner.model, self.data.val2)
        test = evaluate(self.cleaner.model, self.data.test)
        score = float(val2["accuracy"].mean())
        if score > self.best_val2:
            self.best_val2 = score
            self.best_test = {k: v.clone() for k, v in test.items()}
        out = _log_forum(log, diag, self.names, k)
        out["val2_accuracy"] = log.per_task("val2/accuracy", val2["accuracy"], self.names, k)
        out["test_accuracy"] = log.per_task("test/accuracy", test["accuracy"], self.names, k)
        out["test_f1"] = log.per_task("test/f1", test["f1"], self.names, k)
        for name, value in self.cleaner.weight_stats().items():
            out[name] = log.scalar(f"weights/{name}", value, k)
        return out

    def summary(self, m: dict) -> str:
        return (f"test acc {m['test_accuracy']['mean']:.2f}%, weight clean {m['weight_clean']:.3f} vs corrupted "
                f"{m['weight_corrupted']:.3f}, q̃ {m['q_tilde']:.3g}, ν {m['nu']:.3g}")  # fmt: skip

    def final_metrics(self) -> dict:
        return _test_summary(self.best_test, self.names) | {"best_val2_accuracy": self.best_val2}

    def baselines(self) -> dict:
        from morl.agents.supervised.hypercleaning import train_plain

        hc = self.cfg.hypercleaning
        out = {}
        for key, with_val1 in (("plain_noisy", False), ("plain_noisy_plus_val1", True)):
            _, test = train_plain(self.data, steps=self.cfg.iterations, hidden=tuple(hc.hidden), lr=hc.omega_lr,
                                  include_val1=with_val1, eval_every=self.cfg.eval_every, seed=self.cfg.seed)  # fmt: skip
            out[key] = _test_summary(test, self.names)
        return out

    def state_dict(self) -> dict:
        return self.cleaner.state_dict()


class MTLRun:
    """FORUM loss-weight learning through the supervised adapter (morl.agents.supervised.loss_weight_learning)."""

    def __init__(self, cfg, device) -> None:
        import torch

        from morl.envs.data.supervised import load_dataset

        self.cfg, self.device = cfg, device
        mc = cfg.mtl
        try:
            self.data = load_dataset(mc.data.name, seed=cfg.seed, **mc.data.options)
        except (ValueError, FileNotFoundError, ImportError) as exc:
            raise UserError(f"mtl.data: {exc}") from None
        self.has_baselines = mc.baseline
        self.names = self.data.task_names
        self.gen = torch.Generator().manual_seed(cfg.seed + 11)
        self.learner = self._build(forum=True)
        self.iters_per_epoch = max(1, self.data.train[0].shape[0] // mc.batch_size)

    def _build(self, forum: bool):
        import torch

        from morl.agents.supervised.loss_weight_learning import LossWeightLearner
        from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL
        from morl.aggregators import build

        mc, f = self.cfg.mtl, self.cfg.forum
        torch.manual_seed(self.cfg.seed)
        model = MultiHeadMLP(self.data.in_dim, mc.hidden, self.data.specs).to(self.device)
        opt = torch.optim.Adam(model.parameters(), lr=mc.lr, weight_decay=mc.weight_decay)
        adapter = SupervisedMTL(model, build("mean"), opt, shared="trunk", loss_fn=MultiTaskLoss(self.data.specs))
        if not forum:
            return adapter
        return LossWeightLearner(
            adapter, len(self.names), alpha_lr=mc.alpha_lr, inner_lr=f.inner_lr, inner_steps=f.inner_steps, rho=f.rho,
            beta_power=f.beta_power, normalize_upper=f.normalize_upper, upper_split=mc.upper_split,
        )  # fmt: skip

    def _batch(self, split: str):
        import torch

        x, y = self.data.split(split)
        rows = torch.randint(0, x.shape[0], (self.cfg.mtl.batch_size,), generator=self.gen)
        return x[rows], y[rows]

    def step(self, k: int):
        f = self.cfg.forum
        beta = None
        if f.beta_per_epoch:
            beta = float((k - 1) // self.iters_per_epoch + 1) ** (-f.beta_power)
        self.learner.forum.warm_start = f.warm_start
        return self.learner.step(self._batch("train"), self._batch(self.cfg.mtl.upper_split), beta=beta)

    def _test(self, adapter) -> dict:
        return adapter.evaluate(self.data.batches("test", 512))

    def log(self, log, diag, k: int) -> dict:
        out = _log_forum(log, diag, self.names, k)
        out["loss_weights"] = log.per_task("forum/loss_weight", diag["weights"], self.names, k, mean=False)
        test = self._test(self.learner.adapter)
        for name, value in test.items():
            out[f"test/{name}"] = log.scalar(f"test/{name}", value, k)
        return out

    def summary(self, m: dict) -> str:
        acc = [v for key, v in m.items() if key.startswith("test/") and key.endswith("/accuracy")]
        weights = ", ".join(f"{v:.3f}" for v in m["loss_weights"].values())
        return f"mean test acc {100 * sum(acc) / max(len(acc), 1):.2f}%, loss weights [{weights}], q̃ {m['q_tilde']:.3g}"

    def final_metrics(self) -> dict:
        out = _percent(self._test(self.learner.adapter))
        out.update({f"{n}/loss_weight": float(w) for n, w in zip(self.names, self.learner.weights().tolist())})
        return out

    def baselines(self) -> dict:
        from morl.metrics import delta_m

        adapter = self._build(forum=False)
        self.gen.manual_seed(self.cfg.seed + 11)  # the same training batches as FORUM's lower level
        for _ in range(self.cfg.iterations):
            adapter.step(self._batch("train"))
        base = _percent(self._test(adapter))
        directions = {k: v for k, v in adapter.metric_directions().items() if not k.endswith("/loss")}
        # Δm% of FORUM against equal weights over the test metrics (negative = FORUM better).
        return {"equal_weights": base, "comparison": {"delta_m_forum_vs_equal": float(delta_m(self.final_metrics(), base, directions))}}

    def state_dict(self) -> dict:
        return self.learner.state_dict()


def _percent(metrics: dict) -> dict:
    return {k: (100.0 * v if k.endswith("/accuracy") else v) for k, v in metrics.items()}


def _log_forum(log, diag, names, k: int) -> dict:
    """The FORUM diagnostics every run logs."""
    out = {
        "upper": log.per_task("forum/upper_loss", diag["upper"], names, k),
        "lam_tilde": log.per_task("forum/lambda_tilde", diag["lam_tilde"], names, k, mean=False),
        "lam": log.per_task("forum/lambda", diag["lam"], names, k, mean=False),
    }
    for key in ("lower", "q_tilde", "constraint_grad_norm", "nu", "barrier", "kkt", "beta"):
        out[key] = log.scalar(f"forum/{key}", diag[key], k)
    return out


def _test_summary(test: dict, names: list[str]) -> dict:
    out = {}
    for metric in ("accuracy", "f1"):
        values = test[metric].tolist()
        out.update({f"{n}/{metric}": float(v) for n, v in zip(names, values)})
        out[f"mean/{metric}"] = float(sum(values) / len(values))
    return out
