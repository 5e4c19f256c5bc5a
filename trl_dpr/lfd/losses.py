r"""The SPIN and GSIL losses, as pure tensor functions of sequence log-probabilities.

    demonstration y ~ π_data ─┐                                  ┌─► SPIN: ℓ(β·[log-ratio(y) − log-ratio(y')])
                              ├─► log π_θ, log π_t (summed) ─► log-ratios
    own answer  y' ~ π_t ─────┘                                  └─► GSIL: ℓ₁(f(y)) + ℓ₋₁(f(y')),  f = β·log-ratio + b

π_θ is trained, π_t wrote y' (the frozen reference). Inputs are `[B]` log-probs summed per completion (`real` = DPO's
"chosen", `generated` = "rejected"); outputs `[B]` per-example losses. Sources: SPIN, arXiv:2401.01335 (and
uclaml/SPIN's hinge); GSIL, arXiv:2410.10093 (the five loss pairs and the shift b of tengxiao1/GSIL).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SPIN_LOSSES = ("sigmoid", "hinge")
GSIL_LOSSES = ("bernoulli", "brier", "hinge", "kliep", "lsif")


def _check_same_shape(*tensors: torch.Tensor) -> None:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(
            f"The four log-probability tensors must have one shape ([B], one value per example); got shapes "
            f"{sorted(shapes)}. Pass sequence log-probabilities summed over each completion's tokens."
        )


def spin_loss(
    policy_real_logps: torch.Tensor,
    policy_generated_logps: torch.Tensor,
    ref_real_logps: torch.Tensor,
    ref_generated_logps: torch.Tensor,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
) -> torch.Tensor:
    r"""SPIN's per-pair loss: ℓ(β·Δ) with Δ = [log π_θ(y|x) − log π_t(y|x)] − [log π_θ(y'|x) − log π_t(y'|x)].

    `"sigmoid"` (the paper's): ℓ(t) = −log σ(t); `"hinge"` (the authors' code): ℓ(t) = max(0, 1 − t). β is SPIN's λ.
    This is DPO's loss with π_t as the reference: SPIN is DPO against the previous iterate, repeated.

    Example:
        Δ = (−1 − (−2)) − (−3 − (−2)) = 2; with β = 0.5, t = 1 and log(1 + e^{−1}) = 0.3133, max(0, 1 − 1) = 0:

        >>> import torch
        >>> args = (torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]))
        >>> round(spin_loss(*args, beta=0.5).item(), 4), spin_loss(*args, beta=0.5, loss_type="hinge").item()
        (0.3133, 0.0)
    """
    if loss_type not in SPIN_LOSSES:
        raise ValueError(
            f"SPIN loss_type must be one of {SPIN_LOSSES} (the paper's logistic loss is 'sigmoid'), got {loss_type!r}."
        )
    _check_same_shape(policy_real_logps, policy_generated_logps, ref_real_logps, ref_generated_logps)
    # Δ: how much more the update raised the demonstration than the model's own answer, both relative to π_t.
    delta = (policy_real_logps - ref_real_logps) - (policy_generated_logps - ref_generated_logps)
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * delta)  # log(1 + e^{−βΔ}), computed without overflow
    return torch.relu(1.0 - beta * delta)


def gsil_discriminator(
    policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float = 0.1, shift: float = 0.0
) -> torch.Tensor:
    r"""GSIL's implicit classifier logit f_θ(x, y) = β·(log π_θ(y|x) − log π_t(y|x)) + b.

    f estimates log π_data(y|x)/π_t(y|x); the paper has b = 0, the authors' code an optional shift b.

    Example:
        >>> import torch
        >>> gsil_discriminator(torch.tensor([-1.0, -4.0]), torch.tensor([-2.0, -2.0]), beta=0.5, shift=0.25)
        tensor([ 0.7500, -0.7500])
    """
    return beta * (policy_logps - ref_logps) + shift


def gsil_loss(
    policy_real_logps: torch.Tensor,
    policy_generated_logps: torch.Tensor,
    ref_real_logps: torch.Tensor,
    ref_generated_logps: torch.Tensor,
    beta: float = 0.1,
    loss_type: str = "bernoulli",
    shift: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""GSIL's per-example loss ℓ₁(f(y)) + ℓ₋₁(f(y')), with f = `gsil_discriminator` on the demonstration y and on the
    model's own answer y'. The loss pairs (σ the logistic function):

    ============  =====================  =====================  ==============================================
    `loss_type`   ℓ₁(f), demonstration   ℓ₋₁(f), own answer     density-ratio objective
    ============  =====================  =====================  ==============================================
    `bernoulli`   −log σ(f)              −log σ(−f)             logistic regression (Bernoulli likelihood)
    `brier`       (1 − σ(f))²            σ(f)²                  Brier score (squared error of σ(f))
    `hinge`       max(0, 1 − f)          max(0, 1 + f)          hinge loss
    `kliep`       −f                     e^f                    KL importance estimation (r = e^f)
    `lsif`        −e^f                   ½ e^{2f}               least-squares importance fitting (r = e^f)
    ============  =====================  =====================  ==============================================

    Unlike SPIN's, the terms are separate, not a difference; `kliep` and `lsif` overflow for a large β·log-ratio.
    Returns `(losses, real_losses, generated_losses)`, each `[B]`.

    Example:
        f(y) = 1·(−1 − (−2)) = 1 and f(y') = 1·(−3 − (−2)) = −1. Bernoulli: 2·log(1 + e^{−1}) = 0.6265; hinge:
        max(0, 0) + max(0, 0) = 0; KLIEP: −1 + e^{−1} = −0.6321:

        >>> import torch
        >>> args = (torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]))
        >>> [round(gsil_loss(*args, beta=1.0, loss_type=t)[0].item(), 4) for t in ("bernoulli", "hinge", "kliep")]
        [0.6265, 0.0, -0.6321]
    """
    if loss_type not in GSIL_LOSSES:
        raise ValueError(
            f"GSIL loss_type must be one of {GSIL_LOSSES} (the logistic loss is 'bernoulli'), got {loss_type!r}."
        )
    _check_same_shape(policy_real_logps, policy_generated_logps, ref_real_logps, ref_generated_logps)
    f_real = gsil_discriminator(policy_real_logps, ref_real_logps, beta, shift)
    f_generated = gsil_discriminator(policy_generated_logps, ref_generated_logps, beta, shift)
    if loss_type == "bernoulli":  # the demonstration is class +1, the own answer class −1
        real, generated = -F.logsigmoid(f_real), -F.logsigmoid(-f_generated)
    elif loss_type == "brier":
        real, generated = (1.0 - torch.sigmoid(f_real)) ** 2, torch.sigmoid(f_generated) ** 2
    elif loss_type == "hinge":
        real, generated = torch.relu(1.0 - f_real), torch.relu(1.0 + f_generated)
    elif loss_type == "kliep":  # ratio r = e^f: −log r on demonstrations, r on own answers
        real, generated = -f_real, torch.exp(f_generated)
    else:  # lsif: −r on demonstrations, ½ r² on own answers
        real, generated = -torch.exp(f_real), 0.5 * torch.exp(2.0 * f_generated)
    return real + generated, real, generated
