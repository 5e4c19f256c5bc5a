"""Token-reward heatmaps: every token with its reward in the HTML (escaped), a real PNG, and the command line."""

import json
from html.parser import HTMLParser

import pytest

from trl_dpr import CheckpointRewardModel
from trl_dpr.analysis.heatmaps import heatmap_html, reward_colour, save_heatmap_png
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.scripts.heatmap import main

from ..conftest import save_sft_output

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class TokenSpans(HTMLParser):
    """Collects the token spans of a heatmap page: (text, data-reward, title, style)."""

    def __init__(self):
        super().__init__()
        self.spans, self._current = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and attrs.get("class") == "tok":
            self._current = {"text": "", **attrs}

    def handle_data(self, data):
        if self._current is not None:
            self._current["text"] += data

    def handle_endtag(self, tag):
        if tag == "span" and self._current is not None:
            self.spans.append(self._current)
            self._current = None


def luminance(hex_colour):
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b


@pytest.fixture
def scored(tokenizer):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1), processing_class=tokenizer
    )
    prompts = [[{"role": "user", "content": "What is 12+7?"}], "Reverse the word cat:"]
    responses = ["12+7=19. <b>The answer</b> is 19 & done.", "tac\n\"quoted\" 'text'"]
    return prompts, reward_model.score_text(prompts, responses)


def test_the_html_holds_every_token_with_its_reward_escaped(scored):
    prompts, scored = scored
    page = heatmap_html(scored, prompts)
    parser = TokenSpans()
    parser.feed(page)
    tokens = [t for item in scored for t in item["tokens"]]
    rewards = [r for item in scored for r in item["rewards"]]
    assert [s["text"] for s in parser.spans] == tokens  # every token, in order, unescaped back to itself
    assert [float(s["data-reward"]) for s in parser.spans] == rewards  # exact floats
    for span, token, reward in zip(parser.spans, tokens, rewards):
        assert repr(token) in span["title"] and f"{reward:+.4f}" in span["title"]
    assert "<b>" not in page and "</b>" not in page  # the response's markup is shown, never interpreted
    assert ">&lt;</span>" in page and ">&lt;|end|&gt;</span>" in page and ">&amp;</span>" in page
    assert "white-space: pre-wrap" in page and "linear-gradient" in page  # wraps like text; a colour bar


def test_darker_red_means_higher_reward(scored):
    _, scored = scored
    parser = TokenSpans()
    parser.feed(heatmap_html(scored))
    rewards = [float(s["data-reward"]) for s in parser.spans]
    backgrounds = [s["style"].split("background-color:")[1].split(";")[0] for s in parser.spans]
    ranked = sorted(zip(rewards, backgrounds))
    assert luminance(ranked[0][1]) > luminance(ranked[-1][1])
    assert (
        luminance(reward_colour(0.9, 0, 1)) < luminance(reward_colour(0.5, 0, 1)) < luminance(reward_colour(0.1, 0, 1))
    )


def test_the_png_is_a_real_image(scored, tmp_path):
    prompts, scored = scored
    path = save_heatmap_png(scored, tmp_path / "figure" / "rewards.png", prompts)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 500
    assert image[..., 0].std() > 0.05  # not a blank canvas


def test_the_command_line_scores_pairs_from_an_sft_output(tmp_path, tokenizer):
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"prompt": "What is 12+7?", "response": "12+7=19."})
        + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": "Sort 3 1 2"}], "response": "1 2 3"})
        + "\n"
    )
    written = main(["--sft", str(sft), "--pairs", str(pairs), "--output", str(tmp_path / "out" / "rewards")])
    assert [p.name for p in written] == ["rewards.html", "rewards.png"]
    parser = TokenSpans()
    parser.feed(written[0].read_text())
    reference = CheckpointRewardModel.from_pretrained(str(sft)).score_text(  # no SFT record: a string is raw text
        ["What is 12+7?", [{"role": "user", "content": "Sort 3 1 2"}]],
        ["12+7=19.", "1 2 3"],
    )
    assert [float(s["data-reward"]) for s in parser.spans] == pytest.approx(
        [r for item in reference for r in item["rewards"]]
    )
    assert written[1].read_bytes().startswith(PNG_SIGNATURE)

    html_only = main(
        [
            "--sft",
            str(sft),
            "--prompt",
            "hi",
            "--response",
            "hello",
            "--formats",
            "html",
            "--output",
            str(tmp_path / "single"),
        ]
    )
    assert [p.name for p in html_only] == ["single.html"]
    with pytest.raises(SystemExit):
        main(["--sft", str(sft), "--prompt", "hi"])  # a prompt without its response
