"""The console log of every trl_dpr trainer (`ConsoleLogMixin`): metrics printed as numbers, not strings of them."""

from __future__ import annotations

import warnings

from transformers.trainer_callback import PrinterCallback, ProgressCallback


def _rounded(logs: dict) -> dict:
    """`logs` with each float kept to 4 significant digits, as a number (transformers prints `f"{v:.4g}"`, a string)."""
    return {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in logs.items() if k != "total_flos"}


class NumericProgressCallback(ProgressCallback):
    """transformers' progress bar, whose log lines print numbers (`'loss': 1.667e-09`), not strings of them."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None:
            self.training_bar.write(str(_rounded(logs)))


class NumericPrinterCallback(PrinterCallback):
    """transformers' log printer (used with `disable_tqdm`), printing numbers, not strings of them."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_local_process_zero and logs is not None:
            print(_rounded(logs))


# transformers 5.23 renamed the model's `*gradient_checkpointing*` methods; TRL 1.16 calls the old names around every
# generation (`unwrap_model_for_generation`, `disable_gradient_checkpointing`): one FutureWarning per call that the
# user cannot act on. Only these, only while our trainers train.
_TRL_INTERNAL_DEPRECATIONS = r"`(is_gradient_checkpointing|gradient_checkpointing_(enable|disable))` is deprecated"


class ConsoleLogMixin:
    """Mix into a `transformers.Trainer`: the console log prints numbers, and TRL's calls of renamed model methods do
    not warn at every generation.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for callback in list(self.callback_handler.callbacks):
            if type(callback) in (ProgressCallback, PrinterCallback):  # transformers' defaults, not a user's subclass
                self.remove_callback(callback)
                self.add_callback(
                    NumericPrinterCallback if type(callback) is PrinterCallback else NumericProgressCallback
                )

    def train(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TRL_INTERNAL_DEPRECATIONS, category=FutureWarning)
            return super().train(*args, **kwargs)
