"""The thesis' five model families: tiny configs train, graphs have the unrolled
structure their knobs ask for, bad knobs fail with one line and exit 2."""

import collections

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn.models import resolve_knobs
from pardnn_builtin_models import FAMILIES, load_module
from pardnn.models import layers as L
from pardnn_builtin_models.char_crn import spellings
from pardnn_builtin_models.e3d import bouncing_squares

pytestmark = pytest.mark.tf
FIVE = ["word-rnn", "char-crn", "wrn", "transformer", "e3d"]


def _build(family, size="tiny", settings=()):
    module = load_module(family)
    return module.build(**resolve_knobs(module, size, settings))


def _losses(model, steps):
    with tf.compat.v1.Session(graph=model.graph) as session:
        session.run(model.init)
        return [float(session.run([model.train_op, model.loss], model.feed(i))[1]) for i in range(steps)]


def _ops(model):
    return collections.Counter(n.op for n in model.graph.as_graph_def().node)


@pytest.mark.parametrize("family", FIVE)
def test_tiny_config_trains_with_finite_changing_loss_reproducibly(family):
    losses = _losses(_build(family), 3)
    assert np.all(np.isfinite(losses))
    assert len(set(losses)) == 3                      # every step changed the model
    assert _losses(_build(family), 3) == losses       # same knobs, same seed: same run


@pytest.mark.parametrize("family", FIVE)
def test_named_configs_cover_tiny_and_both_thesis_sizes(family):
    module = load_module(family)
    assert {"tiny", "thesis", "thesis-2"} <= set(module.SIZES)
    assert set(module.THESIS_NODES) == {"thesis", "thesis-2"}
    assert family in FAMILIES and module.DESCRIPTION


def test_word_rnn_unrolls_one_lstm_matmul_per_layer_and_step():
    model = _build("word-rnn", settings=["layers=3", "seq=4"])
    # forward: 3 x 4 cell matmuls + the softmax projection; backward: two per matmul
    assert _ops(model)["MatMul"] == 3 * (3 * 4 + 1)
    assert model.feed(0)["inputs:0"].shape == (2, 4)


def test_char_crn_has_one_convolution_per_width_and_lstm_matmuls_per_step():
    ops = _ops(_build("char-crn", settings=["layers=2", "seq=3", "max_width=3", "highway=1"]))
    assert ops["Conv2D"] == 3                         # conv1d of widths 1..3, batched over words
    # LSTM 2 x 3 steps, highway gate + transform, softmax; three matmuls each with gradients
    assert ops["MatMul"] == 3 * (2 * 3 + 2 + 1)


def test_wrn_has_two_convolutions_per_block_plus_stem_and_shortcuts():
    ops = _ops(_build("wrn", settings=["units=3"]))
    # stem + 3 groups x 3 blocks x 2 + a projection shortcut opening each group
    assert ops["Conv2D"] == 1 + 3 * 3 * 2 + 3
    assert ops["ResourceApplyMomentum"] > 0 and "ResourceApplyAdam" not in ops


def test_transformer_attends_once_per_encoder_and_twice_per_decoder_layer():
    ops = _ops(_build("transformer", settings=["layers=3"]))
    assert ops["Softmax"] == 3 * 1 + 3 * 2
    assert ops["ResourceApplyAdam"] > 0


def test_e3d_unrolls_six_convolutions_per_cell_and_one_per_generated_frame():
    ops = _ops(_build("e3d", settings=["layers=2", "frames=5", "input_frames=3"]))
    assert ops["Conv3D"] == (5 - 1) * (2 * 6 + 1)
    # every layer recalls its cell history once per step: two batched matmuls, each
    # with two in the gradient
    assert ops["BatchMatMulV2"] == 3 * (5 - 1) * 2 * 2


def test_markov_tokens_follow_the_chain_nine_times_in_ten():
    tokens = L.markov_tokens(seed=3, step=1, batch=64, length=50, vocab=32)
    follows = tokens[:, 1:] == (5 * tokens[:, :-1] + 3) % 32
    assert tokens.dtype == np.int32 and 0 <= tokens.min() and tokens.max() < 32
    assert 0.85 < follows.mean() < 0.97
    assert np.array_equal(tokens, L.markov_tokens(3, 1, 64, 50, 32))
    assert not np.array_equal(tokens, L.markov_tokens(3, 2, 64, 50, 32))


def test_spellings_mark_word_boundaries_around_decimal_digits():
    table = spellings(vocab=12, word_len=5)
    assert table[7].tolist() == [1, 3 + 7, 2, 0, 0]
    assert table[11].tolist() == [1, 3 + 1, 3 + 1, 2, 0]


def test_bouncing_squares_are_one_3x3_square_per_frame_cut_into_patches():
    video = bouncing_squares(seed=0, step=0, batch=2, frames=6, image=8, patch=4)
    assert video.shape == (2, 6, 2, 2, 16)
    assert np.all(video.sum(axis=(2, 3, 4)) == 9)
    tile = video[0, 0, 0, 0].reshape(4, 4)            # patch (0, 0): rows 0-3, columns 0-3
    frame = bouncing_squares(0, 0, 2, 6, 8, 1)[0, 0, :, :, 0]
    assert np.array_equal(tile, frame[:4, :4])


def test_labelled_images_share_prototypes_across_steps():
    x0, y0 = L.labelled_images(seed=1, step=0, batch=8, shape=(2, 2, 1), classes=3)
    x1, y1 = L.labelled_images(seed=1, step=1, batch=8, shape=(2, 2, 1), classes=3)
    assert x0.dtype == np.float32 and y0.dtype == np.int32
    same = [(a, b) for a, ya in zip(x0, y0) for b, yb in zip(x1, y1) if ya == yb]
    other = [(a, b) for a, ya in zip(x0, y0) for b, yb in zip(x1, y1) if ya != yb]
    assert np.mean([np.abs(a - b).mean() for a, b in same]) < np.mean([np.abs(a - b).mean() for a, b in other])


@pytest.mark.parametrize("args, needle", [
    (["nosuch"], "unknown model family 'nosuch'"),
    (["wrn", "--size", "huge"], "unknown size 'huge'"),
    (["wrn", "--set", "depth=3"], "unknown knob 'depth' (choose from units,"),
    (["transformer", "--set", "layers=two"], "knob 'layers' takes int, got 'two'"),
    (["word-rnn", "--set", "layers=0"], "knob 'layers' must be at least 1, got 0"),
    (["wrn", "--set", "seed=-1"], "knob 'seed' must be at least 0, got -1"),
    (["char-crn", "--set", "dropout=1.5"], "knob 'dropout' must be in [0, 1), got 1.5"),
    (["char-crn", "--set", "word_len=4"], "knob 'word_len' (4) must be at least 3 and 'max_width' (6)"),
    (["transformer", "--set", "heads=3"], "knob 'model' (16) must be a multiple of 'heads' (3)"),
    (["e3d", "--set", "patch=3"], "knob 'image' (16) must be a multiple of 'patch' (3)"),
    (["e3d", "--set", "input_frames=20"], "knob 'input_frames' (20) must be in 1..frames-1 (19)"),
])
def test_bad_family_or_knob_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    out = tmp_path / "prof"
    code = main(["profile", *args, "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


README_NODES = {("word-rnn", "thesis"): 11434, ("word-rnn", "thesis-2"): 10279, ("char-crn", "thesis"): 22222}


@pytest.mark.slow
@pytest.mark.parametrize("family, size", [("word-rnn", "thesis"), ("word-rnn", "thesis-2"),
                                          ("char-crn", "thesis")])
def test_smaller_thesis_configs_reproduce_the_thesis_node_count(family, size):
    nodes = len(_build(family, size).graph.as_graph_def().node)
    assert nodes == README_NODES[family, size]              # the README's table
    assert abs(nodes / load_module(family).THESIS_NODES[size] - 1) <= 0.09   # worst today: 8.1%


def test_the_gist_of_an_error_is_its_cause():
    from pardnn.models import _gist
    node = ("Graph execution error:\n\nDetected at node 'x' defined at (most recent call last):\n"
            "  File \"a.py\", line 6, in build\nNode: 'x'\nYou must feed a value for placeholder tensor 'x'\n")
    assert _gist(Exception(node)) == "at node 'x': You must feed a value for placeholder tensor 'x'"
    place = "Graph execution error:\n\nCannot place the graph because a resource edge connects groups\n"
    assert _gist(Exception(place)) == "Cannot place the graph because a resource edge connects groups"
    assert _gist(ValueError("first line\nsecond")) == "first line"
