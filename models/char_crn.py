"""Char-CRN: the character-aware neural language model of Kim et al. (AAAI 2016).

Thesis Table 5.1 "Char-CRN" (PTB; 8 LSTM layers: 22,748 graph nodes; 32 layers:
86,663). Every word is spelled as characters; a character embedding (dimension
15, the table's ED) feeds convolutions of widths 1..max_width with
`maps_per_width * width` feature maps each, tanh and max-over-time pooling; then
highway layers; then a stack of LSTM layers unrolled over the word sequence with
dropout between layers; a softmax over the word vocabulary. Optimiser as in the
paper: plain SGD (learning rate 1.0) with gradients clipped to global norm 5.

The thesis does not give its sequence length; the named configs unroll the
paper's 35 words, which reproduces the thesis node counts (LSTM layers times
steps dominate the count). Words, their spellings and the text are synthetic
(layers.markov_tokens; a word's characters are its id's decimal digits).
"""

import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import layers as L

DESCRIPTION = "character-aware LM: char CNN + highway + unrolled LSTM stack (thesis Char-CRN)"

KNOBS = {"layers": 2, "hidden": 32, "seq": 10, "vocab": 64, "word_len": 6, "char_embed": 15,
         "max_width": 6, "maps_per_width": 4, "highway": 2, "dropout": 0.5, "batch": 4,
         "learning_rate": 1.0, "grad_clip": 5.0, "seed": 0}

SIZES = {
    "tiny": {"layers": 2, "hidden": 16, "seq": 4, "vocab": 32, "max_width": 3,
             "maps_per_width": 2, "highway": 1, "batch": 2},
    "thesis": {"layers": 8, "hidden": 32, "seq": 35},
    "thesis-2": {"layers": 32, "hidden": 32, "seq": 35},
    # Table 5.1's dimensions (LSTM hidden 2048, char embedding 15), the 4-GPU batch of
    # Table 6.1, PTB's 10k words; char CNN as the paper's small model (25 x width maps),
    # words up to 21 characters.
    "real": {"layers": 8, "hidden": 2048, "seq": 35, "vocab": 10000, "word_len": 21,
             "maps_per_width": 25, "batch": 512},
}

# Graph nodes of the thesis configs (Table 5.1) that the named configs reproduce.
THESIS_NODES = {"thesis": 22748, "thesis-2": 86663}

_CHARS = 13   # padding 0, begin-of-word 1, end-of-word 2, digits 3..12


def spellings(vocab: int, word_len: int) -> np.ndarray:
    """[vocab, word_len] character ids: begin mark, the id's decimal digits, end mark, padding."""
    table = np.zeros((vocab, word_len), np.int32)
    for word in range(vocab):
        chars = [1] + [3 + int(d) for d in str(word)][: word_len - 2] + [2]
        table[word, : len(chars)] = chars
    return table


def _char_cnn(chars, max_width, maps_per_width):
    """Convolutions of widths 1..max_width over each word, tanh, max over time; concatenated."""
    pooled = []
    for width in range(1, max_width + 1):
        with L.v1.variable_scope(f"conv_{width}"):
            kernel = L.weight("kernel", [width, chars.shape[-1], maps_per_width * width])
            bias = L.weight("bias", [maps_per_width * width], "zeros")
        feature = tf.tanh(tf.nn.bias_add(tf.nn.conv1d(chars, kernel, 1, "VALID"), bias))
        pooled.append(tf.reduce_max(feature, axis=1))
    return tf.concat(pooled, 1)


def _highway(y, name):
    """z = t * relu(W_H y + b_H) + (1 - t) * y with t = sigmoid(W_T y + b_T), b_T from -2."""
    with L.v1.variable_scope(name):
        gate_w = L.weight("gate_kernel", [y.shape[-1], y.shape[-1]])
        gate_b = L.v1.get_variable("gate_bias", [y.shape[-1]], tf.float32,
                                   initializer=L.v1.constant_initializer(-2.0), use_resource=True)
    gate = tf.sigmoid(tf.nn.bias_add(tf.matmul(y, gate_w), gate_b))
    return gate * L.dense(y, y.shape[-1], name + "/transform", tf.nn.relu) + (1.0 - gate) * y


def build(layers, hidden, seq, vocab, word_len, char_embed, max_width, maps_per_width, highway,
          dropout, batch, learning_rate, grad_clip, seed):
    """The training graph; feeds "chars" ([batch, seq, word_len]) and "targets" ([batch, seq])."""
    L.require_positive(layers=layers, hidden=hidden, seq=seq, vocab=vocab, word_len=word_len,
                       char_embed=char_embed, max_width=max_width, maps_per_width=maps_per_width,
                       batch=batch)
    L.require_fraction(dropout=dropout)
    if word_len < max(3, max_width):
        raise UserError(f"--set: knob 'word_len' ({word_len}) must be at least 3 and 'max_width' ({max_width})")
    v1 = L.v1
    with L.training_graph(seed) as graph:
        chars = v1.placeholder(tf.int32, [batch, seq, word_len], "chars")
        targets = v1.placeholder(tf.int32, [batch, seq], "targets")
        table = L.weight("char_embedding", [_CHARS, char_embed])
        embedded = tf.nn.embedding_lookup(table, tf.reshape(chars, [batch * seq, word_len]))
        y = _char_cnn(embedded, max_width, maps_per_width)
        for i in range(highway):
            y = _highway(y, f"highway_{i}")
        steps = tf.unstack(tf.reshape(y, [batch, seq, y.shape[-1]]), axis=1)
        outputs = []
        state = [(tf.zeros([batch, hidden]), tf.zeros([batch, hidden])) for _ in range(layers)]
        cells = []
        for i in range(layers):
            with v1.variable_scope(f"lstm_{i}"):
                width = (steps[0].shape[-1] if i == 0 else hidden) + hidden
                cells.append((L.weight("kernel", [width, 4 * hidden]),
                              L.weight("bias", [4 * hidden], "zeros")))
        for x in steps:
            for i, (kernel, bias) in enumerate(cells):
                state[i] = L.lstm_step(L.dropout(x, dropout), *state[i], kernel, bias)
                x = state[i][0]
            outputs.append(L.dropout(x, dropout))
        logits = L.dense(tf.reshape(tf.concat(outputs, 1), [-1, hidden]), vocab, "softmax")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(targets, [-1]), logits=logits))
        optimizer = v1.train.GradientDescentOptimizer(learning_rate)
    spelled = spellings(vocab, word_len)

    def feed(step):
        words = L.markov_tokens(seed, step, batch, seq + 1, vocab)
        return {chars.name: spelled[words[:, :-1]], targets.name: words[:, 1:]}

    return L.finish(graph, loss, optimizer, feed, seed, grad_clip)
