"""Looking at the dense reward and at what DPR can do with it (none of this is needed to train).

sampling   responses sampled from a model with their exact token ids, scored by the dense reward
preview    what DPR can reach on your data, estimated from π_SFT's own samples before any RL (`trl-dpr preview`)
tilt       the preview's math: π_λ ∝ π_SFT·exp(R/λ) by importance weights (quality, KL, effective sample size)
preview_report   its points, intervals, report files and plot
heatmaps   token-reward heatmaps like the paper's Figure 1 (`trl-dpr heatmap`)
tracking   TokenHeatmapCallback: heatmaps of recent completions in wandb / trackio / tensorboard during DPR
"""
