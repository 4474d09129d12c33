"""E3D: Eidetic 3D LSTM for video prediction (Wang et al., ICLR 2019).

Thesis Table 5.1 "E3D" (Moving MNIST; hidden 320, filter 5, patch 4: 55,756 graph
nodes; "E3D-2" hidden 512, patch 8: the same count). Follows the authors' TF 1
code (google/e3d_lstm): frames are cut into patch x patch tiles stacked as
channels; `layers` Eidetic 3D LSTM cells, each taking a window of 2 frames, are
unrolled over `frames - 1` steps with a spatio-temporal memory that zigzags up
the stack; each cell recalls its own cell history by attention (the "eidetic"
memory) and uses 3D convolutions for every gate, with layer normalisation; a
3D convolution turns the top hidden state into the next frame. Loss: L2 + L1 of
the predicted frames; Adam. The first `input_frames` steps see true frames and
later steps their own predictions (scheduled sampling's final state; the
sampling mask is left out).

The authors' Moving-MNIST model has 4 layers over 20 frames; that gives ~38k nodes
here against the thesis' 55,756 (whose graph is not published), so the named
configs use 6 layers to reproduce the node count (`--set layers=4` gives the
paper's stack). Tensor dimensions are small (hidden 8 channels, 16x16 or 32x32
frames instead of 64x64); layers and unrolled steps set the node count. The data are synthetic Moving-MNIST
stand-ins: a bright square bouncing in each sequence.
"""

import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import layers as L

DESCRIPTION = "Eidetic 3D LSTM video prediction, 3D-conv recurrent cells (thesis E3D)"

KNOBS = {"layers": 4, "hidden": 8, "filter": 5, "patch": 4, "image": 16, "frames": 20,
         "input_frames": 10, "batch": 2, "learning_rate": 0.001, "seed": 0}

SIZES = {
    "tiny": {"layers": 2, "hidden": 4, "filter": 3, "image": 8, "frames": 4, "input_frames": 2},
    "thesis": {"layers": 6, "hidden": 8, "patch": 4},
    "thesis-2": {"layers": 6, "hidden": 8, "patch": 8, "image": 32},
    # Table 5.1's hidden 320, filter 5, patch 4 on Moving MNIST's 64x64 frames, the 4-GPU
    # batch of Table 6.1; 6 layers as `thesis`.
    "real": {"layers": 6, "hidden": 320, "filter": 5, "patch": 4, "image": 64, "batch": 16},
}

# Graph nodes of the thesis configs (Table 5.1) that the named configs reproduce.
THESIS_NODES = {"thesis": 55756, "thesis-2": 55756}

_WINDOW = 2   # frames per cell input (the authors' window_length; stride 1)


def _conv(x, channels, kernel, name, time_stride=1):
    """A 3D convolution with bias, 'SAME' padding (tf.layers.conv3d in the original)."""
    with L.v1.variable_scope(name):
        w = L.weight("kernel", list(kernel) + [x.shape[-1], channels])
        b = L.weight("bias", [channels], "zeros")
    return tf.nn.bias_add(tf.nn.conv3d(x, w, [1, time_stride, 1, 1, 1], "SAME"), b)


def _recall(query, history):
    """Attention of the reset gate over the cell history (the eidetic memory)."""
    batch, channels = query.shape[0], query.shape[-1]
    q = tf.reshape(query, [batch, -1, channels])
    kv = tf.reshape(history, [batch, -1, channels])
    weights = tf.nn.softmax(tf.matmul(q, kv, transpose_b=True), axis=2)
    return tf.reshape(tf.matmul(weights, kv), query.shape)


def _cell(inputs, hidden, cell, memory, history, kernel, name):
    """One Eidetic 3D LSTM step; returns (hidden, cell, memory)."""
    channels = hidden.shape[-1]
    with L.v1.variable_scope(name):
        i_h, g_h, r_h, o_h = tf.split(L.layer_norm(_conv(hidden, 4 * channels, kernel, "h"), "ln_h", 1), 4, -1)
        x_gates = tf.split(L.layer_norm(_conv(inputs, 7 * channels, kernel, "x"), "ln_x", 1), 7, -1)
        i_x, g_x, r_x, o_x, ti_x, tg_x, tf_x = x_gates
        new_cell = cell + _recall(tf.sigmoid(r_x + r_h), history)
        new_cell = L.layer_norm(new_cell, "ln_c", 1) + tf.sigmoid(i_x + i_h) * tf.tanh(g_x + g_h)
        i_m, f_m, g_m, m_m = tf.split(L.layer_norm(_conv(memory, 4 * channels, kernel, "m"), "ln_m", 1), 4, -1)
        memory = (tf.sigmoid(tf_x + f_m + 1.0) * tf.tanh(m_m)
                  + tf.sigmoid(ti_x + i_m) * tf.tanh(tg_x + g_m))
        gate = tf.tanh(o_x + o_h + _conv(new_cell, channels, kernel, "o_c")
                       + _conv(memory, channels, kernel, "o_m"))
        fused = _conv(tf.concat([new_cell, memory], -1), channels, [1, 1, 1], "memory")
        return tf.tanh(fused) * tf.sigmoid(gate), new_cell, memory


def bouncing_squares(seed: int, step: int, batch: int, frames: int, image: int, patch: int):
    """[batch, frames, image/patch, image/patch, patch*patch] float32: a 3x3 square
    bouncing off the walls, cut into patches as the original's reshape_patch does."""
    gen = L.rng(seed, step)
    video = np.zeros((batch, frames, image, image), np.float32)
    top = image - 3
    pos = gen.integers(0, top + 1, (batch, 2))
    vel = gen.choice([-2, -1, 1, 2], (batch, 2))
    for t in range(frames):
        for b in range(batch):
            video[b, t, pos[b, 0]:pos[b, 0] + 3, pos[b, 1]:pos[b, 1] + 3] = 1.0
        pos = pos + vel
        vel = np.where((pos < 0) | (pos > top), -vel, vel)
        pos = np.clip(pos, 0, top)
    side = image // patch
    tiles = video.reshape(batch, frames, side, patch, side, patch).transpose(0, 1, 2, 4, 3, 5)
    return np.ascontiguousarray(tiles.reshape(batch, frames, side, side, patch * patch))


def _check(patch, image, frames, input_frames):
    if image % patch:
        raise UserError(f"--set: knob 'image' ({image}) must be a multiple of 'patch' ({patch})")
    if not 1 <= input_frames < frames:
        raise UserError(f"--set: knob 'input_frames' ({input_frames}) must be in 1..frames-1 ({frames - 1})")


def build(layers, hidden, filter, patch, image, frames, input_frames, batch, learning_rate, seed):
    """The training graph; feeds "frames" ([batch, frames, image/patch, image/patch, patch**2])."""
    L.require_positive(layers=layers, hidden=hidden, filter=filter, patch=patch, image=image,
                       batch=batch)
    _check(patch, image, frames, input_frames)
    v1 = L.v1
    side, channels, kernel = image // patch, patch * patch, [_WINDOW, filter, filter]
    with L.training_graph(seed) as graph:
        video = v1.placeholder(tf.float32, [batch, frames, side, side, channels], "frames")
        zero = tf.zeros([batch, _WINDOW, side, side, hidden])
        hiddens, cells, memory, history = [zero] * layers, [zero] * layers, zero, [None] * layers
        window = [tf.zeros([batch, side, side, channels])] * (_WINDOW - 1)
        generated = []
        for t in range(frames - 1):
            window.append(video[:, t] if t < input_frames else generated[-1])
            x = tf.stack(window[-_WINDOW:], axis=1)
            for i in range(layers):
                history[i] = cells[i] if t == 0 else tf.concat([history[i], cells[i]], 1)
                with v1.variable_scope(f"layer_{i}", reuse=v1.AUTO_REUSE):
                    hiddens[i], cells[i], memory = _cell(x, hiddens[i], cells[i], memory, history[i],
                                                         kernel, "cell")
                x = hiddens[i]
            with v1.variable_scope("generate", reuse=v1.AUTO_REUSE):
                frame = _conv(x, channels, [_WINDOW, 1, 1], "frame", time_stride=_WINDOW)
            generated.append(tf.squeeze(frame, 1))
        error = tf.stack(generated, 1) - video[:, 1:]
        loss = tf.nn.l2_loss(error) + tf.reduce_sum(tf.abs(error))
        optimizer = v1.train.AdamOptimizer(learning_rate)

    def feed(step):
        return {video.name: bouncing_squares(seed, step, batch, frames, image, patch)}

    return L.finish(graph, loss, optimizer, feed, seed)
