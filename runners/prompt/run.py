"""``morl prompt CONFIG [key=value ...]`` / ``morl prompt --resume RUN_DIR``: a mixture of soft
prompts trained with MosT (or baselines).

Top to bottom: load and validate everything -> tokenise the splits once -> per step sample
``n`` training instances (the objectives), one batched forward of all ``m`` prompts, weights
by MosT / MGDA / linearisation, one backward, Adam step -> evaluate and checkpoint -> at the
end fit the dispatcher on the training assignment and report routed test accuracy.

``--resume`` continues from ``checkpoints/last.pt``: prompts, heads, Adam state, MosT's plan and
curriculum, the step counter, the batch/linearisation generator and torch's RNG; the run then
ends bit for bit where the uninterrupted one does.
"""

from __future__ import annotations

import dataclasses
import json
import time

from morl.runners.errors import UserError

FINAL_METRICS = "final_metrics.json"
# Settings a resumed run may change: none of them alters what the learner computes.
RESUME_KEYS = ("steps", "eval_every", "checkpoint_every", "threads")


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="YAML config (e.g. configs/prompt_most.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. steps=20 encoder=tiny method=mgda")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help=f"continue RUN_DIR from its last checkpoint (overrides may only change {', '.join(RESUME_KEYS)})")


def load(args):
    """Config (new, or the run's own on ``--resume``), run dir or None, data, encoder: every
    check before anything is written."""
    from morl.agents.prompts.encoder import load_encoder
    from morl.envs.data.text import load_text_data
    from morl.runners.prompt.config import PromptConfig
    from morl.runners.run_dir import config_or_resume

    cfg, run_dir = config_or_resume(PromptConfig, args, RESUME_KEYS, "prompt")
    if cfg.threads < 0:
        raise UserError(f"threads must be >= 0 (0 = torch's default), got {cfg.threads}")
    for key in ("steps", "batch_size", "inner_steps", "eval_every", "checkpoint_every", "max_length"):
        if getattr(cfg, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(cfg, key)}")
    if cfg.prompts.num < 1 or cfg.prompts.length < 1:
        raise UserError(f"prompts.num and prompts.length must be >= 1, got {cfg.prompts.num}, {cfg.prompts.length}")
    if cfg.optim.lr <= 0:
        raise UserError(f"optim.lr must be > 0, got {cfg.optim.lr}")
    if cfg.most.tau < 0 or not 0 < cfg.most.curriculum_decay <= 1:
        raise UserError(f"most.tau must be >= 0 and most.curriculum_decay in (0, 1], got {cfg.most.tau}, {cfg.most.curriculum_decay}")
    try:
        data = load_text_data(cfg.data.name, **({"seed": cfg.seed} | cfg.data.options))
    except (ValueError, TypeError) as exc:
        raise UserError(f"data: {exc}") from None
    if cfg.batch_size > len(data.texts["train"]):
        raise UserError(f"batch_size={cfg.batch_size} exceeds the {len(data.texts['train'])} training instances")
    try:
        encoder, tokenizer = load_encoder(cfg.encoder, seed=cfg.seed)
    except ValueError as exc:
        raise UserError(f"encoder: {exc}") from None
    if cfg.encoder_layers is not None:
        layers = getattr(getattr(encoder, "encoder", None), "layer", None)
        if layers is None or not 1 <= cfg.encoder_layers <= len(layers):
            raise UserError(f"encoder_layers must be in 1..{len(layers) if layers is not None else '?'} for this encoder "
                            f"(BERT-style encoders only), got {cfg.encoder_layers}")
        del layers[cfg.encoder_layers:]
    return cfg, run_dir, data, encoder, tokenizer


def evaluate(mixture, ids, mask, labels, chunk: int = 128):
    """Losses ``[m, N]`` and correctness ``[m, N]`` of every prompt on a split (no grad)."""
    import torch

    from morl.agents.prompts.soft_prompts import per_instance_losses

    losses, correct = [], []
    with torch.no_grad():
        for s in range(0, ids.shape[0], chunk):
            logits, _ = mixture(ids[s:s + chunk], mask[s:s + chunk])
            y = labels[s:s + chunk]
            losses.append(per_instance_losses(logits, y))
            correct.append(logits.argmax(-1) == y)
    return torch.cat(losses, 1), torch.cat(correct, 1)


def split_metrics(correct) -> dict:
    """Per-prompt accuracy, the best single prompt, and the oracle (best prompt per instance)."""
    acc = correct.float().mean(1)
    return {"prompt_acc": acc.tolist(), "best_single_acc": float(acc.max()), "oracle_acc": float(correct.any(0).float().mean())}


def build(cfg, data, encoder, device):
    import torch

    from morl.agents.prompts.soft_prompts import PromptMixture
    from morl.agents.prompts.trainer import MixtureTrainer
    from morl.most import CurriculumSchedule, MosT

    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    encoder.to(device)
    mixture = PromptMixture(encoder, cfg.prompts.num, cfg.prompts.length, data.num_classes, gen, cfg.prompts.shared_head)
    opt = torch.optim.Adam(mixture.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    most = None
    if cfg.method == "most":
        curriculum = None if cfg.most.curriculum == "none" else CurriculumSchedule(cfg.most.curriculum, decay=cfg.most.curriculum_decay)
        try:
            # Each step sees different instances, so the previous plan is no warm start.
            most = MosT(cfg.prompts.num, tau=cfg.most.tau, solver=cfg.most.solver, gamma_scale=cfg.most.gamma_scale,
                        update=cfg.most.update, curriculum=curriculum, warm_start=False)
        except ValueError as exc:
            raise UserError(f"most: {exc}") from None
    return mixture, MixtureTrainer(mixture, cfg.method, opt, most, cfg.inner_steps, gen), gen


def fit_dispatcher(cfg, mixture, encoder, split_ids, train_losses, device):
    """Train the dispatcher on the training assignment; returns it and the targets."""
    import torch

    from morl.agents.prompts.dispatcher import Dispatcher, assignment_targets
    from morl.agents.prompts.soft_prompts import instance_embeddings

    torch.manual_seed(cfg.seed)
    emb = {s: instance_embeddings(encoder, *split_ids[s]) for s in split_ids}
    keys = mixture.prompt_embeddings()
    targets = assignment_targets(train_losses, cfg.dispatcher.target)
    disp = Dispatcher(keys.shape[1], cfg.dispatcher.hidden, keys.shape[0]).to(device)
    disp.fit(emb["train"], keys, targets, cfg.dispatcher.steps, cfg.dispatcher.lr)
    return disp, emb, keys, targets


def restore(cfg, run_dir, trainer, device) -> int | None:
    """Load ``run_dir``'s checkpoint into ``trainer`` and torch's RNG; returns its step, or None
    when the run has already finished at ``cfg.steps`` (nothing to do)."""
    import torch

    from morl.runners.checkpoint import torch_load
    from morl.runners.run_dir import last_checkpoint

    state = torch_load(last_checkpoint(run_dir), map_location=device)
    done = int(state["step"])
    if done > cfg.steps:
        raise UserError(f"steps={cfg.steps} is below the checkpoint's step {done}; give steps >= {done}")
    if done == cfg.steps and (run_dir / FINAL_METRICS).is_file():
        return None
    trainer.load_state_dict(state)
    torch.set_rng_state(state["torch_rng"].cpu())
    return done


def main(args) -> int:
    import torch

    from morl.runners.checkpoint import atomic_torch_save, atomic_write_text
    from morl.runners.config import save_config, to_dict
    from morl.runners.device import resolve_device
    from morl.runners.run_dir import CHECKPOINT_DIR, CONFIG_FILE, LAST_CHECKPOINT, drop_records_after, new_run_dir
    from morl.runners.tensorboard import RunLogger, flatten_config

    if not hasattr(args, "resume"):
        args.resume = None
    cfg, run_dir, data, encoder, tokenizer = load(args)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    from morl.agents.prompts.encoder import tokenize

    split_ids = {s: tuple(t.to(device) for t in tokenize(tokenizer, data.texts[s], cfg.max_length)) for s in data.texts}
    labels = {s: torch.tensor(data.labels[s], device=device) for s in data.labels}
    mixture, trainer, gen = build(cfg, data, encoder, device)
    start = 0
    if run_dir is not None:
        start = restore(cfg, run_dir, trainer, device)
        if start is None:
            print(f"morl prompt: {run_dir} already finished at step {cfg.steps}; give steps=N (N > {cfg.steps}) to train longer")
            return 0
        save_config(cfg, run_dir / CONFIG_FILE)
        drop_records_after(run_dir / "metrics.jsonl", start)
        print(f"resuming {run_dir} at step {start}", flush=True)
    else:
        run_dir = new_run_dir(cfg.out_dir, cfg.name)
        save_config(cfg, run_dir / CONFIG_FILE)
    logger = RunLogger(run_dir, purge_step=start + 1 if start else None)
    if not start:
        logger.hparams(flatten_config(to_dict(cfg)))
    names = [f"prompt{j}" for j in range(cfg.prompts.num)]
    n_train = labels["train"].shape[0]
    print(f"morl prompt: method={cfg.method}, encoder={cfg.encoder}, m={cfg.prompts.num} prompts x {cfg.prompts.length} tokens, "
          f"n={cfg.batch_size} instances/step, {cfg.steps} steps, run dir {run_dir}", flush=True)

    def checkpoint(step: int, torch_rng, **extra) -> None:
        state = {**trainer.state_dict(), "step": step, "torch_rng": torch_rng, "config": dataclasses.asdict(cfg), **extra}
        atomic_torch_save(state, run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)

    t0 = time.time()
    try:
        for step in range(start + 1, cfg.steps + 1):
            idx = torch.randperm(n_train, generator=gen)[:cfg.batch_size].to(device)
            ids, mask = (t[idx] for t in split_ids["train"])
            try:
                out = trainer.step(ids, mask, labels["train"][idx])
            except FloatingPointError as exc:
                raise UserError(f"step {step}: {exc}") from None
            logger.per_task("train/loss", out["losses"].mean(1), names, step)
            if out["gamma"] is not None:
                share = out["gamma"].sum(0) / out["gamma"].sum()
                logger.per_task("train/gamma_share", share, names, step, mean=False)
            if step % cfg.eval_every == 0 or step == cfg.steps:
                _, correct = evaluate(mixture, *split_ids["val"], labels["val"])
                val = split_metrics(correct)
                logger.per_task("val/prompt_acc", torch.tensor(val["prompt_acc"]), names, step)
                logger.scalar("val/oracle_acc", val["oracle_acc"], step)
                logger.record(step, train_loss=out["losses"].mean(1), val=val)
                print(f"step {step:4d}/{cfg.steps}  train loss {float(out['losses'].mean()):.4f}  val acc per prompt "
                      + " ".join(f"{a:.3f}" for a in val["prompt_acc"]) + f"  oracle {val['oracle_acc']:.3f}  ({time.time() - t0:.1f}s)", flush=True)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint(step, torch.get_rng_state())
                logger.flush()
        # The RNG as training left it (fitting the dispatcher reseeds torch), so that a finished
        # run resumed with more steps continues exactly as a longer run would.
        torch_rng = torch.get_rng_state()
        final = finish(cfg, data, mixture, encoder, split_ids, labels, device)
        final["seconds"] = time.time() - t0
        checkpoint(cfg.steps, torch_rng, dispatcher=final.pop("_dispatcher"))
        for key in ("routed_acc", "oracle_acc", "best_single_acc"):
            logger.scalar(f"test/{key}", final["test"][key], cfg.steps)
        atomic_write_text(run_dir / FINAL_METRICS, json.dumps(final, indent=2))
        t = final["test"]
        print(f"test: routed acc {t['routed_acc']:.4f}  best single prompt {t['best_single_acc']:.4f}  "
              f"oracle {t['oracle_acc']:.4f}  route shares {' '.join(f'{s:.2f}' for s in t['route_share'])}", flush=True)
    finally:
        logger.close()
    return 0


def finish(cfg, data, mixture, encoder, split_ids, labels, device) -> dict:
    """Fit the dispatcher on the training assignment; routed accuracy on val and test."""
    import torch

    train_losses, train_correct = evaluate(mixture, *split_ids["train"], labels["train"])
    disp, emb, keys, targets = fit_dispatcher(cfg, mixture, encoder, split_ids, train_losses, device)
    final = {"method": cfg.method, "steps": cfg.steps, "train": split_metrics(train_correct)}
    final["train"]["assignment_share"] = (targets.sum(0) / targets.shape[0]).tolist()
    final["train"]["dispatcher_agreement"] = float((disp.route(emb["train"], keys) == targets.argmax(1)).float().mean())
    for split in ("val", "test"):
        _, correct = evaluate(mixture, *split_ids[split], labels[split])
        m = split_metrics(correct)
        route = disp.route(emb[split], keys)
        m["routed_acc"] = float(correct.gather(0, route.unsqueeze(0)).float().mean())
        m["route_share"] = torch.bincount(route, minlength=correct.shape[0]).div(route.numel()).tolist()
        if data.domains.get(split) is not None:
            dom = torch.tensor(data.domains[split], device=route.device)
            counts = torch.zeros(correct.shape[0], len(data.domain_names), device=route.device)
            counts.index_put_((route, dom), torch.ones_like(route, dtype=counts.dtype), accumulate=True)
            m["route_by_domain"] = {name: counts[:, d].tolist() for d, name in enumerate(data.domain_names)}
        final[split] = m
    final["_dispatcher"] = disp.state_dict()
    return final
