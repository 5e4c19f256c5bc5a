"""Rewards a user writes in their own file (imported by name from recipes: `dense_reward: my_rewards:ClippedReward`)."""

import torch


class ThirdCheckpointReward:
    """r̂_t = log π_teacher(a_t|s_t) − log π_ref(a_t|s_t): a reward read off a third checkpoint."""

    model_names = ("teacher", "ref")

    def __call__(self, scored):
        return (scored.logps["teacher"] - scored.logps["ref"]) * scored.completion_mask


class TeacherBonusReward:
    """r̂_t = (log π_SFT − log π_ref) + ½ (log π_teacher − log π_SFT): DPR's reward moved halfway to a third
    checkpoint's; it reads three frozen models."""

    model_names = ("sft", "ref", "teacher")

    def __call__(self, scored):
        sft, ref, teacher = (scored.logps[name] for name in self.model_names)
        return (sft - ref + 0.5 * (teacher - sft)) * scored.completion_mask


class NotAReward:
    def __init__(self, scale: float = 1.0):
        self.scale = scale


def returns_wrong_shape():
    class Wrong:
        model_names = ("sft",)

        def __call__(self, scored):
            return torch.zeros(scored.completion_ids.size(0))

    return Wrong()
