"""Config of ``morl prompt``: one dataclass tree, loaded by ``morl.runners.config.load_config``, and
the checks its types cannot make (those that need the data or the encoder are made while building,
``runners/prompt/build.py``; both before anything is written)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class TextDataConfig:
    name: Literal["domain_flip", "file"] = "domain_flip"
    options: dict[str, Any] = field(default_factory=dict)  # morl.envs.data.text.load_text_data options


@dataclass
class PromptsConfig:
    num: int = 3  # m soft prompts (solutions)
    length: int = 4  # k virtual tokens per prompt
    shared_head: bool = False  # one classification head for all prompts (else one head per prompt)


@dataclass
class MosTOptions:
    tau: float = 0.0  # diversity regulariser weight
    solver: Literal["ipot", "sinkhorn"] = "ipot"
    gamma_scale: Literal["paper", "code"] = "paper"
    update: Literal["paper", "code"] = "paper"
    curriculum: Literal["none", "paper", "code"] = "none"
    curriculum_decay: float = 0.99  # per step


@dataclass
class DispatcherConfig:
    target: Literal["ot", "argmin"] = "ot"
    hidden: int = 64
    steps: int = 300
    lr: float = 0.01


@dataclass
class PromptOptimConfig:
    lr: float = 0.01  # Adam
    weight_decay: float = 0.0


@dataclass
class PromptConfig:
    name: str = "prompt"
    seed: int = 0
    device: str = "cpu"
    threads: int = 0  # torch CPU threads; 0 = torch's default (1 is much faster on an oversubscribed CPU)
    method: Literal["most", "mgda", "linear"] = "most"
    encoder: str = "minilm"  # "minilm" (packaged all-MiniLM-L6-v2), "tiny" (random, tests), or a local HF folder
    encoder_layers: int | None = None  # keep only the first N transformer layers (speed); null = all
    max_length: int = 32  # tokens per instance
    steps: int = 100  # outer MosT steps
    batch_size: int = 32  # n: training instances (objectives) per step
    inner_steps: int = 1  # K updates per plan Γ
    data: TextDataConfig = field(default_factory=TextDataConfig)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    most: MosTOptions = field(default_factory=MosTOptions)
    dispatcher: DispatcherConfig = field(default_factory=DispatcherConfig)
    optim: PromptOptimConfig = field(default_factory=PromptOptimConfig)
    log_every: int = 1  # steps between train records (loss and Γ share per prompt, averaged over the steps)
    eval_every: int = 25  # steps
    checkpoint_every: int = 50  # steps (the last step is always checkpointed)
    checkpoint_minutes: float | None = (
        None  # also checkpoint after this much wall-clock time (null: by step count only)
    )
    out_dir: str = "runs"


def validate(cfg: PromptConfig) -> None:
    """One UserError line for the first bad value."""
    from morl.runners.config import require
    from morl.runners.device import resolve_device

    require(
        cfg,
        {
            "threads": ">=0",
            "steps": ">=1",
            "batch_size": ">=1",
            "inner_steps": ">=1",
            "log_every": ">=1",
            "eval_every": ">=1",
            "checkpoint_every": ">=1",
            "max_length": ">=1",
            "checkpoint_minutes": ">0?",
            "prompts.num": ">=1",
            "prompts.length": ">=1",
            "optim.lr": ">0",
            "most.tau": ">=0",
            "most.curriculum_decay": "(0,1]",
        },
    )
    resolve_device(cfg.device)
