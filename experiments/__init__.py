"""Research experiments on DPR: the paper's analysis plots, the reward diagnostics, the settings sweep and the
regime scan. Not part of the `trl_dpr` wheel; run from the repository root as `python -m experiments.<script>`
(see experiments/README.md).
"""
