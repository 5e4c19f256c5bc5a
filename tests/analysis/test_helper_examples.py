"""What trl_dpr.analysis's internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.analysis.heatmaps:heatmap_html": r"""
    >>> page = heatmap_html([{"tokens": ["4", "<|end|>"], "token_ids": [7, 1], "rewards": [0.5, -0.25], "total": 0.25}])
    >>> 'data-reward="0.5"' in page, "&lt;|end|&gt;" in page
    (True, True)
""",
    "trl_dpr.analysis.heatmaps:reward_colour": r"""
    >>> reward_colour(-1.0, -1.0, 1.0), reward_colour(1.0, -1.0, 1.0), reward_colour(5.0, -1.0, 1.0)
    ('#fff5f0', '#67000d', '#67000d')
""",
    "trl_dpr.analysis.heatmaps:save_heatmap_png": r"""
    >>> import tempfile, os
    >>> scored = [{"tokens": ["4", " apples"], "rewards": [0.5, -0.25], "total": 0.25}]
    >>> save_heatmap_png(scored, os.path.join(tempfile.mkdtemp(), "h.png")).stat().st_size > 1000
    True
""",
    "trl_dpr.analysis.preview_report:helps_verdict": r"""
    >>> helps_verdict(True), helps_verdict(False), helps_verdict(None)
    ('yes', 'no', 'cannot tell')
""",
    "trl_dpr.analysis.preview_report:PolicyPoint": r"""
    >>> PolicyPoint("DPR", "runs/dpr", 0.5, 0.4, 0.6, 0.05, 0.01, 0.09, 0.3, 0.2, 0.4).delta
    0.05
""",
    "trl_dpr.analysis.preview:PreviewConfig": r"""
    >>> config = PreviewConfig(quality="exact", samples_per_prompt=8)
    >>> list(config.variants), config.kl_coefs[0]
    (['DPR', 'wo/Baseline'], inf)
""",
    "trl_dpr.analysis.preview_report:PreviewPoint": r"""
    >>> point = preview_points({"R": torch.tensor([[0.0, 1.0]])}, torch.tensor([[0.0, 1.0]]), [])[0]
    >>> point.lam, point.quality, point.kl
    (inf, 0.5, 0.0)
""",
    "trl_dpr.analysis.preview_report:PreviewReport": r"""
    >>> points = preview_points({"R": torch.tensor([[0.0, 2.0]] * 4)}, torch.tensor([[0.0, 1.0]] * 4), [1.0], min_ess=1.0)
    >>> report = PreviewReport("exact", 4, 2, points, sft_quality=0.5, pass_at_n=1.0)
    >>> report.best("R").lam, round(report.best("R").quality, 3)
    (0.0, 1.0)
""",
    "trl_dpr.analysis.tilt:TiltedQuality": r"""
    >>> tilted_quality(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]), [math.inf]).mean_quality
    tensor([0.5000], dtype=torch.float64)
""",
    "trl_dpr.analysis.preview_report:preview_points": r"""
    >>> import math, torch
    >>> points = preview_points({"R": torch.tensor([[0.0, 1.0]] * 3)}, torch.tensor([[0.0, 1.0]] * 3), [1.0])
    >>> [(p.lam, round(p.quality, 3), round(p.kl, 3)) for p in points]
    [(inf, 0.5, 0.0), (1.0, 0.731, 0.111), (0.0, 1.0, 0.693)]
""",
    "trl_dpr.analysis.tilt:tilt_weights": r"""
    >>> import math, torch
    >>> tilt_weights(torch.tensor([[0.0, math.log(3.0)]]), 1.0)
    tensor([[0.2500, 0.7500]], dtype=torch.float64)
    >>> tilt_weights(torch.tensor([[1.0, 2.0, 2.0]]), 0.0)
    tensor([[0.0000, 0.5000, 0.5000]], dtype=torch.float64)
""",
    "trl_dpr.analysis.tilt:tilted_quality": r"""
    >>> import math, torch
    >>> out = tilted_quality(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 1.0]]), [math.inf, 1.0, 0.0])
    >>> [round(v, 4) for v in out.mean_quality.tolist()]
    [0.5, 0.75, 1.0]
    >>> [round(v, 4) for v in out.ess.squeeze(1).tolist()]  # 1 / (0.25² + 0.75²) = 1.6
    [2.0, 1.6, 1.0]
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
