"""The paper's optimisation (section 5.3-5.4): Adam, the warmup schedule, label-smoothed loss."""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F


def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), for step >= 1.

    Rises linearly for the first warmup_steps steps, then decays as 1/sqrt(step).
    """
    step = max(1, step)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def build_optimizer(model: torch.nn.Module, d_model: int, warmup_steps: int, lr_factor: float,
                    betas: Tuple[float, float] = (0.9, 0.98), eps: float = 1e-9
                    ) -> Tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam with base lr 1 and a LambdaLR giving noam_lr(n) to the n-th optimizer step (n from 1).

    LambdaLR calls the lambda with the number of scheduler.step() calls so far (0 before the
    first update), hence the +1.
    """
    params = list({id(p): p for p in model.parameters()}.values())   # tied weights once
    optimizer = torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: noam_lr(done + 1, d_model, warmup_steps, lr_factor))
    return optimizer, scheduler


def label_smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, pad_id: int,
                        smoothing: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """logits [B, T, V], labels [B, T] -> (smoothed loss, nll loss), both summed over non-pad tokens.

    The smoothed target puts 1 - smoothing on the label and spreads `smoothing` uniformly over the
    vocabulary (as torch's cross_entropy(label_smoothing=...)); pad positions count for nothing:
        loss = sum_t [(1 - smoothing) * -log p(y_t) + smoothing * mean_v -log p(v)]
    One log-softmax gives both figures (the nll is a by-product, without gradient).
    """
    logp = F.log_softmax(logits.float(), dim=-1)                      # [B, T, V]
    keep = labels != pad_id                                           # [B, T]
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)   # [B, T]
    loss = ((1.0 - smoothing) * nll - smoothing * logp.mean(dim=-1))[keep].sum()
    return loss, nll.detach()[keep].sum()
