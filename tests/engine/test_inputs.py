"""What a generation is asked with, checked once at the engine's edge: text, sampling parameters, settings, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.engine import RANDOM_SEED, GenerationSettings, SamplingParams
from specchat.engine.sampling import probabilities
from specchat.engine.text import check_messages, check_text
from specchat.errors import InvalidInputError, SpecchatError


def test_text_that_is_not_unicode_is_refused_naming_where():
    check_text("héllo 🦩", "the prompt")
    # A browser can send a lone surrogate; Python makes one of each byte of a command line that is not UTF-8.
    for text, code in (("abc \ud800 def", "U+D800"), ("abc \udcff def", "U+DCFF")):
        with pytest.raises(InvalidInputError) as err:
            check_text(text, "the prompt")
        message = str(err.value)
        assert message.startswith("the prompt is not valid Unicode: character 5") and code in message
        assert "\n" not in message and isinstance(err.value, SpecchatError)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi \udc80"}]
    with pytest.raises(InvalidInputError, match="the content of message 2 is not valid Unicode"):
        check_messages(messages)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"temperature": float("nan")}, "temperature must be a finite number of at least 0, not nan"),
        ({"temperature": float("inf")}, "temperature must be a finite number of at least 0, not inf"),
        ({"temperature": -0.5}, "temperature must be a finite number of at least 0, not -0.5"),
        ({"top_p": -0.1}, r"top_p must be a finite number in \[0, 1\], not -0.1"),
        ({"top_p": 1.5}, r"top_p must be a finite number in \[0, 1\], not 1.5"),
        ({"top_p": float("nan")}, r"top_p must be a finite number in \[0, 1\], not nan"),
        ({"min_p": -0.1}, r"min_p must be a finite number in \[0, 1\], not -0.1"),
        ({"top_k": -1}, "top_k must be a whole number of at least 0, not -1"),
        ({"top_k": 2.5}, "top_k must be a whole number of at least 0, not 2.5"),
    ],
)
def test_sampling_parameters_out_of_range_name_the_parameter_and_its_range(values, message):
    with pytest.raises(InvalidInputError, match=f"^{message}$"):
        SamplingParams(**values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be a whole number of at least 1, not 0"),
        ({"mode": "lookup", "k": 0}, r"k \(the draft length of lookup mode\) must be a whole number in \[1, 31\]"),
        ({"mode": "lookup", "k": 32}, r"k \(the draft length of lookup mode\) must be a whole number in \[1, 31\]"),
        ({"mode": "speculative", "k": -2}, r"k \(the draft length of speculative mode\) must be a whole number"),
        ({"seed": -2}, r"seed must be -1 \(random\) or a whole number of at least 0, not -2"),
        ({"seed": 1.5}, r"seed must be -1 \(random\) or a whole number of at least 0, not 1.5"),
    ],
)
def test_settings_out_of_range_name_the_setting_and_its_range(values, message):
    with pytest.raises(InvalidInputError, match=message):
        GenerationSettings(**values)


def test_auto_and_plain_take_no_draft_length():
    for mode in ("auto", "plain"):
        assert GenerationSettings(mode=mode, k=0).k == 0


def test_seed_minus_one_is_random_and_any_other_seed_repeats():
    def draws(seed: int | None) -> set[int]:
        return {int(GenerationSettings(seed=seed).rng().integers(2**62)) for _ in range(4)}

    assert len(draws(RANDOM_SEED)) == len(draws(None)) == 4
    for seed in (0, 7, 2**70):  # numpy takes any whole number from 0 up
        assert len(draws(seed)) == 1


def test_any_temperature_above_zero_gives_probabilities():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(1000) * 8).astype(np.float32)
    top = int(np.argmax(logits))
    # Tiny temperatures used to overflow logits / T to inf, and inf - inf is nan; 1e-300 rounds to 0 in float32.
    for temperature in (1e-300, 1e-40, 1e-6):
        p = probabilities(logits, SamplingParams(temperature))
        assert np.all(np.isfinite(p)) and p[top] == pytest.approx(1.0)
    p = probabilities(logits, SamplingParams(1e30))
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0) and p.max() < 2 / 1000
